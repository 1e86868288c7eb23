package local

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/bus"
	"termlink/server/record"
	"termlink/server/session"
	"termlink/server/wal"
)

// putQueue is a record.Queue that keeps what is put to it; atOnce is
// StartsAtOnce's answer.
type putQueue struct {
	atOnce bool
	puts   []bus.Inbound
}

func (q *putQueue) ReserveFirst(string, int) (bool, error)         { return true, nil }
func (q *putQueue) ReserveWait(context.Context, string, int) error { return nil }
func (q *putQueue) Release(string)                                 {}
func (q *putQueue) MaxWaiting() int                                { return 100 }
func (q *putQueue) StartsAtOnce(string) bool                       { return q.atOnce }
func (q *putQueue) Put(_ context.Context, in bus.Inbound) error {
	q.puts = append(q.puts, in)
	return nil
}
func (q *putQueue) Dispatch(context.Context, bus.Outbound) error { return nil }
func (q *putQueue) Cancel(string, string) bool                   { return false }
func (q *putQueue) NewRunID() string                             { return "run" }
func (q *putQueue) last() bus.Inbound                            { return q.puts[len(q.puts)-1] }
func (q *putQueue) accept(t *testing.T, s *Store, id string) bus.Inbound {
	t.Helper()
	in := bus.Inbound{ChannelID: "terminal-dev", PeerID: "p", SessionKey: "terminal-dev:local:p", MessageID: id,
		RunID: "run-" + id, Text: "hi " + id, Received: time.Now()}
	if err := s.Accept(context.Background(), in, 10, func(record.Accepted) {}); err != nil {
		t.Fatal(err)
	}
	return q.last()
}

// A message's start is recorded once: with the message when its session
// is idle (Accept), with the reply before it when it is taken as the
// next (Finish), else by Start; Start writes nothing for the first two.
// The same through the message's handle on its dedupe entry
// (bus.Inbound.Ref, as the router carries it) and without one (looked
// up), and a duplicate of an answered message gets its reply either way.
func TestStartRecordedOnce(t *testing.T) {
	for _, byRef := range []bool{true, false} {
		t.Run(map[bool]string{true: "ref", false: "lookup"}[byRef], func(t *testing.T) {
			dir := t.TempDir()
			ss, err := session.Open(filepath.Join(dir, "sessions"), session.Options{NoSync: true, SyncLater: true, WriteBehind: true, Logger: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			defer ss.Close()
			q := &putQueue{atOnce: true}
			s, err := Open(filepath.Join(dir, "wal"), ss, q, Options{Logger: quietLog(), WAL: wal.Options{NoSync: true},
				DedupePerSession: 1024, DedupeBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ref := func(in bus.Inbound) bus.Inbound {
				if in.Ref == nil {
					t.Fatalf("%s put without its dedupe entry", in.MessageID)
				}
				if !byRef {
					in.Ref = nil
				}
				return in
			}
			ctx := context.Background()
			m1 := ref(q.accept(t, s, "m1")) // idle session: its start with it
			q.atOnce = false
			m2 := ref(q.accept(t, s, "m2")) // waits behind m1
			m3 := ref(q.accept(t, s, "m3")) // waits behind m2
			for _, step := range []struct {
				in   bus.Inbound
				next *bus.Inbound
			}{{m1, &m2}, {m2, nil}, {m3, nil}} {
				if _, ok := s.Start(ctx, ctx, step.in); !ok {
					t.Fatalf("%s not started", step.in.MessageID)
				}
				reply := &link.Message{Role: link.RoleAssistant, MessageID: step.in.MessageID, RunID: step.in.RunID, Text: "re " + step.in.MessageID}
				if !s.Finish(ctx, step.in, reply, nil, step.next) {
					t.Fatalf("%s not finished", step.in.MessageID)
				}
			}
			sess, err := ss.Load("terminal-dev:local:p")
			if err != nil {
				t.Fatal(err)
			}
			starts := map[string]int{}
			for _, r := range sess.Records {
				if r.Extra["event"] == record.EventStarted {
					starts[r.MessageID]++
				}
			}
			for _, id := range []string{"m1", "m2", "m3"} {
				if starts[id] != 1 {
					t.Fatalf("%s: %d run_started records, want 1 (all: %v)", id, starts[id], starts)
				}
			}
			var dup record.Accepted
			if err := s.Accept(ctx, bus.Inbound{ChannelID: "terminal-dev", PeerID: "p", SessionKey: "terminal-dev:local:p",
				MessageID: "m2", RunID: "run-x", Text: "hi m2", Received: time.Now()}, 10, func(a record.Accepted) { dup = a }); err != nil {
				t.Fatal(err)
			}
			if !dup.Duplicate || dup.Reply == nil || dup.Reply.Text != "re m2" {
				t.Fatalf("duplicate of m2: %+v, want its reply", dup)
			}
			if st := s.DedupeStats(); st.Bytes <= 0 {
				t.Fatalf("dedupe stats %+v", st)
			}
		})
	}
}
