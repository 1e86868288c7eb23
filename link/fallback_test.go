package link_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"termlink/link"
)

// TestFallbacksDialTheNextURL: the first URL refuses connections (nothing
// listens there); the client dials the fallback, a real termserver, and
// gets its message answered there.
func TestFallbacksDialTheNextURL(t *testing.T) {
	ts := newTestServer(t, newCountingRunner(0), nil)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "ws://" + dead.Addr().String() + "/api/channels/terminal-dev/ws"
	dead.Close() // refused from now on
	d := newDevice(t, link.ClientConfig{URL: deadURL, Fallbacks: []string{ts.url()}, PeerID: "dev-fb",
		RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	id, err := d.Send(context.Background(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	d.waitReplies([]string{id}, 30*time.Second)
}

func TestFallbacksChecked(t *testing.T) {
	_, err := link.NewClient(link.ClientConfig{URL: "ws://a/x", Fallbacks: []string{"", "http://b/x"}, PeerID: "p", Outbox: link.NewMemoryOutbox()})
	if err == nil || !strings.Contains(err.Error(), "Fallbacks[0] is empty") || !strings.Contains(err.Error(), `Fallbacks[1] "http://b/x": scheme must be ws or wss`) {
		t.Fatalf("error %v", err)
	}
}

// TestFallbacksTakeOverAtOnceWhenTheLinkDrops: a device connected to
// server a (up longer than RetryInitial) whose server goes away dials
// its fallback b at once, without a backoff wait first (a killed cluster
// edge's devices move to another edge at once), and is answered there.
func TestFallbacksTakeOverAtOnceWhenTheLinkDrops(t *testing.T) {
	a := newTestServer(t, newCountingRunner(0), nil)
	b := newTestServer(t, newCountingRunner(0), nil)
	const initial = 2 * time.Second // a wait would be 1-3 s
	d := newDevice(t, link.ClientConfig{URL: a.url(), Fallbacks: []string{b.url()}, PeerID: "dev-move",
		RetryInitial: initial, RetryMax: 2 * initial})
	d.waitState(link.StateConnected, time.Time{}, 10*time.Second)
	time.Sleep(initial + 100*time.Millisecond)
	stopping := time.Now()
	a.stop()
	at := d.waitState(link.StateConnected, stopping, 10*time.Second)
	d.mu.Lock()
	var dropped time.Time
	for _, e := range d.states {
		if e.Time.Before(stopping) || !e.Time.Before(at) {
			continue
		}
		if dropped.IsZero() {
			dropped = e.Time
		}
		if e.State == link.StateWaiting {
			t.Errorf("the device waited (until %s) before dialling its fallback", e.NextTry.Sub(e.Time).Round(time.Millisecond))
		}
	}
	d.mu.Unlock()
	// The outcome, not a clock: no backoff wait lay between the drop and
	// the connection to the fallback (checked above).
	if dropped.IsZero() {
		t.Errorf("no state change between the drop and the connection to the fallback (at %s)", at)
	}
	id := d.send("moved")
	d.waitReplies([]string{id}, 10*time.Second)
}
