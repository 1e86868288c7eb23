// Package recordtest is the contract every store of record passes on
// the message path (record.Store and the parts it has, composed as the
// server composes them): a message id seen before is answered as a
// duplicate (pending while its run goes, its reply once finished) and
// queued once, also past the session's bound (under record.TakeNone no
// new message is taken, a duplicate still answered); a message is durable when it is acked (a store closed
// after the ack runs it when opened again); a session's messages are
// queued and started in the order accepted; Finish records the reply
// before it is sent, so a duplicate gets it even if it was never
// delivered; a message cancelled before its start is answered
// cancelled; and a message started and not answered when the store
// closed runs again at most once, its second start recorded
// interrupted (record.EventInterrupted), a third start answered with an
// error instead of a run. Package record/local runs it on the
// workspace's store, package cluster on JetStream's (an embedded NATS);
// what only one store does (the write-ahead log's crash and replay, two
// nodes at once, partitions moving) each tests on its own.
//
// The other side of the store is a Queue, the contract's own router:
// the tests take each message from it and start, finish and deliver it
// as the router and the runtime do. They wait for events, never for
// time; the one bound is the context's (testwait.Deadline).
package recordtest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/record"
	"termlink/server/session"
)

// Store is a store of record under test.
type Store struct {
	// Open opens a handle on the store that queues what it takes on q.
	// Each call is another handle on the same store: the workspace
	// opened again once the previous handle is closed, or another node
	// (a new worker and edge) once the previous one is closed. The
	// contract runs the handle's Lifecycle, if any, recovers what its
	// Recoverer returns and closes the handle.
	Open func(t *testing.T, q *Queue) record.Parts
	// History is the records the store keeps of a session: what a
	// handle open now reads (the session file; the cluster's history
	// stream, which holds a message's turn once it is answered).
	History func(t *testing.T, sessionKey string) []session.Record
}

// NewStore makes a new, empty store.
type NewStore func(t *testing.T) Store

// Run runs the contract.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Dedupe", func(t *testing.T) { dedupe(t, newStore(t)) })
	t.Run("Order", func(t *testing.T) { order(t, newStore(t)) })
	t.Run("ReplyRecordedBeforeSent", func(t *testing.T) { replyRecorded(t, newStore(t)) })
	t.Run("CancelBeforeStart", func(t *testing.T) { cancelBeforeStart(t, newStore(t)) })
	t.Run("DurableAtAck", func(t *testing.T) { durableAtAck(t, newStore(t)) })
	t.Run("Interrupted", func(t *testing.T) { interrupted(t, newStore(t)) })
	t.Run("InterruptedTwice", func(t *testing.T) { interruptedTwice(t, newStore(t)) })
	t.Run("Busy", func(t *testing.T) { busy(t, newStore(t)) })
	t.Run("TakeNone", func(t *testing.T) { takeNone(t, newStore(t)) })
}

// The one session the tests use (a terminal session id: channel,
// account, peer).
const (
	channelID  = "ch"
	peerID     = "dev"
	sessionKey = "ch:acc:dev"
	// perSession is the waiting bound Accept is given (Busy sets its own).
	perSession = 64
)

// handle is a store's handle as the server composes it.
type handle struct {
	t      *testing.T
	parts  record.Parts
	q      *Queue
	once   sync.Once
	closed error
}

// open opens a handle: its loops run (Lifecycle), the device is
// connected here (Edge), what it recovers is queued as the server's
// Start queues it (Recoverer).
func open(t *testing.T, ctx context.Context, st Store) *handle {
	t.Helper()
	q := NewQueue(256)
	h := &handle{t: t, parts: st.Open(t, q), q: q}
	t.Cleanup(func() { h.close() })
	if l := h.parts.Lifecycle; l != nil {
		if err := l.Run(q.Cancel, func() int { return 1 }); err != nil {
			t.Fatal(err)
		}
	}
	if r := h.parts.Recoverer; r != nil {
		recovered, err := r.Recover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range recovered {
			if !in.Recovered {
				t.Errorf("recovered message %s not marked Recovered", in.MessageID)
			}
			if err := q.ReserveWait(ctx, in.SessionKey, perSession); err != nil {
				t.Fatal(err)
			}
			if err := q.Put(ctx, in); err != nil {
				t.Fatal(err)
			}
		}
	}
	if e := h.parts.Edge; e != nil {
		e.Connected(channelID, peerID)
	}
	return h
}

// close stops the handle's runs (Lifecycle) and closes it, once: a run
// the test started and did not finish is cut short, as by a crash.
func (h *handle) close() {
	h.once.Do(func() {
		if l := h.parts.Lifecycle; l != nil {
			l.StopRuns()
		}
		h.closed = h.parts.Close()
	})
	if h.closed != nil {
		h.t.Errorf("close: %v", h.closed)
	}
}

// message is a new message of the session.
func (h *handle) message(id, text string) bus.Inbound {
	return bus.Inbound{ChannelID: channelID, AccountID: "acc", PeerID: peerID, SessionKey: sessionKey, MessageID: id,
		RunID: h.q.NewRunID(), Text: text, Received: time.Now()}
}

// accept offers in and returns the ack; ack is called exactly once
// when Accept returns nil, never when it fails.
func (h *handle) accept(ctx context.Context, in bus.Inbound, bound int) (record.Accepted, error) {
	h.t.Helper()
	var acks []record.Accepted
	err := h.parts.Accept(ctx, in, bound, func(a record.Accepted) { acks = append(acks, a) })
	switch {
	case err != nil && len(acks) > 0:
		h.t.Fatalf("accept %s failed (%v) and acked %+v", in.MessageID, err, acks)
	case err == nil && len(acks) != 1:
		h.t.Fatalf("accept %s: %d acks, want 1", in.MessageID, len(acks))
	case err != nil:
		return record.Accepted{}, err
	}
	return acks[0], nil
}

// acceptNew accepts in, a message the store has not seen.
func (h *handle) acceptNew(ctx context.Context, in bus.Inbound) {
	h.t.Helper()
	a, err := h.accept(ctx, in, perSession)
	if err != nil {
		h.t.Fatalf("accept %s: %v", in.MessageID, err)
	}
	if a.Duplicate || a.Pending || a.Reply != nil {
		h.t.Fatalf("accept of new message %s: %+v, want a new message's ack", in.MessageID, a)
	}
}

// duplicate accepts in again and returns the duplicate's ack.
func (h *handle) duplicate(ctx context.Context, in bus.Inbound) record.Accepted {
	h.t.Helper()
	dup := in
	dup.RunID, dup.Received = h.q.NewRunID(), time.Now()
	a, err := h.accept(ctx, dup, perSession)
	if err != nil {
		h.t.Fatalf("accept of duplicate %s: %v", in.MessageID, err)
	}
	if !a.Duplicate {
		h.t.Fatalf("accept of %s again: %+v, want a duplicate", in.MessageID, a)
	}
	return a
}

// next takes the session's next message and checks it is want, not
// cancelled.
func (h *handle) next(ctx context.Context, want string) bus.Inbound {
	h.t.Helper()
	in, cancelled, err := h.q.Next(ctx, sessionKey)
	if err != nil {
		h.t.Fatalf("waiting for %s to be queued: %v", want, err)
	}
	if in.MessageID != want || cancelled {
		h.t.Fatalf("queued next: %s (cancelled %v), want %s", in.MessageID, cancelled, want)
	}
	return in
}

// runAfterCopies takes the session's queue until id and runs it with
// text. A message handed before it is a copy a store queued again (its
// delivery never acknowledged): it is started, its start's answer must
// pass check (which fails the test otherwise), and that answer is
// recorded and delivered.
func (h *handle) runAfterCopies(ctx context.Context, id, text string, check func(in bus.Inbound, answer *agent.Result, ok bool)) {
	h.t.Helper()
	for {
		in, cancelled, err := h.q.Next(ctx, sessionKey)
		if err != nil {
			h.t.Fatal(err)
		}
		if cancelled {
			h.t.Fatalf("%s cancelled", in.MessageID)
		}
		if in.MessageID == id {
			h.run(ctx, in, text)
			return
		}
		answer, ok := h.parts.Start(ctx, ctx, in)
		check(in, answer, ok)
		h.finish(ctx, in, *answer)
	}
}

// start starts in's run, which is to run (no answer instead).
func (h *handle) start(ctx context.Context, in bus.Inbound) {
	h.t.Helper()
	answer, ok := h.parts.Start(ctx, ctx, in)
	if !ok || answer != nil {
		h.t.Fatalf("start of %s: answer %+v ok %v, want a run", in.MessageID, answer, ok)
	}
}

// finish records in's reply and delivers it, as the runtime does.
func (h *handle) finish(ctx context.Context, in bus.Inbound, res agent.Result) {
	h.t.Helper()
	if res.FinishReason == "" {
		res.FinishReason = link.FinishStop
	}
	reply := &link.Message{Role: link.RoleAssistant, MessageID: in.MessageID, RunID: in.RunID, Text: res.Text,
		FinishReason: res.FinishReason}
	if !h.parts.Finish(ctx, in, reply, res.Media, nil) {
		h.t.Fatalf("finish of %s: not recorded", in.MessageID)
	}
	h.deliver(ctx, in, res)
}

func (h *handle) deliver(ctx context.Context, in bus.Inbound, res agent.Result) {
	h.parts.Deliver(ctx, in, bus.Outbound{Kind: bus.Final, ChannelID: in.ChannelID, PeerID: in.PeerID,
		SessionKey: in.SessionKey, MessageID: in.MessageID, RunID: in.RunID, Text: res.Text,
		FinishReason: res.FinishReason, Media: res.Media, Started: in.Received})
	h.q.Done(in.SessionKey)
}

// run starts, finishes and delivers in with reply text.
func (h *handle) run(ctx context.Context, in bus.Inbound, text string) {
	h.t.Helper()
	h.start(ctx, in)
	h.parts.Deliver(ctx, in, bus.Outbound{Kind: bus.Progress, ChannelID: in.ChannelID, PeerID: in.PeerID,
		SessionKey: in.SessionKey, MessageID: in.MessageID, RunID: in.RunID, Text: "working"})
	h.finish(ctx, in, agent.Result{Text: text})
}

// final waits for the final reply of id and checks its text and finish
// reason.
func (h *handle) final(ctx context.Context, id, text, reason string) {
	h.t.Helper()
	out, err := h.q.Final(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	if out.Text != text || out.FinishReason != reason {
		h.t.Fatalf("final of %s: %q (%s), want %q (%s)", id, out.Text, out.FinishReason, text, reason)
	}
}

// cached checks a duplicate's ack carries the reply text.
func cached(t *testing.T, a record.Accepted, id, text, reason string) {
	t.Helper()
	if a.Pending || a.Reply == nil {
		t.Fatalf("duplicate of answered %s: %+v, want its reply", id, a)
	}
	if a.Reply.Text != text || a.Reply.FinishReason != reason || a.Reply.MessageID != id {
		t.Fatalf("duplicate of %s answered %q (%s, id %s), want %q (%s)", id, a.Reply.Text, a.Reply.FinishReason,
			a.Reply.MessageID, text, reason)
	}
}

func pending(t *testing.T, a record.Accepted, id string) {
	t.Helper()
	if !a.Pending || a.Reply != nil {
		t.Fatalf("duplicate of unanswered %s: %+v, want pending", id, a)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	t.Cleanup(cancel)
	return ctx
}

// A message id seen before is acked as a duplicate and queued nothing:
// pending while it waits and while its run goes, with its reply once
// finished.
func dedupe(t *testing.T, st Store) {
	ctx := testContext(t)
	h := open(t, ctx, st)
	m1 := h.message("m-1", "hello")
	h.acceptNew(ctx, m1)
	pending(t, h.duplicate(ctx, m1), "m-1") // queued
	in := h.next(ctx, "m-1")
	h.start(ctx, in)
	pending(t, h.duplicate(ctx, m1), "m-1") // running
	h.finish(ctx, in, agent.Result{Text: "answer 1"})
	h.final(ctx, "m-1", "answer 1", link.FinishStop)
	cached(t, h.duplicate(ctx, m1), "m-1", "answer 1", link.FinishStop)

	// Nothing was queued twice: the session's next message comes next.
	m2 := h.message("m-2", "again")
	h.acceptNew(ctx, m2)
	h.run(ctx, h.next(ctx, "m-2"), "answer 2")
	h.final(ctx, "m-2", "answer 2", link.FinishStop)
	if n := h.q.Puts("m-1"); n != 1 {
		t.Errorf("m-1 queued %d times, want once", n)
	}
}

// A session's messages are queued and started in the order accepted.
func order(t *testing.T, st Store) {
	ctx := testContext(t)
	h := open(t, ctx, st)
	ids := []string{"m-1", "m-2", "m-3", "m-4", "m-5"}
	for _, id := range ids {
		h.acceptNew(ctx, h.message(id, "text of "+id))
	}
	for _, id := range ids {
		in := h.next(ctx, id)
		if in.Text != "text of "+id {
			t.Errorf("%s queued with text %q", id, in.Text)
		}
		h.run(ctx, in, "answer to "+id)
		h.final(ctx, id, "answer to "+id, link.FinishStop)
	}
	// One more while the session is idle and its runner waits (a store
	// may record its start with it).
	got := make(chan bus.Inbound, 1)
	go func() {
		in, _, err := h.q.Next(ctx, sessionKey)
		if err == nil {
			got <- in
		}
		close(got)
	}()
	h.acceptNew(ctx, h.message("m-6", "text of m-6"))
	in, ok := <-got
	if !ok || in.MessageID != "m-6" {
		t.Fatalf("queued next: %+v, want m-6", in)
	}
	h.run(ctx, in, "answer to m-6")
	h.final(ctx, "m-6", "answer to m-6", link.FinishStop)
}

// Finish records the reply before it is sent: a duplicate accepted
// between the two gets it, and so does one after the store was closed
// before the reply was delivered. The message is not run again.
func replyRecorded(t *testing.T, st Store) {
	ctx := testContext(t)
	h := open(t, ctx, st)
	m1 := h.message("m-1", "hello")
	h.acceptNew(ctx, m1)
	in := h.next(ctx, "m-1")
	h.start(ctx, in)
	reply := &link.Message{Role: link.RoleAssistant, MessageID: in.MessageID, RunID: in.RunID, Text: "answer 1",
		FinishReason: link.FinishStop}
	if !h.parts.Finish(ctx, in, reply, nil, nil) {
		t.Fatal("finish: not recorded")
	}
	cached(t, h.duplicate(ctx, m1), "m-1", "answer 1", link.FinishStop)
	h.close() // before Deliver

	h = open(t, ctx, st)
	cached(t, h.duplicate(ctx, m1), "m-1", "answer 1", link.FinishStop)
	// A store may hand the message over again (its delivery was never
	// acknowledged); then its start answers it with the reply recorded.
	h.acceptNew(ctx, h.message("m-2", "next"))
	h.runAfterCopies(ctx, "m-2", "answer 2", func(in bus.Inbound, answer *agent.Result, ok bool) {
		if !ok || answer == nil || answer.Text != "answer 1" {
			t.Fatalf("m-1 queued again after its reply was recorded: start answer %+v ok %v, want the reply recorded", answer, ok)
		}
	})
	h.final(ctx, "m-2", "answer 2", link.FinishStop)
}

// Cancel finds a message accepted and not started, and it is answered
// cancelled (by the router, or by its start); a message unknown or
// answered is not found.
func cancelBeforeStart(t *testing.T, st Store) {
	ctx := testContext(t)
	h := open(t, ctx, st)
	if h.parts.Cancel(ctx, sessionKey, "never-sent") {
		t.Error("cancel of a message never accepted: found")
	}
	m1 := h.message("m-1", "hello")
	h.acceptNew(ctx, m1)
	if !h.parts.Cancel(ctx, sessionKey, "m-1") {
		t.Fatal("cancel of a message accepted and not started: not found")
	}
	if err := h.q.CancelAsked(ctx, "m-1"); err != nil {
		t.Fatal(err)
	}
	in, cancelled, err := h.q.Next(ctx, sessionKey)
	if err != nil || in.MessageID != "m-1" {
		t.Fatalf("queued next: %s %v, want m-1", in.MessageID, err)
	}
	res := record.CancelledBeforeStart
	if !cancelled { // still queued: its start answers it
		answer, ok := h.parts.Start(ctx, ctx, in)
		if !ok || answer == nil || answer.FinishReason != link.FinishCancelled {
			t.Fatalf("start of a cancelled message: answer %+v ok %v, want cancelled", answer, ok)
		}
		res = *answer
	}
	h.finish(ctx, in, res)
	h.final(ctx, "m-1", record.CancelledBeforeStart.Text, link.FinishCancelled)
	cached(t, h.duplicate(ctx, m1), "m-1", record.CancelledBeforeStart.Text, link.FinishCancelled)
	if h.parts.Cancel(ctx, sessionKey, "m-1") {
		t.Error("cancel of an answered message: found")
	}
	// The session goes on.
	h.acceptNew(ctx, h.message("m-2", "next"))
	h.run(ctx, h.next(ctx, "m-2"), "answer 2")
	h.final(ctx, "m-2", "answer 2", link.FinishStop)
}

// A message acked is durable: closed before it ran, the store runs it
// once it is opened again, once, as a run (not answered with an error).
func durableAtAck(t *testing.T, st Store) {
	ctx := testContext(t)
	h := open(t, ctx, st)
	m1, m2 := h.message("m-1", "first"), h.message("m-2", "second")
	h.acceptNew(ctx, m1)
	h.acceptNew(ctx, m2)
	h.close()

	h = open(t, ctx, st)
	pending(t, h.duplicate(ctx, m1), "m-1")
	for _, id := range []string{"m-1", "m-2"} {
		in := h.next(ctx, id)
		if in.Text != map[string]string{"m-1": "first", "m-2": "second"}[id] {
			t.Errorf("%s queued again with text %q", id, in.Text)
		}
		h.start(ctx, in)
		reply := &link.Message{Role: link.RoleAssistant, MessageID: in.MessageID, RunID: in.RunID,
			Text: "answer to " + id, FinishReason: link.FinishStop}
		if !h.parts.Finish(ctx, in, reply, nil, nil) {
			t.Fatalf("finish of %s: not recorded", id)
		}
		h.deliver(ctx, in, agent.Result{Text: reply.Text, FinishReason: link.FinishStop})
	}
	cached(t, h.duplicate(ctx, m1), "m-1", "answer to m-1", link.FinishStop)
	cached(t, h.duplicate(ctx, m2), "m-2", "answer to m-2", link.FinishStop)
	h.acceptNew(ctx, h.message("m-3", "third"))
	h.run(ctx, h.next(ctx, "m-3"), "answer 3")
	h.final(ctx, "m-3", "answer 3", link.FinishStop)
	for _, id := range []string{"m-1", "m-2"} {
		if n := h.q.Puts(id); n != 1 {
			t.Errorf("%s queued %d times after the store was opened again, want once", id, n)
		}
	}
}

// A message started and not answered when the store closed runs again
// once it is opened again, and that second start is recorded
// interrupted, once.
func interrupted(t *testing.T, st Store) {
	ctx := testContext(t)
	h := open(t, ctx, st)
	m1 := h.message("m-1", "hello")
	h.acceptNew(ctx, m1)
	h.start(ctx, h.next(ctx, "m-1"))
	h.close() // cut short

	h = open(t, ctx, st)
	in := h.next(ctx, "m-1")
	h.start(ctx, in)
	h.finish(ctx, in, agent.Result{Text: "answer 1"})
	cached(t, h.duplicate(ctx, m1), "m-1", "answer 1", link.FinishStop)

	var user, interrupted, replies int
	for _, r := range st.History(t, sessionKey) {
		if r.MessageID != "m-1" {
			continue
		}
		switch {
		case r.Role == "user":
			user++
		case r.Role == "assistant":
			replies++
			if r.Content != "answer 1" {
				t.Errorf("reply recorded %q, want %q", r.Content, "answer 1")
			}
		case r.Extra["event"] == record.EventInterrupted:
			interrupted++
		}
	}
	if user != 1 || interrupted != 1 || replies != 1 {
		t.Errorf("history of m-1: %d user, %d %s, %d assistant records; want one each", user, interrupted,
			record.EventInterrupted, replies)
	}
}

// A message whose run was cut short twice is not run a third time: it
// is answered with an error (by the store when it opens, or by the
// start), and a duplicate gets that answer.
func interruptedTwice(t *testing.T, st Store) {
	ctx := testContext(t)
	h := open(t, ctx, st)
	m1 := h.message("m-1", "hello")
	h.acceptNew(ctx, m1)
	h.start(ctx, h.next(ctx, "m-1"))
	h.close() // cut short once

	h = open(t, ctx, st)
	h.start(ctx, h.next(ctx, "m-1"))
	h.close() // and twice

	h = open(t, ctx, st)
	h.acceptNew(ctx, h.message("m-2", "next"))
	h.runAfterCopies(ctx, "m-2", "answer 2", func(in bus.Inbound, answer *agent.Result, ok bool) {
		if !ok || answer == nil {
			t.Fatalf("%s started a third time (answer %+v ok %v), want an error answer instead", in.MessageID, answer, ok)
		}
		if answer.FinishReason != link.FinishError {
			t.Errorf("third start of %s answered %+v, want an error", in.MessageID, answer)
		}
	})
	h.final(ctx, "m-2", "answer 2", link.FinishStop)
	a := h.duplicate(ctx, m1)
	if a.Reply == nil || a.Reply.FinishReason != link.FinishError || !strings.Contains(a.Reply.Text, "interrupted twice") {
		t.Errorf("duplicate of m-1: %+v (reply %+v), want the error answer", a, a.Reply)
	}
}

// A session past its waiting bound is refused busy (ErrBusy, no ack,
// nothing queued); once its messages are answered it is taken again.
func busy(t *testing.T, st Store) {
	ctx := testContext(t)
	h := open(t, ctx, st)
	const bound = 2
	var taken []bus.Inbound
	for _, id := range []string{"m-1", "m-2"} {
		in := h.message(id, "text")
		if _, err := h.accept(ctx, in, bound); err != nil {
			t.Fatalf("accept %s within the bound: %v", id, err)
		}
		taken = append(taken, in)
	}
	m3 := h.message("m-3", "text")
	if _, err := h.accept(ctx, m3, bound); !errors.Is(err, record.ErrBusy) {
		t.Fatalf("accept past the session's bound: %v, want ErrBusy", err)
	}
	for _, in := range taken {
		h.run(ctx, h.next(ctx, in.MessageID), "answer")
		h.final(ctx, in.MessageID, "answer", link.FinishStop)
	}
	if _, err := h.accept(ctx, m3, bound); err != nil {
		t.Fatalf("accept once the session's messages are answered: %v", err)
	}
	h.run(ctx, h.next(ctx, "m-3"), "answer 3")
	h.final(ctx, "m-3", "answer 3", link.FinishStop)
	if n := h.q.Puts("m-3"); n != 1 {
		t.Errorf("m-3 queued %d times, want once (not when refused)", n)
	}
}

// Under record.TakeNone (a session the runtime holds back: an earlier
// message of it is not taken yet, package record/holdback) no new message
// is taken, refused busy before it is made durable or queued, and a
// duplicate is still answered: pending while its run goes, with its
// reply once finished. Under the channel's bound again the refused
// message is taken.
func takeNone(t *testing.T, st Store) {
	ctx := testContext(t)
	h := open(t, ctx, st)
	m1 := h.message("m-1", "taken before")
	h.acceptNew(ctx, m1)
	a, err := h.accept(ctx, m1, record.TakeNone)
	if err != nil || !a.Duplicate {
		t.Fatalf("duplicate of m-1 under TakeNone: %+v, %v; want a duplicate answered", a, err)
	}
	pending(t, a, "m-1")
	m2 := h.message("m-2", "held back")
	if _, err := h.accept(ctx, m2, record.TakeNone); !errors.Is(err, record.ErrBusy) {
		t.Fatalf("new message under TakeNone: %v, want ErrBusy", err)
	}
	h.run(ctx, h.next(ctx, "m-1"), "answer 1")
	h.final(ctx, "m-1", "answer 1", link.FinishStop)
	a, err = h.accept(ctx, m1, record.TakeNone)
	if err != nil {
		t.Fatalf("duplicate of answered m-1 under TakeNone: %v", err)
	}
	cached(t, a, "m-1", "answer 1", link.FinishStop)
	for _, r := range st.History(t, sessionKey) {
		if r.MessageID == "m-2" {
			t.Fatalf("m-2, refused, is in the session's history: %+v", r)
		}
	}
	h.acceptNew(ctx, m2)
	h.run(ctx, h.next(ctx, "m-2"), "answer 2")
	h.final(ctx, "m-2", "answer 2", link.FinishStop)
	if n := h.q.Puts("m-2"); n != 1 {
		t.Errorf("m-2 queued %d times, want once (not when refused)", n)
	}
}
