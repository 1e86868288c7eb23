package identity

import (
	"fmt"
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

// The ring of dropped codes forgets the oldest past maxDropped (the
// contract, identitytest, covers the drops themselves).
func TestLocalCodesDropRing(t *testing.T) {
	c := NewLocalCodes()
	idle := IdlePolls * PollInterval * time.Second
	mustStart(t, c, pendingFrom("quiet", "192.0.2.1:1", t0), t0)
	if l := c.List(t0.Add(idle + time.Millisecond)); len(l) != 0 {
		t.Fatalf("past the idle limit: %+v", l)
	}
	if r := c.Poll("ch", config.DigestOf("quiet"), t0.Add(idle)); r.Outcome != PollDropped || r.Dropped != DropAbandoned {
		t.Fatalf("the abandoned device's poll: %+v", r)
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
