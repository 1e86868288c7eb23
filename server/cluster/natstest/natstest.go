// Package natstest runs a one-node nats-server (the nats-server library,
// in the test's process) on 127.0.0.1 for tests of the cluster code.
package natstest

import (
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// Start runs a nats-server on a free loopback port, with JetStream
// (storage in a test temp dir) when jetStream is set, and stops it when
// the test ends. Its ClientURL is what a client dials.
func Start(t testing.TB, jetStream bool) *natsserver.Server {
	t.Helper()
	opt := &natsserver.Options{ServerName: "t1", Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true}
	if jetStream {
		opt.JetStream, opt.StoreDir = true, t.TempDir()
	}
	s, err := natsserver.NewServer(opt)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server not ready in 10 s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}
