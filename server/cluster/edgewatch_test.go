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
// packets silently and the connection does not break), again every half
// lease while none answers; it closes its devices only after a whole
// lease.
func TestEdgeWatchReconnectsElsewhere(t *testing.T) {
	t.Parallel()
	const lease = 4 * time.Second
	t0 := time.Now()
	kicks, drops := 0, 0
	w := &EdgeWatch{what: "edge e1", edge: true, lease: lease, seen: t0, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		reconnect: func() error { kicks++; return nil }, drop: func(int, string) { drops++ }}
	cut := errors.New("no answer")
	at := func(d time.Duration, err error) { w.observe(t0.Add(d), err) }
	at(time.Second, cut)
	if kicks != 0 {
		t.Errorf("a quarter lease unanswered: %d reconnects, want none", kicks)
	}
	at(2100*time.Millisecond, cut)
	at(3*time.Second, cut)
	if kicks != 1 || drops != 0 {
		t.Errorf("half to three quarters of a lease unanswered: %d reconnects %d drops, want 1 and 0", kicks, drops)
	}
	at(4200*time.Millisecond, cut)
	if kicks != 2 || drops != 1 || w.Lost() == "" {
		t.Errorf("a lease unanswered: %d reconnects %d drops lost %q, want 2, 1 and a reason", kicks, drops, w.Lost())
	}
	at(5*time.Second, nil)
	if w.Lost() != "" {
		t.Errorf("answered again: lost %q, want none", w.Lost())
	}
	at(5500*time.Millisecond, cut)
	if kicks != 2 {
		t.Errorf("just after an answer: %d reconnects, want still 2", kicks)
	}
}
