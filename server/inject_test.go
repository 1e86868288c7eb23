package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/agent"
)

// injectingRunner behaves like a Nuum session: while a turn runs, more
// messages join it, and the turn's answer covers all of them.
type injectingRunner struct {
	mu       sync.Mutex
	running  bool
	texts    []string
	started  chan struct{}
	injected chan struct{} // a message joined the running turn
	gate     chan struct{}
	runs     int
	open     sync.Once
}

// release lets every turn end (once).
func (r *injectingRunner) release() { r.open.Do(func() { close(r.gate) }) }

// releaseOnCleanup makes a failing test end its held turn before the
// server shuts down (which waits for it), so the failure is reported
// instead of hanging until the test binary's timeout.
func (r *injectingRunner) releaseOnCleanup(t *testing.T) { t.Cleanup(r.release) }

func (r *injectingRunner) Run(ctx context.Context, req agent.Request, _ agent.Progress) agent.Result {
	r.mu.Lock()
	r.running, r.texts = true, []string{req.Text}
	r.runs++
	r.mu.Unlock()
	r.started <- struct{}{}
	<-r.gate
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = false
	return agent.Result{Text: "turn: " + strings.Join(r.texts, " + "), FinishReason: link.FinishStop}
}

func (r *injectingRunner) Inject(_ context.Context, req agent.Request) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running {
		return false
	}
	r.texts = append(r.texts, req.Text)
	select {
	case r.injected <- struct{}{}:
	default:
	}
	return true
}

func (r *injectingRunner) Close() error { return nil }

func TestInjectedMessagesShareTheTurnsReply(t *testing.T) {
	t.Parallel()
	runner := &injectingRunner{started: make(chan struct{}, 4), injected: make(chan struct{}, 4), gate: make(chan struct{})}
	ts := startServer(t, nil, runner)
	c := dial(t, ts.ws, nil)
	c.connect("dev")
	c.send(&link.Message{MessageID: "a", Text: "first"})
	readAs[*link.Ack](c)
	<-runner.started
	c.send(&link.Message{MessageID: "b", Text: "second"})
	if ack := readAs[*link.Ack](c); ack.MessageID != "b" || ack.Duplicate {
		t.Fatalf("ack of the injected message %+v", ack)
	}
	// The ack can come before the router offers b to the running turn:
	// the turn ends only once b has joined it.
	select {
	case <-runner.injected:
	case <-time.After(20 * time.Second):
		t.Fatal("b was never offered to the running turn")
	}
	runner.release()
	got := map[string]*link.Message{}
	for len(got) < 2 {
		m := readAs[*link.Message](c)
		got[m.MessageID] = m
	}
	for _, id := range []string{"a", "b"} {
		if got[id] == nil || got[id].Text != "turn: first + second" {
			t.Fatalf("reply to %s = %+v, want the shared turn's answer", id, got[id])
		}
	}
	if runner.runs != 1 {
		t.Fatalf("runs %d, want 1", runner.runs)
	}
	// After the turn, a new message starts a new turn.
	c.send(&link.Message{MessageID: "c", Text: "third"})
	readAs[*link.Ack](c)
	<-runner.started
	if m := readAs[*link.Message](c); m.Text != "turn: third" {
		t.Fatalf("next turn %+v", m)
	}
}

// holdingInjector holds each offer until the test lets it through, so a
// message can arrive while the previous one is still being offered.
type holdingInjector struct {
	*injectingRunner
	offered chan string   // the text of each offer, as it comes
	let     chan struct{} // one per offer to go on
}

func (h *holdingInjector) Inject(ctx context.Context, req agent.Request) bool {
	h.offered <- req.Text
	<-h.let
	return h.injectingRunner.Inject(ctx, req)
}

// A message that arrives while the previous one is being offered to the
// running turn waits behind that offer, then joins the same turn, in
// order. (It used to wait for the next turn: with the durable
// run_started record an offer takes a sync, and TestInjectedMessages-
// DoNotCountAsWaiting saw the second message counted as waiting.)
func TestMessageArrivingDuringAnOfferJoinsTheTurn(t *testing.T) {
	t.Parallel()
	runner := &holdingInjector{
		injectingRunner: &injectingRunner{started: make(chan struct{}, 4), injected: make(chan struct{}, 4), gate: make(chan struct{})},
		offered:         make(chan string, 4), let: make(chan struct{}, 4)}
	ts := startServer(t, nil, runner)
	runner.releaseOnCleanup(t)
	t.Cleanup(func() { close(runner.let) })
	c := dial(t, ts.ws, nil)
	c.connect("dev")
	c.send(&link.Message{MessageID: "a", Text: "first"})
	readAs[*link.Ack](c)
	<-runner.started
	c.send(&link.Message{MessageID: "b", Text: "second"})
	readAs[*link.Ack](c)
	if got := <-runner.offered; got != "second" {
		t.Fatalf("offered %q, want second", got)
	}
	c.send(&link.Message{MessageID: "c", Text: "third"}) // b's offer is in flight
	readAs[*link.Ack](c)
	runner.let <- struct{}{} // b joins
	select {
	case got := <-runner.offered:
		if got != "third" {
			t.Fatalf("offered %q, want third", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("c was not offered to the running turn after b joined it")
	}
	runner.let <- struct{}{} // c joins
	for range 2 {
		<-runner.injected
	}
	runner.release()
	for range 3 {
		if m := readAs[*link.Message](c); m.Text != "turn: first + second + third" {
			t.Fatalf("reply %s = %q, want the one turn's answer", m.MessageID, m.Text)
		}
	}
	if runner.runs != 1 {
		t.Fatalf("runs %d, want 1", runner.runs)
	}
}
