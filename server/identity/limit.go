package identity

import (
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"termlink/server/throttle"
)

// maxNetBuckets is how many source networks a netLimiter tracks.
const maxNetBuckets = 10000

// SourceNet is the network a remote address is limited by (sourceNet),
// for another Codes and its tests.
func SourceNet(remote string) netip.Prefix { return sourceNet(remote) }

// sourceNet is the network a remote address ("ip:port") is limited by:
// its IPv4 /24 or IPv6 /64 (an IPv4-mapped IPv6 address counts as IPv4,
// a zone is ignored). An address that does not parse gives the invalid
// Prefix, one network for all such.
func sourceNet(remote string) netip.Prefix {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p
}

func netName(p netip.Prefix) string {
	if !p.IsValid() {
		return "an address that is not IP"
	}
	return "network " + p.String()
}

// netLimiter is a token bucket per source network: burst at once, then
// one per interval. It tracks at most maxNetBuckets networks: past that
// it forgets the refilled ones, then any.
type netLimiter struct {
	mu       sync.Mutex
	burst    float64
	interval time.Duration
	buckets  map[netip.Prefix]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newNetLimiter(burst int, interval time.Duration) *netLimiter {
	return &netLimiter{burst: float64(burst), interval: interval, buckets: map[netip.Prefix]*bucket{}}
}

func (l *netLimiter) refillLocked(n netip.Prefix, now time.Time) *bucket {
	b := l.buckets[n]
	if b == nil {
		if len(l.buckets) >= maxNetBuckets {
			for k, o := range l.buckets { // forget full buckets first
				if now.Sub(o.last) >= time.Duration(l.burst)*l.interval {
					delete(l.buckets, k)
				}
			}
			for k := range l.buckets { // then any
				if len(l.buckets) < maxNetBuckets {
					break
				}
				delete(l.buckets, k)
			}
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[n] = b
	}
	if now.After(b.last) {
		b.tokens = math.Min(l.burst, b.tokens+float64(now.Sub(b.last))/float64(l.interval))
		b.last = now
	}
	return b
}

// take takes a token of network n if there is one, and else reports how
// long until there is.
func (l *netLimiter) take(n netip.Prefix, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refillLocked(n, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.interval))
}

// GateNet asks the server's gate whether a log line or event of kind
// that an unauthenticated request from remote caused may be written,
// with remote's network (sourceNet: its /24 or /64, as enrollment's
// limits count) as the source: a burst per network, and the gate's bound
// for all sources of the kind; its summary says how many were held back.
// detail (cut by the gate) is what a summary shows of the last one held
// back. A nil gate allows everything.
func GateNet(g *throttle.Gate, kind, remote, detail string) bool {
	return g.Allow(kind, netName(sourceNet(remote)), detail)
}
