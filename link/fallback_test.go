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
