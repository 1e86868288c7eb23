package discover_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"termlink/link/discover"
	"termlink/server/discovery"
	"termlink/testrig/childtest"
)

// Browse against termserver's real advertiser (server/discovery, on
// hashicorp/mdns) over multicast on this machine: the query goes to
// 224.0.0.251 (looped back by the kernel) and the advertisement is found
// whole, its instance name with a space and a dot in it as the server
// spelled it (a DNS escape for the dot only).
func TestBrowseFindsTermserversAdvertiser(t *testing.T) {
	childtest.SkipMulticastUnderEmulator(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ips, err := discovery.AddrsFor(ln.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("test-%d", rand.Uint32())
	name := "kiosk hall " + host + `\.b`
	txt := discover.TXT{Paths: []string{"/api/channels/terminal-dev/ws"}, Enroll: true}
	a, err := discovery.Start(context.Background(), discovery.Config{Instance: name, HostName: host + ".local.", Port: port, IPs: ips, TXT: txt})
	if err != nil {
		t.Skipf("cannot advertise on UDP 5353 here: %v", err)
	}
	defer a.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		found, err := discover.Browse(ctx, discover.BrowseOptions{Window: 2 * time.Second})
		if err != nil {
			t.Fatalf("Browse: %v", err)
		}
		f, err := discover.Pick(found, name)
		if err == nil {
			if f.Port != port || !f.Addr.Equal(net.IPv4(127, 0, 0, 1)) || f.Host != host+".local" || !f.TXT.Enroll || f.TXT.TLS {
				t.Fatalf("found %+v", f)
			}
			if got, want := f.URL("terminal-dev"), fmt.Sprintf("ws://127.0.0.1:%d/api/channels/terminal-dev/ws", port); got != want {
				t.Fatalf("URL = %s, want %s", got, want)
			}
			return
		}
		if attempt == 5 {
			t.Fatalf("Browse over multicast never found %q (found %v); is there a multicast route (ip route get 224.0.0.251)?", name, found)
		}
	}
}
