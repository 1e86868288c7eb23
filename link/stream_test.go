package link_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/link/linktest"
)

// streamServer is a scripted server that acks every message and hands it
// to the test on msgs.
func streamServer(t *testing.T) (*linktest.Server, chan *link.Message) {
	srv := linktest.New(t)
	msgs := make(chan *link.Message, 16)
	srv.OnMessage(func(s *linktest.Server, m *link.Message) {
		_ = s.Send(&link.Ack{MessageID: m.MessageID, SessionID: "s", Accepted: true})
		select { // never blocks the reader: the test reads what it waits for
		case msgs <- m:
		default:
		}
	})
	return srv, msgs
}

func nextMessage(t *testing.T, msgs chan *link.Message) *link.Message {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(testwait.Deadline):
		t.Fatal("the server got no message")
		return nil
	}
}

func mustSend(t *testing.T, srv *linktest.Server, frames ...link.Frame) {
	t.Helper()
	if err := srv.Send(frames...); err != nil {
		t.Fatal(err)
	}
}

// logTo is a logger writing text lines into buf.
func logTo(buf *syncbuf.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// The option lists "stream" in connect; each delta of a message waiting
// for its answer is an EventDelta whose Text is all the text so far; the
// final reply follows them, and nothing of the stream after it.
func TestStreamDeltasAccumulate(t *testing.T) {
	srv, msgs := streamServer(t)
	d := newDevice(t, link.ClientConfig{URL: srv.URL(), Stream: true})
	id := d.send("tell me")
	m := nextMessage(t, msgs)
	if c := srv.Connect(0); !slices.Contains(c.Capabilities, link.CapStream) {
		t.Fatalf("connect lists %v, want %q in it", c.Capabilities, link.CapStream)
	}
	pieces := []string{"Once ", "upon a ", "time, ", "there wäs ", "a tiny LCD."}
	full := strings.Join(pieces, "")
	for i, p := range pieces {
		mustSend(t, srv, &link.Delta{MessageID: m.MessageID, Seq: int64(i + 1), Text: p})
		want := strings.Join(pieces[:i+1], "")
		// Each one is waited for: then none can be coalesced away.
		d.waitFor("delta "+want, 10*time.Second, func() bool {
			return len(d.deltas) > 0 && d.deltas[len(d.deltas)-1].Text == want
		})
	}
	mustSend(t, srv, linktest.Reply(m.MessageID, full, link.FinishStop))
	d.waitReplies([]string{id}, 10*time.Second)
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.deltas) != len(pieces) {
		t.Fatalf("%d delta events, want %d", len(d.deltas), len(pieces))
	}
	for i, e := range d.deltas {
		if e.MessageID != id || e.Seq != int64(i+1) || e.Final {
			t.Errorf("delta %d: %+v", i, e)
		}
	}
	if last := d.all[len(d.all)-1]; last.Kind != link.EventReply || last.Reply.Text != full {
		t.Fatalf("the last event is %v, want the reply %q", last, full)
	}
	if st := d.Stats(); st.Deltas != int64(len(pieces)) || st.DeltasIgnored != 0 {
		t.Fatalf("stats: %d deltas, %d ignored; want %d, 0", st.Deltas, st.DeltasIgnored, len(pieces))
	}
}

// Without the option the client does not list "stream" and reports no
// delta a server sends anyway (logged); listing CapStream in Capabilities
// is the same as the option.
func TestStreamOptIn(t *testing.T) {
	srv, msgs := streamServer(t)
	var logs syncbuf.Buffer
	d := newDevice(t, link.ClientConfig{URL: srv.URL(), Logger: logTo(&logs)})
	id := d.send("hi")
	m := nextMessage(t, msgs)
	if c := srv.Connect(0); slices.Contains(c.Capabilities, link.CapStream) {
		t.Fatalf("connect lists %v without the option", c.Capabilities)
	}
	mustSend(t, srv, &link.Delta{MessageID: m.MessageID, Seq: 1, Text: "partial"}, linktest.Reply(m.MessageID, "whole", link.FinishStop))
	d.waitReplies([]string{id}, 10*time.Second)
	waitStats(t, d, func(s link.ClientStats) bool { return s.DeltasIgnored == 1 })
	d.mu.Lock()
	n := len(d.deltas)
	d.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d delta events without the option", n)
	}
	if !strings.Contains(logs.String(), "did not list stream") {
		t.Fatalf("the log does not say why the delta was ignored:\n%s", logs.String())
	}

	c, err := link.NewClient(link.ClientConfig{URL: srv.URL(), PeerID: "p", Outbox: link.NewMemoryOutbox(),
		Capabilities: []string{link.CapText, link.CapStream}, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	srv.WaitFor(t, "the second connect", 10*time.Second, func() bool { return srv.Connects() >= 2 })
	if caps := srv.Connect(1).Capabilities; !slices.Equal(caps, []string{link.CapText, link.CapStream}) {
		t.Fatalf("connect lists %v, want text and stream once", caps)
	}
	cancel()
	<-done
}

func waitStats(t *testing.T, d *device, cond func(link.ClientStats) bool) link.ClientStats {
	t.Helper()
	var st link.ClientStats
	testwait.UntilOK(t, "the client's stats", func() error {
		if st = d.Stats(); !cond(st) {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	return st
}

// A reconnect mid-stream: the first delta of the new connection (seq 1)
// carries all the text so far and replaces what the client had; it is
// not appended.
func TestStreamReconnectReplaces(t *testing.T) {
	srv, msgs := streamServer(t)
	cfg := link.ClientConfig{URL: srv.URL(), Stream: true}
	fastRetry(&cfg)
	d := newDevice(t, cfg)
	id := d.send("story")
	m := nextMessage(t, msgs)
	mustSend(t, srv, &link.Delta{MessageID: m.MessageID, Seq: 1, Text: "abc"}, &link.Delta{MessageID: m.MessageID, Seq: 2, Text: "def"})
	d.waitFor("abcdef", 10*time.Second, func() bool { return len(d.deltas) > 0 && d.deltas[len(d.deltas)-1].Text == "abcdef" })
	srv.Drop()
	m2 := nextMessage(t, msgs) // resent on the new connection
	if m2.MessageID != m.MessageID {
		t.Fatalf("resent %s, want %s", m2.MessageID, m.MessageID)
	}
	mustSend(t, srv, &link.Delta{MessageID: id, Seq: 1, Text: "abcdefgh"}, &link.Delta{MessageID: id, Seq: 2, Text: "ij"})
	d.waitFor("abcdefghij", 10*time.Second, func() bool { return len(d.deltas) > 0 && d.deltas[len(d.deltas)-1].Text == "abcdefghij" })
	mustSend(t, srv, linktest.Reply(id, "abcdefghij!", link.FinishStop))
	d.waitReplies([]string{id}, 10*time.Second)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.deltas {
		if !strings.HasPrefix("abcdefghij", e.Text) {
			t.Errorf("delta #%d has %q: not a prefix of the text (appended instead of replaced?)", e.Seq, e.Text)
		}
	}
}

// A gap, a duplicate, a delta for a message not waiting and one after
// the final reply are ignored, each logged with its reason; the text
// shown never has their pieces.
func TestStreamIgnoresBadDeltas(t *testing.T) {
	srv, msgs := streamServer(t)
	var logs syncbuf.Buffer
	d := startDevice(t, link.ClientConfig{URL: srv.URL(), Stream: true, Logger: logTo(&logs)}, false)
	id := d.send("q")
	nextMessage(t, msgs)
	mustSend(t, srv,
		&link.Delta{MessageID: id, Seq: 1, Text: "a"},
		&link.Delta{MessageID: id, Seq: 1, Text: "X"},         // duplicate
		&link.Delta{MessageID: id, Seq: 2, Text: "b"},         // taken
		&link.Delta{MessageID: "m-nobody", Seq: 1, Text: "Y"}, // unknown
		&link.Delta{MessageID: id, Seq: 4, Text: "Z"},         // gap
		&link.Delta{MessageID: id, Seq: 5, Text: "W"},         // after the gap
		linktest.Reply(id, "ab and the rest", link.FinishStop),
		&link.Delta{MessageID: id, Seq: 6, Text: "V"}, // after the final
	)
	d.waitReplies([]string{id}, 10*time.Second)
	st := waitStats(t, d, func(s link.ClientStats) bool { return s.Deltas+s.DeltasIgnored == 7 })
	if st.Deltas != 2 || st.DeltasIgnored != 5 {
		t.Fatalf("%d deltas taken, %d ignored; want 2, 5", st.Deltas, st.DeltasIgnored)
	}
	d.mu.Lock()
	for _, e := range d.deltas {
		if e.Text != "a" && e.Text != "ab" {
			t.Errorf("delta event with %q", e.Text)
		}
	}
	last := d.all[len(d.all)-1]
	d.mu.Unlock()
	if last.Kind != link.EventReply {
		t.Fatalf("an event after the final reply: %v", last)
	}
	// The client counts an ignored delta before it logs why: the count
	// of 7 does not prove the last line (the delta after the final
	// reply) is written yet. Each line is waited for.
	testwait.UntilOK(t, "the log to say why each delta was ignored", func() error {
		log := logs.String()
		for _, want := range []string{
			"duplicate: seq 1, this connection is at 1",
			"no message waiting for its answer has that id",
			"gap: seq 4 after 2",
			"after a gap at seq 4",
			"its final reply is in already",
		} {
			if !strings.Contains(log, want) {
				return fmt.Errorf("it does not say %q:\n%s", want, log)
			}
		}
		return nil
	})
	if err := d.Delivered(id); err != nil {
		t.Fatal(err)
	}
	// Confirmed: a delta now is for a message not waiting.
	mustSend(t, srv, &link.Delta{MessageID: id, Seq: 7, Text: "U"})
	waitStats(t, d, func(s link.ClientStats) bool { return s.DeltasIgnored == 6 })
}

// The first delta of a connection must be seq 1: a later one is a gap.
func TestStreamFirstDeltaMustBeOne(t *testing.T) {
	srv, msgs := streamServer(t)
	var logs syncbuf.Buffer
	d := newDevice(t, link.ClientConfig{URL: srv.URL(), Stream: true, Logger: logTo(&logs)})
	id := d.send("q")
	nextMessage(t, msgs)
	mustSend(t, srv, &link.Delta{MessageID: id, Seq: 2, Text: "b"}, &link.Delta{MessageID: id, Seq: 3, Text: "c"})
	waitStats(t, d, func(s link.ClientStats) bool { return s.DeltasIgnored == 2 })
	if !strings.Contains(logs.String(), "the first delta on this connection has seq 2, want 1") {
		t.Fatalf("log:\n%s", logs.String())
	}
}

// A caller that does not read while a flood of deltas arrives: the event
// queue stays bounded (deltas coalesce, the latest text wins), the
// accumulated text stops at MaxStreamBytes, and once the final reply is
// in, no delta of the message reaches the caller after it.
func TestStreamFloodBoundedAndFinalSupersedes(t *testing.T) {
	srv, msgs := streamServer(t)
	var logs syncbuf.Buffer
	c, err := link.NewClient(link.ClientConfig{URL: srv.URL(), PeerID: "flood", Outbox: link.NewMemoryOutbox(),
		Stream: true, MaxStreamBytes: 1000, Logger: logTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	id, err := c.Send(ctx, "flood me")
	if err != nil {
		t.Fatal(err)
	}
	nextMessage(t, msgs)
	const n = 5000
	var full strings.Builder
	frames := make([]link.Frame, 0, n+1)
	for i := 1; i <= n; i++ {
		p := fmt.Sprintf("%d ", i)
		full.WriteString(p)
		frames = append(frames, &link.Delta{MessageID: id, Seq: int64(i), Text: p})
	}
	frames = append(frames, linktest.Reply(id, full.String(), link.FinishStop))
	mustSend(t, srv, frames...)
	testwait.Until(t, "the reply", func() bool { return c.Stats().Replies > 0 })
	st := c.Stats()
	if st.Deltas != n {
		t.Fatalf("%d deltas taken, want %d", st.Deltas, n)
	}
	if st.MaxQueuedEvents > 8 {
		t.Fatalf("%d events waited at once: the deltas did not coalesce", st.MaxQueuedEvents)
	}
	// Now read. The dispatcher holds the first event (a state event: it
	// was queued before anything else and nobody read it); the deltas
	// coalesced behind it, and the reply removed them: the reply is the
	// first event of the message.
	var got []link.Event
	for e := range c.Events() {
		if e.Kind == link.EventState || e.Kind == link.EventAck {
			continue
		}
		got = append(got, e)
		if e.Kind == link.EventReply {
			break
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d delta events reached the caller with the reply in (%v first)", len(got)-1, got[0].Kind)
	}
	if reply := got[0]; reply.Reply.Text != full.String() {
		t.Fatalf("reply of %d bytes, want %d", len(reply.Reply.Text), full.Len())
	}
	if !strings.Contains(logs.String(), "streamed text cut") {
		t.Fatalf("the cut is not logged:\n%s", logs.String())
	}
}

// The text is cut at MaxStreamBytes on a rune boundary, and deltas
// past it still count (the seq goes on) but bring no event.
func TestStreamTextBounded(t *testing.T) {
	srv, msgs := streamServer(t)
	d := newDevice(t, link.ClientConfig{URL: srv.URL(), Stream: true, MaxStreamBytes: 10})
	id := d.send("q")
	nextMessage(t, msgs)
	mustSend(t, srv, &link.Delta{MessageID: id, Seq: 1, Text: "abcdefgh"}, &link.Delta{MessageID: id, Seq: 2, Text: "ïïï"},
		&link.Delta{MessageID: id, Seq: 3, Text: "more"})
	waitStats(t, d, func(s link.ClientStats) bool { return s.Deltas == 3 })
	d.waitFor("the cut text", 10*time.Second, func() bool { return len(d.deltas) > 0 && d.deltas[len(d.deltas)-1].Text == "abcdefghï" })
	mustSend(t, srv, &link.Delta{MessageID: id, Seq: 5, Text: "gap"}) // still checked
	waitStats(t, d, func(s link.ClientStats) bool { return s.DeltasIgnored == 1 })
}
