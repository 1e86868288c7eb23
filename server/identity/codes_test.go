package identity

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"termlink/server/config"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// pendingFrom is a code asked for by device on channel "ch" from remote.
func pendingFrom(device, remote string, now time.Time) Pending {
	return Pending{ChannelID: "ch", DeviceDigest: config.DigestOf(device), Remote: remote, Network: sourceNet(remote),
		Requested: now, Expiry: now.Add(10 * time.Minute), LastPoll: now, Interval: PollInterval * time.Second}
}

func mustStart(t *testing.T, c Codes, p Pending, now time.Time) string {
	t.Helper()
	code, _, err := c.Start(p, now)
	if err != nil {
		t.Fatalf("start %s: %v", p.Remote, err)
	}
	return code
}

// A code's life on LocalCodes without HTTP: waiting, slow_down, approved,
// the token handed over once, then unknown; a denied code's device is
// told access_denied and the operator 410; a code on another channel is
// unknown.
func TestLocalCodesLifecycle(t *testing.T) {
	c := NewLocalCodes()
	code := mustStart(t, c, pendingFrom("dev-1", "192.0.2.1:1", t0), t0)
	dev := config.DigestOf("dev-1")
	step := PollInterval * time.Second
	if r := c.Poll("other", dev, t0.Add(step)); r.Outcome != PollUnknown {
		t.Fatalf("poll on another channel: %+v", r)
	}
	if r := c.Poll("ch", dev, t0.Add(step)); r.Outcome != PollWaiting || r.Pending.Code != code {
		t.Fatalf("first poll: %+v", r)
	}
	if r := c.Poll("ch", dev, t0.Add(step+time.Second/2)); r.Outcome != PollSlowDown || r.Pending.Interval != step+slowDownStep {
		t.Fatalf("fast poll: %+v", r)
	}
	refused := errors.New("refused")
	if _, err := c.Approve(code, t0.Add(2*step), func(Pending) (Approval, error) { return Approval{}, refused }); err != refused {
		t.Fatalf("approve refused by its callback: %v", err)
	}
	if l := c.List(t0.Add(2 * step)); len(l) != 1 || l[0].Approved {
		t.Fatalf("after a refused approval: %+v", l)
	}
	p, err := c.Approve(code, t0.Add(2*step), func(p Pending) (Approval, error) {
		return Approval{PeerID: "lobby", Token: "tl_x", By: "otto"}, nil
	})
	if err != nil || !p.Approved || p.PeerID != "lobby" || p.ApprovedBy != "otto" {
		t.Fatalf("approve: %+v %v", p, err)
	}
	var ae *ApprovedError
	if _, err := c.Approve(code, t0.Add(2*step), nil); !errors.As(err, &ae) || ae.Pending.PeerID != "lobby" {
		t.Fatalf("second approval: %v", err)
	}
	if _, err := c.Deny(code, t0.Add(2*step)); !errors.As(err, &ae) {
		t.Fatalf("deny of an approved code: %v", err)
	}
	// Approved, the code waits for its device past the idle time.
	late := t0.Add(20 * step)
	if r := c.Poll("ch", dev, late); r.Outcome != PollToken || r.Pending.Token != "tl_x" || r.Pending.PeerID != "lobby" {
		t.Fatalf("collecting: %+v", r)
	}
	if r := c.Poll("ch", dev, late); r.Outcome != PollUnknown {
		t.Fatalf("collecting twice: %+v", r)
	}
	var np *NotPendingError
	if _, err := c.Approve(code, late, nil); !errors.As(err, &np) || np.Gone {
		t.Fatalf("approving a collected code: %v", err)
	}

	code2 := mustStart(t, c, pendingFrom("dev-2", "192.0.2.2:1", late), late)
	if p, err := c.Deny(code2, late); err != nil || p.Code != code2 {
		t.Fatalf("deny: %+v %v", p, err)
	}
	if r := c.Poll("ch", config.DigestOf("dev-2"), late); r.Outcome != PollDropped || r.Dropped != DropDenied {
		t.Fatalf("the denied device's poll: %+v", r)
	}
	if _, err := c.Deny(code2, late); !errors.As(err, &np) || !np.Gone || np.Why != DropDenied {
		t.Fatalf("deny twice: %v", err)
	}
}

// Expired and abandoned codes leave at the next call and are remembered
// with why; the ring forgets the oldest past maxDropped.
func TestLocalCodesDrops(t *testing.T) {
	c := NewLocalCodes()
	idle := IdlePolls * PollInterval * time.Second
	abandoned := mustStart(t, c, pendingFrom("quiet", "192.0.2.1:1", t0), t0)
	short := pendingFrom("short", "192.0.2.2:1", t0)
	short.Expiry = t0.Add(time.Second)
	expired := mustStart(t, c, short, t0)
	if l := c.List(t0.Add(idle)); len(l) != 1 {
		t.Fatalf("at the idle limit: %d listed, want the one not expired", len(l))
	}
	if l := c.List(t0.Add(idle + time.Millisecond)); len(l) != 0 {
		t.Fatalf("past the idle limit: %+v", l)
	}
	var np *NotPendingError
	for code, why := range map[string]Drop{abandoned: DropAbandoned, expired: DropExpired} {
		if _, err := c.Deny(code, t0.Add(idle)); !errors.As(err, &np) || !np.Gone || np.Why != why {
			t.Errorf("%s: %v, want gone for %d", code, err, why)
		}
	}
	for i := range maxDropped {
		now := t0.Add(time.Hour)
		code := mustStart(t, c, pendingFrom(fmt.Sprint("d", i), fmt.Sprintf("10.%d.%d.1:1", i>>8, i&255), now), now)
		if _, err := c.Deny(code, now); err != nil {
			t.Fatal(err)
		}
	}
	if r := c.Poll("ch", config.DigestOf("quiet"), t0.Add(time.Hour)); r.Outcome != PollUnknown {
		t.Fatalf("the oldest drop is still remembered past %d: %+v", maxDropped, r)
	}
	if r := c.Poll("ch", config.DigestOf("d5"), t0.Add(time.Hour)); r.Outcome != PollDropped || r.Dropped != DropDenied {
		t.Fatalf("a recent drop is forgotten: %+v", r)
	}
}

// One network holds at most MaxPendingPerNet; at MaxPending a network
// holding as many as any other gets ErrFull, and a network holding fewer
// evicts the oldest unapproved code of the one holding the most.
func TestLocalCodesCaps(t *testing.T) {
	c := NewLocalCodes()
	for i := range MaxPendingPerNet {
		mustStart(t, c, pendingFrom(fmt.Sprint("a", i), fmt.Sprintf("192.0.2.%d:1", i), t0), t0)
	}
	var nf *NetFullError
	if _, _, err := c.Start(pendingFrom("a-more", "192.0.2.200:1", t0), t0); !errors.As(err, &nf) || nf.N != MaxPendingPerNet {
		t.Fatalf("past the network's cap: %v", err)
	}

	c = NewLocalCodes()
	var first string
	for i := range MaxPending {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		code := mustStart(t, c, pendingFrom(fmt.Sprint("n", i), fmt.Sprintf("10.%d.%d.1:1", i>>8, i&255), at), at)
		if i == 0 {
			first = code
		}
	}
	now := t0.Add(time.Second)
	if _, _, err := c.Start(pendingFrom("n-more", "10.0.20.2:1", now), now); !errors.Is(err, ErrFull) {
		t.Fatalf("a network with one code at the cap: %v", err)
	}
	code, evicted, err := c.Start(pendingFrom("new", "198.51.100.1:1", now), now)
	if err != nil || code == "" || evicted == nil || evicted.Code != first || evicted.Network != netip.MustParsePrefix("10.0.0.0/24") {
		t.Fatalf("a new network at the cap: %q evicted %+v (want %s) %v", code, evicted, first, err)
	}
	if r := c.Poll("ch", evicted.DeviceDigest, now); r.Outcome != PollDropped || r.Dropped != DropEvicted {
		t.Fatalf("the evicted device's poll: %+v", r)
	}
	if l := c.List(now); len(l) != MaxPending {
		t.Fatalf("%d pending, want %d", len(l), MaxPending)
	}
}
