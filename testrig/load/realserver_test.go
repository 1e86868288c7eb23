package load

import (
	"context"
	"net"
	"testing"
	"time"

	"termlink/server"
	"termlink/server/config"
)

// The load generator against the real termserver (in-process, loopback):
// every message is answered exactly once, none lost.
func TestAgainstRealServer(t *testing.T) {
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	s, err := server.New(cfg, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, 5*time.Second) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	rep, err := Run(context.Background(), Options{
		URL: "ws://" + ln.Addr().String() + "/api/channels/terminal-dev/ws", Devices: 20, Rate: 200,
		Duration: time.Second, Drain: 5 * time.Second, ConnectRate: 500, PeerPrefix: "real",
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.DevicesConnected != 20 || rep.Sent == 0 || rep.Replied != rep.Sent || rep.Lost != 0 ||
		rep.DuplicateReplies != 0 || rep.DuplicateAcks != 0 || rep.ErrorFrames != 0 {
		t.Fatalf("report: connected %d sent %d replied %d lost %d dup replies %d dup acks %d errors %d",
			rep.DevicesConnected, rep.Sent, rep.Replied, rep.Lost, rep.DuplicateReplies, rep.DuplicateAcks, rep.ErrorFrames)
	}
}
