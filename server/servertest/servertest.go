// Package servertest runs a real termserver on a loopback port for tests of
// the packages around it (device, termd, termrig): the real runtime, bus,
// agents and session log, not a fake.
package servertest

import (
	"context"
	"net"
	"testing"
	"time"

	"termlink/server"
	"termlink/server/config"
)

// Server is a running termserver.
type Server struct {
	Addr string // host:port
	URL  string // ws:// (wss:// with TLS) URL of channel terminal-dev
	*server.Server
}

// Start runs a server with the default config (channel terminal-dev, the
// echo agent) in a temporary workspace, changed by mutate when not nil. It
// stops when the test ends.
func Start(tb testing.TB, mutate func(*config.Config)) *Server {
	tb.Helper()
	cfg := config.Default()
	cfg.Workspace = tb.TempDir()
	if mutate != nil {
		mutate(cfg)
	}
	s, err := server.New(cfg, server.Options{})
	if err != nil {
		tb.Fatalf("servertest: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("servertest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 5*time.Second) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("servertest: Serve: %v", err)
		}
	})
	addr := ln.Addr().String()
	scheme := "ws"
	if cfg.TLS.Enabled() {
		scheme = "wss"
	}
	return &Server{Addr: addr, URL: scheme + "://" + addr + "/api/channels/terminal-dev/ws", Server: s}
}
