package link

import (
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"termlink/internal/testpki"
)

// A session whose resumption failed on the network (the server closed
// the connection during the handshake, as a busy one that times out
// does) is offered again at the next dial, which resumes; after
// keptRetries failures in a row it is gone and the dial is a full
// handshake.
func TestSessionKeptAfterFailedResumption(t *testing.T) {
	t.Parallel()
	ca := testpki.NewCA(t, t.TempDir(), "lab")
	leaf := ca.Server(t, "server")
	cert, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var fail atomic.Int32 // connections to drop before their handshake
	go func() {
		srv := &tls.Config{Certificates: []tls.Certificate{cert}}
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if fail.Add(-1) >= 0 {
				c.Close()
				continue
			}
			fail.Store(0)
			go func() {
				defer c.Close()
				tc := tls.Server(c, srv)
				if tc.Handshake() == nil {
					_, _ = tc.Write([]byte("x"))
				}
			}()
		}
	}()
	conf, err := ClientConfig{URL: "wss://" + ln.Addr().String(), CAFile: ca.File}.dialTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	conf.ServerName = "127.0.0.1"
	dial := func() (resumed bool, ok bool) {
		c, err := tls.Dial("tcp", ln.Addr().String(), conf)
		if err != nil {
			return false, false
		}
		defer c.Close()
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil { // the ticket comes before it
			t.Fatalf("read: %v", err)
		}
		return c.ConnectionState().DidResume, true
	}
	if r, ok := dial(); !ok || r {
		t.Fatalf("first dial: resumed %v, ok %v; want a full handshake", r, ok)
	}
	for failures := 1; failures <= keptRetries+1; failures++ {
		fail.Store(int32(failures))
		for range failures {
			if _, ok := dial(); ok {
				t.Fatal("a dropped connection handshook")
			}
		}
		r, ok := dial()
		if !ok {
			t.Fatal("dial failed")
		}
		if want := failures <= keptRetries; r != want {
			t.Fatalf("after %d failed resumptions in a row: resumed %v, want %v", failures, r, want)
		}
	}
}
