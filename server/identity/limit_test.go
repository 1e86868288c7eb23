package identity

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

func TestSourceNet(t *testing.T) {
	for _, c := range []struct{ remote, want string }{
		{"192.0.2.7:1234", "192.0.2.0/24"},
		{"192.0.2.250:1", "192.0.2.0/24"},
		{"192.0.3.7:1234", "192.0.3.0/24"},
		{"192.0.2.7", "192.0.2.0/24"}, // no port
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:443", "2001:db8:1:3::/64"},
		{"[::ffff:192.0.2.7]:80", "192.0.2.0/24"}, // IPv4-mapped counts as IPv4
		{"[fe80::1%eth0]:22", "fe80::/64"},        // the zone does not matter
		{"[::1]:8080", "::/64"},
		{"127.0.5.9:5", "127.0.5.0/24"},
		{"not-an-address:80", "invalid Prefix"},
		{"@", "invalid Prefix"},
		{"", "invalid Prefix"},
	} {
		if got := sourceNet(c.remote).String(); got != c.want {
			t.Errorf("sourceNet(%q) = %s, want %s", c.remote, got, c.want)
		}
	}
}

func FuzzSourceNet(f *testing.F) {
	for _, s := range []string{"192.0.2.7:1", "[2001:db8::1]:2", "[::ffff:10.0.0.1]:3", "[fe80::1%eth0]:4", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, remote string) {
		p := sourceNet(remote)
		if !p.IsValid() {
			return
		}
		if p.Addr().Is4() && p.Bits() != 24 || !p.Addr().Is4() && p.Bits() != 64 || p.Addr().Is4In6() || p.Addr().Zone() != "" || p != p.Masked() {
			t.Fatalf("sourceNet(%q) = %s", remote, p)
		}
	})
}

// Addresses of one /24 share a budget; another /24 has its own; tokens
// come back one per interval; the limiter forgets networks past its cap.
func TestNetLimiter(t *testing.T) {
	l := newNetLimiter(3, 4*time.Second)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := sourceNet("10.1.2.3:1")
	for i := 0; i < 3; i++ {
		if ok, _ := l.take(sourceNet(fmt.Sprintf("10.1.2.%d:1", 10+i)), t0); !ok {
			t.Fatalf("take %d refused", i)
		}
	}
	if ok, retry := l.take(a, t0); ok || retry != 4*time.Second {
		t.Fatalf("4th take from the /24: %v, retry %s", ok, retry)
	}
	if ok, _ := l.take(sourceNet("10.1.3.3:1"), t0); !ok {
		t.Fatal("another /24 refused")
	}
	if ok, retry := l.take(a, t0.Add(3*time.Second)); ok || retry != time.Second {
		t.Fatalf("3 s later: %v, retry %s", ok, retry)
	}
	if ok, _ := l.take(a, t0.Add(4*time.Second)); !ok {
		t.Fatal("4 s later: refused")
	}
	// A clock that steps back neither refills nor breaks the bucket.
	if ok, _ := l.take(a, t0); ok {
		t.Fatal("taken with the clock stepped back")
	}
	for i := 0; i < maxNetBuckets+50; i++ {
		n := netip.PrefixFrom(netip.AddrFrom4([4]byte{11, byte(i >> 8), byte(i), 0}), 24)
		if ok, _ := l.take(n, t0); !ok {
			t.Fatalf("new network %d refused", i)
		}
		if len(l.buckets) > maxNetBuckets {
			t.Fatalf("%d buckets, cap %d", len(l.buckets), maxNetBuckets)
		}
	}
}
