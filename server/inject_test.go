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
}

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
	close(runner.gate)
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
