package debugserver

import (
	"strings"
	"testing"
)

func TestDebugListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:0", "example.com:0", "[::]:0"} {
		if ln, err := Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) listened; want a loopback-only error", addr)
		} else if !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Listen(%q): %v; want it to say loopback", addr, err)
		}
	}
	if _, err := Listen("6060"); err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("Listen(6060): %v; want a HOST:PORT error", err)
	}
	for _, addr := range []string{":0", "127.0.0.1:0", "localhost:0"} {
		ln, err := Listen(addr)
		if err != nil {
			t.Fatalf("Listen(%q): %v", addr, err)
		}
		if host := ln.Addr().String(); !strings.HasPrefix(host, "127.0.0.1:") && !strings.HasPrefix(host, "[::1]:") {
			t.Errorf("Listen(%q) listens on %s, want loopback", addr, host)
		}
		ln.Close()
	}
}
