package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/identity"
	"termlink/server/identity/identitytest"
)

// openNode opens a node named name on the JetStream at url, closed when
// the test ends: each stands for another termserver of the cluster.
func openNode(t *testing.T, url, name string) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	cfg := config.Cluster{NATS: []string{url}, Role: config.RoleEdge, Name: name, Partitions: 1,
		Replicas: 1, AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
	n, err := Open(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

func openBindings(t *testing.T, n *Node, channel string) *Bindings {
	t.Helper()
	b, err := n.OpenBindings(context.Background(), channel)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func openCodes(t *testing.T, n *Node, opt CodesOptions) *Codes {
	t.Helper()
	c := n.Codes(opt)
	if err := c.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// The JetStream bindings keep identity's contract; opening them again is
// another node on the same NATS.
func TestBindingsContract(t *testing.T) {
	t.Parallel()
	identitytest.Bindings(t, func(t *testing.T) func() identity.Bindings {
		url := startJetStream(t)
		nodes := 0
		return func() identity.Bindings {
			nodes++
			return openBindings(t, openNode(t, url, "e"+string(rune('0'+nodes))), "ch")
		}
	})
}

// The JetStream codes keep identity's contract (with caps of 40 and 4:
// the rules are the same, and a thousand codes would take minutes).
func TestCodesContract(t *testing.T) {
	t.Parallel()
	identitytest.Codes(t, func(t *testing.T) identity.Codes {
		return openCodes(t, openNode(t, startJetStream(t), "e1"), CodesOptions{MaxPending: 40, MaxPendingPerNet: 4})
	}, identitytest.Caps{Total: 40, PerNet: 4})
}

// Two nodes race to bind one list token as different peers: exactly one
// connect wins, and both nodes list that one binding; the winner's token
// then connects through either node, and nobody else's.
func TestBindingsRaceAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a, b := openBindings(t, openNode(t, url, "edge-a"), "ch"), openBindings(t, openNode(t, url, "edge-b"), "ch")
	identitytest.BindRace(t, []identity.Bindings{a, b})
	winner := a.List()[0].PeerID
	tokens := config.Tokens{Any: []string{"lab"}}
	for _, h := range []*Bindings{a, b} {
		if d := h.Authorize(tokens, winner, "lab", ""); !d.OK || d.Bound {
			t.Errorf("the winner %s: %+v", winner, d)
		}
		if d := h.Authorize(tokens, "someone-else", "lab", ""); d.OK || !strings.Contains(d.Why, "bound to another peer_id") {
			t.Errorf("another peer with the winner's token: %+v", d)
		}
	}
	// Channels do not share bindings.
	if l := openBindings(t, openNode(t, url, "edge-c"), "other").List(); len(l) != 0 {
		t.Errorf("channel other lists %+v", l)
	}
}

// Enroll races across nodes for one peer: one token wins; a reset on one
// node refuses the token on the other at once.
func TestBindingsEnrollAndResetAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a, b := openBindings(t, openNode(t, url, "edge-a"), "ch"), openBindings(t, openNode(t, url, "edge-b"), "ch")
	errs := make([]error, 8)
	atOnce(len(errs), func(i int) {
		h := a
		if i%2 == 1 {
			h = b
		}
		errs[i] = h.Enroll(config.DigestOf("tok-"+string(rune('a'+i))), identity.Binding{PeerID: "kiosk", Source: identity.BindEnrolled, BoundAt: time.Now()})
	})
	won := -1
	for i, err := range errs {
		if err == nil {
			if won >= 0 {
				t.Fatalf("enrollments %d and %d both bound kiosk", won, i)
			}
			won = i
		}
	}
	if won < 0 {
		t.Fatalf("no enrollment bound kiosk: %v", errs)
	}
	tok := "tok-" + string(rune('a'+won))
	if !b.Known(config.DigestOf(tok)) || !a.Known(config.DigestOf(tok)) {
		t.Fatal("the enrolled token is not known on both nodes")
	}
	if d := b.Authorize(config.Tokens{}, "kiosk", tok, ""); !d.OK {
		t.Fatalf("the enrolled token on the other node: %+v", d)
	}
	if old, err := a.Reset("kiosk"); err != nil || old == nil {
		t.Fatalf("reset: %+v %v", old, err)
	}
	if d := b.Authorize(config.Tokens{}, "kiosk", tok, ""); d.OK || b.Known(config.DigestOf(tok)) {
		t.Fatalf("the reset token on the other node: %+v", d)
	}
}

// A half-written binding (a binder that died between its two writes)
// binds nothing: it holds the peer while young, and is replaced once
// older than bindingSettle; a token's key left by a reset binds nothing.
func TestBindingsHalfWritten(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	b := openBindings(t, openNode(t, url, "edge-a"), "ch")
	ctx := context.Background()
	tokens := config.Tokens{Any: []string{"lab-one", "lab-two"}}
	write := func(boundAt time.Time) {
		t.Helper()
		d := config.DigestOf("lab-one")
		v := `{"peer_id":"p","token_sha256":"` + hexOf(d) + `","source":"first-use","bound_at":"` + boundAt.UTC().Format(time.RFC3339Nano) + `"}`
		if _, err := b.kv.Put(ctx, b.peerKey("p"), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	write(time.Now())
	if l := b.List(); len(l) != 0 {
		t.Fatalf("a half-written binding is listed: %+v", l)
	}
	if d := b.Authorize(tokens, "p", "lab-two", ""); d.OK {
		t.Fatalf("a peer being bound took another token: %+v", d)
	}
	if b.Known(config.DigestOf("lab-one")) {
		t.Fatal("a half-written binding's token is known")
	}
	write(time.Now().Add(-2 * bindingSettle))
	if d := b.Authorize(tokens, "p", "lab-two", ""); !d.OK || !d.Bound {
		t.Fatalf("debris older than bindingSettle holds the peer: %+v", d)
	}
	if l := b.List(); len(l) != 1 || l[0].Digest != hexOf(config.DigestOf("lab-two")) {
		t.Fatalf("after: %+v", l)
	}
	// A token's key naming a peer that does not name it back (a reset
	// that died between its two deletes) binds nothing either.
	if _, err := b.kv.Put(ctx, b.digestKey(config.DigestOf("lab-one")), []byte("ghost")); err != nil {
		t.Fatal(err)
	}
	if d := b.Authorize(tokens, "q", "lab-one", ""); !d.OK || !d.Bound {
		t.Fatalf("a token whose key is debris: %+v", d)
	}
}

func hexOf(d config.Digest) string {
	const digits = "0123456789abcdef"
	var sb strings.Builder
	for _, c := range d {
		sb.WriteByte(digits[c>>4])
		sb.WriteByte(digits[c&15])
	}
	return sb.String()
}

// A code asked for through one node is approved on the other and its
// token collected through the first, once; a code denied on one node is
// answered access_denied on the other; two nodes approving one code at
// once bind one token.
func TestCodesAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a, b := openCodes(t, openNode(t, url, "edge-a"), CodesOptions{}), openCodes(t, openNode(t, url, "worker-b"), CodesOptions{})
	now := time.Now()
	code := identitytest.MustStart(t, a, identitytest.PendingFrom("dev-1", "192.0.2.1:1", now), now)
	if l := b.List(now); len(l) != 1 || l[0].Code != code {
		t.Fatalf("listed on the other node: %+v", l)
	}
	if _, err := b.Approve(code, now, func(p identity.Pending) (identity.Approval, error) {
		return identity.Approval{PeerID: "lobby", Token: "tl_x", By: "otto"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	dev := config.DigestOf("dev-1")
	if r := a.Poll("ch", dev, now.Add(2*time.Second)); r.Outcome != identity.PollToken || r.Pending.Token != "tl_x" {
		t.Fatalf("collected on the first node: %+v", r)
	}
	if r := b.Poll("ch", dev, now.Add(4*time.Second)); r.Outcome != identity.PollUnknown {
		t.Fatalf("collected again on the other node: %+v", r)
	}

	code2 := identitytest.MustStart(t, b, identitytest.PendingFrom("dev-2", "192.0.2.2:1", now), now)
	if _, err := a.Deny(code2, now); err != nil {
		t.Fatal(err)
	}
	if r := b.Poll("ch", config.DigestOf("dev-2"), now); r.Outcome != identity.PollDropped || r.Dropped != identity.DropDenied {
		t.Fatalf("denied on the other node: %+v", r)
	}

	code3 := identitytest.MustStart(t, a, identitytest.PendingFrom("dev-3", "192.0.2.3:1", now), now)
	var mu sync.Mutex
	bound := 0
	var errs []error
	atOnce(4, func(i int) {
		_, err := []*Codes{a, b}[i%2].Approve(code3, now, func(identity.Pending) (identity.Approval, error) {
			mu.Lock()
			bound++
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // the binding's writes
			return identity.Approval{PeerID: "p3", Token: "tl_3"}, nil
		})
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	if bound != 1 {
		t.Fatalf("approve ran %d times for one code, want 1", bound)
	}
	// The others were told why: approved already, or being approved
	// elsewhere (ErrInProgress: the routes answer 409, not 500).
	for _, err := range errs {
		var ap *identity.ApprovedError
		if err != nil && !errors.As(err, &ap) && !errors.Is(err, identity.ErrInProgress) {
			t.Errorf("a concurrent approve: %v, want approved already or in progress", err)
		}
	}
	// Its device polls through both edges at once: one poll gets the token.
	tokens := make(chan identity.PollResult, 8)
	atOnce(cap(tokens), func(i int) {
		tokens <- []*Codes{a, b}[i%2].Poll("ch", config.DigestOf("dev-3"), now.Add(10*time.Second))
	})
	close(tokens)
	got := 0
	for r := range tokens {
		if r.Outcome == identity.PollToken {
			got++
			if r.Pending.PeerID != "p3" || r.Pending.Token != "tl_3" {
				t.Errorf("collected: %+v", r)
			}
		}
	}
	if got != 1 {
		t.Fatalf("the token of the code approved at once on two nodes was handed over %d times, want 1", got)
	}
}

// Starts racing on two nodes keep the network's cap: of 8 codes asked
// for at once from one network with room for 4, exactly 4 are issued.
func TestCodesCapAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	opt := CodesOptions{MaxPending: 40, MaxPendingPerNet: 4}
	nodes := []*Codes{openCodes(t, openNode(t, url, "edge-a"), opt), openCodes(t, openNode(t, url, "edge-b"), opt)}
	now := time.Now()
	errs := make([]error, 8)
	atOnce(len(errs), func(i int) {
		_, _, errs[i] = nodes[i%2].Start(identitytest.PendingFrom("dev-"+string(rune('a'+i)), "192.0.2.9:1", now), now)
	})
	issued := 0
	for _, err := range errs {
		if err == nil {
			issued++
		}
	}
	if issued != 4 || len(nodes[0].List(now)) != 4 {
		t.Fatalf("%d issued, %d listed; want 4 (errors %v)", issued, len(nodes[0].List(now)), errs)
	}
}

// atOnce runs fn(0..n-1) on n goroutines and waits for them all.
func atOnce(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}
