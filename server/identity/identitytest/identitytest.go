// Package identitytest is the contract every implementation of
// identity.Bindings and identity.Codes passes: the same rules on a
// connect, the same enrollment and reset, the same life of a pairing
// code (waiting, slow_down, approval, the token handed over once, denial,
// expiry, abandonment, the caps and eviction). Package identity runs it
// on LocalBindings and LocalCodes, package cluster on its JetStream
// implementations; what only one store does (a workspace file, the ring
// of dropped codes, two nodes) each tests on its own.
package identitytest

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/identity"
)

// NewBindings returns a new, empty store of one channel's bindings
// (channel "ch") and a way to open it again: each call of open is another
// handle on the same bindings (a reopened file, another node).
type NewBindings func(t *testing.T) (open func() identity.Bindings)

// Bindings runs the Bindings contract.
func Bindings(t *testing.T, newStore NewBindings) {
	t.Run("AuthorizeRules", func(t *testing.T) { authorizeRules(t, newStore(t)) })
	t.Run("EnrollAndReset", func(t *testing.T) { enrollAndReset(t, newStore(t)()) })
	t.Run("AuthorizeBindsOnce", func(t *testing.T) { authorizeBindsOnce(t, newStore(t)()) })
}

// Every rule of Decide, in its order, on one store: exact beats learnt,
// learnt beats glob, a bound or owned token is refused for another peer,
// a list token binds once, a stale first-use binding binds nothing; what
// was learnt is there when the store is opened again.
func authorizeRules(t *testing.T, open func() identity.Bindings) {
	b := open()
	tokens := config.Tokens{
		ByPeer: map[string]string{"pi-1": "tok-pi-1", "kiosk-*": "kiosk-shared"},
		Any:    []string{"lab-one", "lab-two"},
	}
	if err := b.Enroll(config.DigestOf("enrolled-tok"), identity.Binding{PeerID: "lobby", Source: identity.BindEnrolled, Name: "Lobby", Tags: map[string]string{"site": "hq"}}); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		peer, token  string
		ok, takeover bool
		bound        bool
		why          string
	}{
		{"pi-1", "tok-pi-1", true, false, false, ""},
		{"pi-1", "lab-one", false, true, false, "has its own token in the config"},
		{"pi-1", "", false, false, false, "no token"},
		{"pi-9", "tok-pi-1", false, false, false, "belongs to another peer_id in the config"},
		{"kiosk-3", "kiosk-shared", true, false, false, ""},
		{"desk-1", "kiosk-shared", false, false, false, "not valid for this peer_id"},
		{"lab-a", "lab-one", true, false, true, ""},
		{"lab-a", "lab-one", true, false, false, ""}, // bound already
		{"lab-b", "lab-one", false, false, false, "bound to another peer_id (first-use)"},
		{"lab-a", "lab-two", false, true, false, "is bound to another token (first-use"},
		{"lobby", "enrolled-tok", true, false, false, ""},
		{"lobby", "lab-two", false, true, false, "is bound to another token (enrolled"},
		{"lab-c", "enrolled-tok", false, false, false, "bound to another peer_id (enrolled)"},
		{"lab-c", "nope", false, false, false, "not valid for this peer_id"},
	} {
		d := b.Authorize(tokens, tc.peer, tc.token, "192.0.2.1:5")
		if d.OK != tc.ok || d.Takeover != tc.takeover || d.Bound != tc.bound || !strings.Contains(d.Why, tc.why) || (tc.why == "") != (d.Why == "") {
			t.Errorf("%d: %s with %q: %+v, want ok %v takeover %v bound %v why %q", i, tc.peer, tc.token, d, tc.ok, tc.takeover, tc.bound, tc.why)
		}
	}
	// The enrolled peer's connect takes the operator's name and tags.
	f := &link.Connect{PeerID: "lobby", DeviceName: "mine", Tags: map[string]string{"own": "1"}}
	b.Authorize(tokens, "lobby", "enrolled-tok", "").Apply(f)
	if f.DeviceName != "Lobby" || f.Tags["site"] != "hq" || f.Tags["own"] != "1" {
		t.Errorf("applied: %+v", f)
	}
	if !b.Known(config.DigestOf("enrolled-tok")) || b.Known(config.DigestOf("lab-one")) || b.Known(config.DigestOf("nope")) {
		t.Error("Known is for enrolled tokens only (a first-use token is known by the config)")
	}

	// lab-one leaves the config: its binding is stale, the token refused
	// and lab-a free for lab-two.
	tokens.Any = []string{"lab-two"}
	if d := b.Authorize(tokens, "lab-a", "lab-one", ""); d.OK || !strings.Contains(d.Why, "not valid") {
		t.Errorf("a token out of the config: %+v", d)
	}
	if d := b.Authorize(tokens, "lab-a", "lab-two", ""); !d.OK || !d.Bound {
		t.Errorf("lab-two on lab-a after lab-one left: %+v", d)
	}

	// What was learnt is there when the store is opened again.
	again := open()
	var peers []string
	for _, bd := range again.List() {
		peers = append(peers, bd.PeerID+"/"+bd.Source+"/"+bd.Digest[:8])
	}
	want := "lab-a/first-use/" + digestHex("lab-two")[:8] + " lobby/enrolled/" + digestHex("enrolled-tok")[:8]
	if got := strings.Join(peers, " "); got != want {
		t.Errorf("opened again: %s, want %s", got, want)
	}
	if d := again.Authorize(tokens, "lab-a", "lab-two", ""); !d.OK || d.Bound {
		t.Errorf("lab-two on lab-a, opened again: %+v", d)
	}
}

func digestHex(token string) string {
	d := config.DigestOf(token)
	return fmt.Sprintf("%x", d[:])
}

// Enroll refuses a peer with a binding; Reset frees it; a reset enrolled
// token stops being known.
func enrollAndReset(t *testing.T, b identity.Bindings) {
	now := time.Now().UTC()
	if err := b.Enroll(config.DigestOf("t1"), identity.Binding{PeerID: "p", Source: identity.BindEnrolled, BoundAt: now}); err != nil {
		t.Fatal(err)
	}
	err := b.Enroll(config.DigestOf("t2"), identity.Binding{PeerID: "p", Source: identity.BindEnrolled, BoundAt: now})
	if !errors.Is(err, identity.ErrClaimed) || !strings.Contains(err.Error(), "DELETE /api/channels/{channel_id}/bindings/p") {
		t.Fatalf("second enroll of p: %v", err)
	}
	if old, err := b.Reset("p"); err != nil || old == nil || old.PeerID != "p" || old.Source != identity.BindEnrolled {
		t.Fatalf("reset: %+v %v", old, err)
	}
	if old, err := b.Reset("p"); err != nil || old != nil {
		t.Fatalf("reset again: %+v %v", old, err)
	}
	if b.Known(config.DigestOf("t1")) {
		t.Fatal("a reset token is still known")
	}
	if d := b.Authorize(config.Tokens{}, "p", "t1", ""); d.OK {
		t.Fatalf("a reset token still connects: %+v", d)
	}
	if err := b.Enroll(config.DigestOf("t2"), identity.Binding{PeerID: "p", Source: identity.BindEnrolled, BoundAt: now}); err != nil {
		t.Fatalf("enroll after reset: %v", err)
	}
	if l := b.List(); len(l) != 1 || l[0].PeerID != "p" || l[0].Digest != digestHex("t2") {
		t.Fatalf("list: %+v", l)
	}
}

// Connects racing with one list token as different peers: exactly one
// binds it.
func authorizeBindsOnce(t *testing.T, b identity.Bindings) {
	BindRace(t, []identity.Bindings{b})
}

// BindRace runs 16 connects at once, spread over the handles of one
// store, each presenting one list token as another peer: exactly one is
// allowed, and one binding is listed on every handle.
func BindRace(t *testing.T, handles []identity.Bindings) {
	t.Helper()
	tokens := config.Tokens{Any: []string{"lab"}}
	const n = 16
	oks := make(chan bool, n)
	for i := range n {
		go func() { oks <- handles[i%len(handles)].Authorize(tokens, "peer-"+string(rune('a'+i)), "lab", "").OK }()
	}
	won := 0
	for range n {
		if <-oks {
			won++
		}
	}
	if won != 1 {
		t.Fatalf("%d connects allowed, want 1", won)
	}
	for i, h := range handles {
		if l := h.List(); len(l) != 1 {
			t.Fatalf("handle %d lists %d bindings, want 1: %+v", i, len(l), l)
		}
	}
}

// T0 is the codes contract's clock.
var T0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// PendingFrom is a code asked for by device on channel "ch" from remote.
func PendingFrom(device, remote string, now time.Time) identity.Pending {
	return identity.Pending{ChannelID: "ch", DeviceDigest: config.DigestOf(device), Remote: remote, Network: identity.SourceNet(remote),
		Requested: now, Expiry: now.Add(10 * time.Minute), LastPoll: now, Interval: identity.PollInterval * time.Second}
}

// MustStart starts p on c.
func MustStart(t *testing.T, c identity.Codes, p identity.Pending, now time.Time) string {
	t.Helper()
	code, _, err := c.Start(p, now)
	if err != nil {
		t.Fatalf("start %s: %v", p.Remote, err)
	}
	return code
}

// Caps are the limits a Codes under test keeps: identity.MaxPending and
// identity.MaxPendingPerNet unless the store takes others (a test's).
type Caps struct{ Total, PerNet int }

// DefaultCaps are identity's.
var DefaultCaps = Caps{Total: identity.MaxPending, PerNet: identity.MaxPendingPerNet}

// Codes runs the Codes contract; each newCodes(t) is a new, empty store
// keeping caps.
func Codes(t *testing.T, newCodes func(t *testing.T) identity.Codes, caps Caps) {
	t.Run("Lifecycle", func(t *testing.T) { codesLifecycle(t, newCodes(t)) })
	t.Run("Drops", func(t *testing.T) { codesDrops(t, newCodes(t)) })
	t.Run("NetCap", func(t *testing.T) { codesNetCap(t, newCodes(t), caps) })
	t.Run("TotalCap", func(t *testing.T) { codesTotalCap(t, newCodes(t), caps) })
}

// A code's life without HTTP: waiting, slow_down, approved, the token
// handed over once, then unknown; a denied code's device is told
// access_denied and the operator 410; a code on another channel is
// unknown.
func codesLifecycle(t *testing.T, c identity.Codes) {
	t0 := T0
	code := MustStart(t, c, PendingFrom("dev-1", "192.0.2.1:1", t0), t0)
	dev := config.DigestOf("dev-1")
	step := identity.PollInterval * time.Second
	if r := c.Poll("other", dev, t0.Add(step)); r.Outcome != identity.PollUnknown {
		t.Fatalf("poll on another channel: %+v", r)
	}
	if r := c.Poll("ch", dev, t0.Add(step)); r.Outcome != identity.PollWaiting || r.Pending.Code != code {
		t.Fatalf("first poll: %+v", r)
	}
	if r := c.Poll("ch", dev, t0.Add(step+time.Second/2)); r.Outcome != identity.PollSlowDown || r.Pending.Interval != step+5*time.Second || r.Since != time.Second/2 {
		t.Fatalf("fast poll: %+v", r)
	}
	refused := errors.New("refused")
	if _, err := c.Approve(code, t0.Add(2*step), func(identity.Pending) (identity.Approval, error) { return identity.Approval{}, refused }); err != refused {
		t.Fatalf("approve refused by its callback: %v", err)
	}
	if l := c.List(t0.Add(2 * step)); len(l) != 1 || l[0].Approved || l[0].Code != code {
		t.Fatalf("after a refused approval: %+v", l)
	}
	approvals := 0
	p, err := c.Approve(code, t0.Add(2*step), func(p identity.Pending) (identity.Approval, error) {
		approvals++
		if p.Code != code || p.DeviceDigest != dev || p.Remote != "192.0.2.1:1" {
			t.Errorf("approve was given %+v", p)
		}
		return identity.Approval{PeerID: "lobby", Token: "tl_x", By: "otto"}, nil
	})
	if err != nil || !p.Approved || p.PeerID != "lobby" || p.ApprovedBy != "otto" || approvals != 1 {
		t.Fatalf("approve: %+v %v (approve called %d times)", p, err, approvals)
	}
	var ae *identity.ApprovedError
	if _, err := c.Approve(code, t0.Add(2*step), nil); !errors.As(err, &ae) || ae.Pending.PeerID != "lobby" {
		t.Fatalf("second approval: %v", err)
	}
	if _, err := c.Deny(code, t0.Add(2*step)); !errors.As(err, &ae) {
		t.Fatalf("deny of an approved code: %v", err)
	}
	if l := c.List(t0.Add(2 * step)); len(l) != 1 || !l[0].Approved {
		t.Fatalf("approved, listed: %+v", l)
	}
	// Approved, the code waits for its device past the idle time.
	late := t0.Add(20 * step)
	if r := c.Poll("ch", dev, late); r.Outcome != identity.PollToken || r.Pending.Token != "tl_x" || r.Pending.PeerID != "lobby" {
		t.Fatalf("collecting: %+v", r)
	}
	if r := c.Poll("ch", dev, late); r.Outcome != identity.PollUnknown {
		t.Fatalf("collecting twice: %+v", r)
	}
	var np *identity.NotPendingError
	if _, err := c.Approve(code, late, nil); !errors.As(err, &np) || np.Gone {
		t.Fatalf("approving a collected code: %v", err)
	}
	if l := c.List(late); len(l) != 0 {
		t.Fatalf("collected, listed: %+v", l)
	}

	code2 := MustStart(t, c, PendingFrom("dev-2", "192.0.2.2:1", late), late)
	if p, err := c.Deny(code2, late); err != nil || p.Code != code2 {
		t.Fatalf("deny: %+v %v", p, err)
	}
	if r := c.Poll("ch", config.DigestOf("dev-2"), late); r.Outcome != identity.PollDropped || r.Dropped != identity.DropDenied {
		t.Fatalf("the denied device's poll: %+v", r)
	}
	if _, err := c.Deny(code2, late); !errors.As(err, &np) || !np.Gone || np.Why != identity.DropDenied {
		t.Fatalf("deny twice: %v", err)
	}
	if _, err := c.Deny("ABCD-EFGH", late); !errors.As(err, &np) || np.Gone {
		t.Fatalf("deny of a code never issued: %v", err)
	}
}

// Expired and abandoned codes leave at the next call and are remembered
// with why.
func codesDrops(t *testing.T, c identity.Codes) {
	t0 := T0
	idle := identity.IdlePolls * identity.PollInterval * time.Second
	abandoned := MustStart(t, c, PendingFrom("quiet", "192.0.2.1:1", t0), t0)
	short := PendingFrom("short", "192.0.2.2:1", t0)
	short.Expiry = t0.Add(time.Second)
	expired := MustStart(t, c, short, t0)
	if l := c.List(t0.Add(idle)); len(l) != 1 || l[0].Code != abandoned {
		t.Fatalf("at the idle limit: %+v, want the one not expired", l)
	}
	if l := c.List(t0.Add(idle + time.Millisecond)); len(l) != 0 {
		t.Fatalf("past the idle limit: %+v", l)
	}
	var np *identity.NotPendingError
	for code, why := range map[string]identity.Drop{abandoned: identity.DropAbandoned, expired: identity.DropExpired} {
		if _, err := c.Deny(code, t0.Add(idle)); !errors.As(err, &np) || !np.Gone || np.Why != why {
			t.Errorf("%s: %v, want gone for %d", code, err, why)
		}
	}
	if r := c.Poll("ch", config.DigestOf("quiet"), t0.Add(idle)); r.Outcome != identity.PollDropped || r.Dropped != identity.DropAbandoned {
		t.Errorf("the abandoned device's poll: %+v", r)
	}
	// A poll finds its own code expired without a List first.
	p := PendingFrom("poller", "192.0.2.3:1", t0)
	p.Expiry = t0.Add(time.Second)
	MustStart(t, c, p, t0)
	if r := c.Poll("ch", config.DigestOf("poller"), t0.Add(2*time.Second)); r.Outcome != identity.PollDropped || r.Dropped != identity.DropExpired {
		t.Errorf("polling an expired code: %+v", r)
	}
}

// One network holds at most caps.PerNet.
func codesNetCap(t *testing.T, c identity.Codes, caps Caps) {
	for i := range caps.PerNet {
		MustStart(t, c, PendingFrom(fmt.Sprint("a", i), fmt.Sprintf("192.0.2.%d:1", i), T0), T0)
	}
	var nf *identity.NetFullError
	if _, _, err := c.Start(PendingFrom("a-more", "192.0.2.200:1", T0), T0); !errors.As(err, &nf) || nf.N != caps.PerNet {
		t.Fatalf("past the network's cap: %v", err)
	}
	MustStart(t, c, PendingFrom("b", "198.51.100.1:1", T0), T0)
}

// At caps.Total a network holding as many as any other gets ErrFull, and
// a network holding fewer evicts the oldest unapproved code of the one
// holding the most.
func codesTotalCap(t *testing.T, c identity.Codes, caps Caps) {
	var first string
	for i := range caps.Total {
		at := T0.Add(time.Duration(i) * time.Millisecond)
		code := MustStart(t, c, PendingFrom(fmt.Sprint("n", i), fmt.Sprintf("10.%d.%d.1:1", i>>8, i&255), at), at)
		if i == 0 {
			first = code
		}
	}
	now := T0.Add(time.Second)
	if _, _, err := c.Start(PendingFrom("n-more", "10.0.20.2:1", now), now); !errors.Is(err, identity.ErrFull) {
		t.Fatalf("a network with one code at the cap: %v", err)
	}
	code, evicted, err := c.Start(PendingFrom("new", "198.51.100.1:1", now), now)
	if err != nil || code == "" || evicted == nil || evicted.Code != first || evicted.Network != netip.MustParsePrefix("10.0.0.0/24") {
		t.Fatalf("a new network at the cap: %q evicted %+v (want %s) %v", code, evicted, first, err)
	}
	if r := c.Poll("ch", evicted.DeviceDigest, now); r.Outcome != identity.PollDropped || r.Dropped != identity.DropEvicted {
		t.Fatalf("the evicted device's poll: %+v", r)
	}
	if l := c.List(now); len(l) != caps.Total {
		t.Fatalf("%d pending, want %d", len(l), caps.Total)
	}
}
