package discovery

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"termlink/link/discover"
	"termlink/server/discovery/socktest"
)

// start advertises a server with a name no other test uses, on the
// loopback address and the port of a real listener.
func start(t *testing.T, txt discover.TXT) (*Advertiser, string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	ips, err := AddrsFor(ln.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("test-%d", rand.Uint32())
	a, err := Start(context.Background(), Config{Instance: name, HostName: name + ".local.", Port: port, IPs: ips, TXT: txt})
	if err != nil {
		t.Fatalf("Start: %v (UDP 5353 must be free to share: SO_REUSEADDR)", err)
	}
	t.Cleanup(func() { a.Stop() })
	return a, name, port
}

var testTXT = discover.TXT{Paths: []string{"/api/channels/terminal-dev/ws"}, TLS: true}

// The advertisement over a plain UDP socket pair, no multicast needed: a
// DNS-SD query sent by unicast to 127.0.0.1:5353 from an ephemeral port is
// a legacy unicast query (RFC 6762 §6.7) and is answered to that port
// with the PTR, SRV, TXT and A records.
//
// The port is shared (SO_REUSEADDR): if another process on this machine
// also listens on 5353 the kernel may hand the datagram to it instead.
func TestAnswersUnicastQuery(t *testing.T) {
	_, name, port := start(t, testTXT)
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := new(dns.Msg)
	q.SetQuestion(discover.Service+".local.", dns.TypePTR)
	q.RecursionDesired = false
	pkt, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	instance := name + "." + discover.Service + ".local."
	deadline := time.Now().Add(20 * time.Second)
	buf := make([]byte, 65536)
	for time.Now().Before(deadline) {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.WriteToUDP(pkt, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}); err != nil {
			t.Fatalf("sending the query: %v", err)
		}
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, _, err := c.ReadFromUDP(buf)
		if err != nil {
			continue // no answer yet: ask again
		}
		var resp dns.Msg
		if err := resp.Unpack(buf[:n]); err != nil {
			t.Fatalf("answer does not parse: %v", err)
		}
		var ptr, srv, txt, a bool
		for _, rr := range append(resp.Answer, resp.Extra...) {
			switch rr := rr.(type) {
			case *dns.PTR:
				ptr = ptr || rr.Ptr == instance
			case *dns.SRV:
				srv = srv || (rr.Hdr.Name == instance && int(rr.Port) == port && rr.Target == name+".local.")
			case *dns.TXT:
				if rr.Hdr.Name == instance {
					got, err := discover.ParseTXT(rr.Txt)
					if err != nil {
						t.Fatalf("TXT %q: %v", rr.Txt, err)
					}
					txt = slices.Equal(got.Paths, testTXT.Paths) && got.TLS && !got.Enroll
				}
			case *dns.A:
				a = a || (rr.Hdr.Name == name+".local." && rr.A.Equal(net.IPv4(127, 0, 0, 1)))
			}
		}
		if !ptr {
			continue // another server's answer
		}
		if !srv || !txt || !a {
			t.Fatalf("answer for %s lacks records: srv %v txt %v a %v\n%v", instance, srv, txt, a, &resp)
		}
		return
	}
	t.Fatalf("no answer for %s to a unicast query on 127.0.0.1:5353", instance)
}

// The whole path over multicast on this machine: Browse sends the query to
// 224.0.0.251 (looped back by the kernel) and finds the advertisement.
func TestBrowseFindsAdvertisement(t *testing.T) {
	_, name, port := start(t, testTXT)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		found, err := discover.Browse(ctx, discover.BrowseOptions{Window: 2 * time.Second})
		if err != nil {
			t.Fatalf("Browse: %v", err)
		}
		f, err := discover.Pick(found, name)
		if err == nil {
			if f.Port != port || !f.Addr.Equal(net.IPv4(127, 0, 0, 1)) || f.Host != name+".local" || !f.TXT.TLS {
				t.Fatalf("found %+v", f)
			}
			if got, want := f.URL("terminal-dev"), fmt.Sprintf("wss://127.0.0.1:%d/api/channels/terminal-dev/ws", port); got != want {
				t.Fatalf("URL = %s, want %s", got, want)
			}
			return
		}
		if attempt == 5 {
			t.Fatalf("Browse over multicast never found %s (found %v); is there a multicast route (ip route get 224.0.0.251)?", name, found)
		}
	}
}

// Stop closes the UDP 5353 socket and the responder's goroutines end.
func TestStopClosesSocketAndGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	a, _, _ := start(t, testTXT)
	ports, err := socktest.UDPPorts()
	if err != nil {
		t.Fatal(err)
	}
	if ports[5353] == 0 {
		t.Fatalf("advertising, yet no UDP 5353 socket open: %v", ports)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Stop, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ports, err = socktest.UDPPorts(); err != nil || ports[5353] != 0 {
		t.Fatalf("after Stop: UDP ports %v, %v; want no 5353", ports, err)
	}
}

func TestAddrsFor(t *testing.T) {
	ips, err := AddrsFor(&net.TCPAddr{IP: net.IPv4(192, 0, 2, 9), Port: 80}, nil)
	if err != nil || len(ips) != 1 || !ips[0].Equal(net.IPv4(192, 0, 2, 9)) {
		t.Errorf("a specific address: %v, %v", ips, err)
	}
	if _, err := AddrsFor(&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 80}, nil); err == nil {
		t.Error("an IPv6 listener was advertised")
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skip("no lo interface")
	}
	// lo holds only loopback addresses, which a wildcard listener does not
	// advertise to the LAN.
	if ips, err := AddrsFor(&net.TCPAddr{Port: 80}, lo); err == nil {
		t.Errorf("wildcard listener on lo: %v, want an error", ips)
	}
}

func TestZoneRefusesTooManyPaths(t *testing.T) {
	var txt discover.TXT
	for i := range 30 {
		txt.Paths = append(txt.Paths, fmt.Sprintf("/api/channels/channel-%02d/ws", i))
	}
	_, err := Zone(Config{Instance: "x", HostName: "x.local.", Port: 1, IPs: []net.IP{net.IPv4(192, 0, 2, 1)}, TXT: txt})
	if err == nil {
		t.Fatal("30 paths in one TXT string accepted")
	}
}
