package cluster

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

// A node whose NATS server has not answered for half a lease moves its
// connection to another server (a server cut off by the network drops
// packets silently and the connection does not break), again a lease
// later, then two leases apart while none answers (every server slow on
// a busy machine is not fled every half lease: make test at load 40 saw
// a worker reconnect every 1.2 s and answer nothing for two minutes);
// it closes its devices only after a whole lease.
func TestEdgeWatchReconnectsElsewhere(t *testing.T) {
	t.Parallel()
	const lease = 4 * time.Second
	t0 := time.Now()
	var kicks []time.Duration
	drops := 0
	var now time.Duration
	w := &EdgeWatch{what: "edge e1", edge: true, lease: lease, seen: t0, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		reconnect: func() error { kicks = append(kicks, now); return nil }, drop: func(int, string) { drops++ }}
	cut := errors.New("no answer")
	at := func(d time.Duration, err error) { now = d; w.observe(t0.Add(d), err) }
	at(time.Second, cut)
	if len(kicks) != 0 {
		t.Errorf("a quarter lease unanswered: reconnects at %v, want none", kicks)
	}
	at(2100*time.Millisecond, cut)
	at(3*time.Second, cut)
	if len(kicks) != 1 || drops != 0 {
		t.Errorf("half to three quarters of a lease unanswered: reconnects at %v, %d drops, want 1 and 0", kicks, drops)
	}
	at(4200*time.Millisecond, cut)
	if len(kicks) != 1 || drops != 1 || w.Lost() == "" {
		t.Errorf("a lease unanswered: reconnects at %v, %d drops, lost %q, want 1 (the next a lease after the first), 1 and a reason", kicks, drops, w.Lost())
	}
	// Probes every lease/5 while none answers: reconnects a lease, then
	// two leases apart.
	for d := 5 * time.Second; d <= 40*time.Second; d += 800 * time.Millisecond {
		at(d, cut)
	}
	want := []time.Duration{2100 * time.Millisecond, 6600 * time.Millisecond, 15400 * time.Millisecond, 24200 * time.Millisecond, 33 * time.Second} // the first probe past 4 s, then past 8 s
	if len(kicks) != len(want) {
		t.Fatalf("reconnects at %v, want %v", kicks, want)
	}
	for i := range want {
		if kicks[i] != want[i] {
			t.Fatalf("reconnects at %v, want %v", kicks, want)
		}
	}
	at(41*time.Second, nil)
	if w.Lost() != "" {
		t.Errorf("answered again: lost %q, want none", w.Lost())
	}
	// Cut off again: half a lease, as at first.
	kicks = nil
	at(41500*time.Millisecond, cut)
	if len(kicks) != 0 {
		t.Errorf("just after an answer: reconnects at %v, want none", kicks)
	}
	at(43100*time.Millisecond, cut)
	if len(kicks) != 1 {
		t.Errorf("half a lease after the answer: reconnects at %v, want one", kicks)
	}
}
