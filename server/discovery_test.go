package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"testing"
	"time"

	"termlink/link/discover"
	"termlink/server/config"
	"termlink/server/discovery/socktest"
)

// serveReal runs a Server with Serve (the discovery hook is in Serve) on a
// loopback port and waits until /healthz answers.
func serveReal(t *testing.T, mutate func(*config.Config)) string {
	t.Helper()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	if mutate != nil {
		mutate(cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, cfg, Options{}, ln)
	addr := ln.Addr().String()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never answered /healthz: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func udp5353(t *testing.T) int {
	t.Helper()
	ports, err := socktest.UDPPorts()
	if err != nil {
		t.Fatal(err)
	}
	return ports[5353]
}

// Without "discovery" in the config termserver opens no mDNS socket.
//
// Not parallel, nor is TestDiscoveryAdvertisesWhileServing: both count
// this process's UDP 5353 sockets, and another test's server with
// discovery on would be counted (make test beside stress-ng saw 3).
func TestDiscoveryOffByDefault(t *testing.T) {
	serveReal(t, nil)
	if n := udp5353(t); n != 0 {
		t.Fatalf("discovery off, yet %d UDP 5353 sockets open", n)
	}
}

// With "discovery" on, termserver advertises its channels on the LAN while
// it serves, and stops when it stops.
func TestDiscoveryAdvertisesWhileServing(t *testing.T) {
	name := fmt.Sprintf("srv-%d", rand.Uint32())
	addr := serveReal(t, func(c *config.Config) {
		c.Discovery = config.Discovery{Enabled: true, Instance: name}
		lobby := c.Channels[config.DefaultChannelID]
		c.Channels["lobby"] = lobby
	})
	if n := udp5353(t); n == 0 {
		t.Fatal("discovery on, yet no UDP 5353 socket open")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var f discover.Found
	for attempt := 1; ; attempt++ {
		found, err := discover.Browse(ctx, discover.BrowseOptions{Window: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if f, err = discover.Pick(found, name); err == nil {
			break
		}
		if attempt == 5 {
			t.Fatalf("%s not found on the LAN: %v", name, found)
		}
	}
	if f.HostPort() != addr || f.TXT.TLS || f.TXT.Enroll {
		t.Fatalf("found %v, want %s tls=0 enroll=0", f, addr)
	}
	want := []string{"/api/channels/terminal-dev/ws", "/api/channels/lobby/ws"}
	if len(f.TXT.Paths) != 2 || f.TXT.Paths[0] != want[0] || f.TXT.Paths[1] != want[1] {
		t.Fatalf("paths %q, want %q (default channel first)", f.TXT.Paths, want)
	}
}
