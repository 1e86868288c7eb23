package load

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"termlink/server"
	"termlink/server/config"
)

// realOptions tune startRealServer.
type realOptions struct {
	echoDelay time.Duration // the echo agent's delay before answering
	grace     time.Duration // how long runs may finish at shutdown (default 5s)
}

// realServer is the real termserver (default config: channel
// terminal-dev, echo agent) served in-process on loopback.
type realServer struct {
	URL     string       // the channel's WebSocket URL
	Addr    string       // host:port
	accepts atomic.Int64 // connections accepted
	s       *server.Server
	ln      net.Listener
	cancel  context.CancelFunc
	served  chan error
}

// startRealServer serves the real termserver on addr ("127.0.0.1:0" for
// any port) with its workspace in dir.
func startRealServer(dir, addr string, opt realOptions) (*realServer, error) {
	cfg := config.Default()
	cfg.Workspace = dir
	if opt.echoDelay > 0 {
		cfg.Agents[config.DefaultAgent].Builtin.DelayMs = int(opt.echoDelay / time.Millisecond)
	}
	if opt.grace <= 0 {
		opt.grace = 5 * time.Second
	}
	s, err := server.New(cfg, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	// The old listener of a restart on the same port may take a moment
	// to let go of it.
	for deadline := time.Now().Add(3 * time.Second); ; {
		ln, err = net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		_ = s.Shutdown(context.Background())
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rs := &realServer{Addr: ln.Addr().String(), s: s, cancel: cancel, served: make(chan error, 1)}
	rs.ln = countingListener{ln, &rs.accepts}
	rs.URL = "ws://" + rs.Addr + "/api/channels/terminal-dev/ws"
	go func() { rs.served <- s.Serve(ctx, rs.ln, opt.grace) }()
	return rs, nil
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// stop shuts the server down as termserver does on SIGTERM (going-away
// close frames to every device, runs given the grace to finish, session
// log flushed) and returns Serve's error.
func (rs *realServer) stop() error {
	rs.cancel()
	return <-rs.served
}

// startReal serves a real termserver for one test, stopped at its end.
func startReal(t *testing.T) *realServer {
	t.Helper()
	rs, err := startRealServer(t.TempDir(), "127.0.0.1:0", realOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rs.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return rs
}

// The load generator against the real termserver (in-process, loopback):
// every message is answered exactly once, none lost.
func TestAgainstRealServer(t *testing.T) {
	rep, err := Run(context.Background(), Options{
		URL: startReal(t).URL, Devices: 20, Rate: 200,
		Duration: time.Second, Drain: drainAll, ConnectRate: 500, PeerPrefix: "real",
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
