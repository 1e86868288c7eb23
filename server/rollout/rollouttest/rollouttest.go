package rollouttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/rollout"
)

// Open gives a test a new, empty store; each call of what it returns is
// another handle on it (another node of a shared store; a local store's
// directory opened again, once the handle before is closed).
type Open func(t *testing.T) func() rollout.Storage

// Run is the contract every rollout.Storage keeps.
func Run(t *testing.T, open Open) {
	t.Run("CompareAndSet", func(t *testing.T) { testCompareAndSet(t, open(t)) })
	t.Run("Lease", func(t *testing.T) { testLease(t, open(t)) })
	t.Run("Follow", func(t *testing.T) { testFollow(t, open(t)) })
	t.Run("Rollout", func(t *testing.T) { testRollout(t, open(t)) })
}

const (
	id1 = "ro-0000000000a1"
	id2 = "ro-0000000000a2"
)

func testCompareAndSet(t *testing.T, handle func() rollout.Storage) {
	ctx := context.Background()
	st := handle()
	defer st.Close()
	if v, rev, err := st.Get(ctx, id1); v != nil || rev != 0 || err != nil {
		t.Fatalf("Get of no record: %q, %d, %v", v, rev, err)
	}
	r1, err := st.Put(ctx, id1, []byte(`{"a":1}`), 0)
	if err != nil || r1 == 0 {
		t.Fatalf("create: %d, %v", r1, err)
	}
	if _, err := st.Put(ctx, id1, []byte(`{"a":2}`), 0); !errors.Is(err, rollout.ErrConflict) {
		t.Fatalf("a second create: %v, want ErrConflict", err)
	}
	r2, err := st.Put(ctx, id1, []byte(`{"a":3}`), r1)
	if err != nil || r2 <= r1 {
		t.Fatalf("update at %d: %d, %v", r1, r2, err)
	}
	if _, err := st.Put(ctx, id1, []byte(`{"a":4}`), r1); !errors.Is(err, rollout.ErrConflict) {
		t.Fatalf("update at a stale revision: %v, want ErrConflict", err)
	}
	if v, rev, err := st.Get(ctx, id1); string(v) != `{"a":3}` || rev != r2 || err != nil {
		t.Fatalf("Get: %q, %d, %v; want the update at %d", v, rev, err, r2)
	}
	if err := st.Delete(ctx, id1, r1); !errors.Is(err, rollout.ErrConflict) {
		t.Fatalf("delete at a stale revision: %v, want ErrConflict", err)
	}
	if err := st.Delete(ctx, id1, r2); err != nil {
		t.Fatal(err)
	}
	if v, rev, err := st.Get(ctx, id1); v != nil || rev != 0 || err != nil {
		t.Fatalf("Get once deleted: %q, %d, %v", v, rev, err)
	}
	if err := st.Delete(ctx, id1, r2); err != nil {
		t.Fatalf("delete of no record: %v", err)
	}
}

func testLease(t *testing.T, handle func() rollout.Storage) {
	ctx := context.Background()
	st := handle()
	defer st.Close()
	if h, rev, err := st.Lease(ctx); h != "" || rev != 0 || err != nil {
		t.Fatalf("the lease at first: %q, %d, %v", h, rev, err)
	}
	r1, err := st.TakeLease(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.TakeLease(ctx, "b", 0); !errors.Is(err, rollout.ErrConflict) {
		t.Fatalf("a second take at 0: %v, want ErrConflict", err)
	}
	r2, err := st.TakeLease(ctx, "a", r1)
	if err != nil || r2 <= r1 {
		t.Fatalf("renewal: %d, %v", r2, err)
	}
	if _, err := st.TakeLease(ctx, "b", r1); !errors.Is(err, rollout.ErrConflict) {
		t.Fatalf("a take at a stale revision: %v, want ErrConflict", err)
	}
	if h, rev, err := st.Lease(ctx); h != "a" || rev != r2 || err != nil {
		t.Fatalf("the lease: %q, %d, %v; want a at %d", h, rev, err, r2)
	}
}

// feedLog records a Follow.
type feedLog struct {
	mu     sync.Mutex
	puts   map[string]string
	loaded int // len(puts) at Loaded, +1 (0: not yet)
}

func (f *feedLog) Put(id string, v []byte, _ uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.puts[id] = string(v)
}
func (f *feedLog) Gone(id string, _ uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.puts, id)
}
func (f *feedLog) Loaded() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loaded = len(f.puts) + 1
}
func (f *feedLog) get(id string) (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts[id], f.loaded
}

func testFollow(t *testing.T, handle func() rollout.Storage) {
	ctx := context.Background()
	a := handle()
	if _, err := a.Put(ctx, id1, []byte(`{"a":1}`), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, id2, []byte(`{"b":1}`), 0); err != nil {
		t.Fatal(err)
	}
	shared := a.Info().Shared
	if !shared {
		a.Close()
	}
	b := handle()
	defer b.Close()
	f := &feedLog{puts: map[string]string{}}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Follow(fctx, f) }()
	defer func() { cancel(); <-done }()
	testwait.Until(t, "the records, then Loaded", func() bool { _, l := f.get(id1); return l > 0 })
	if v1, l := f.get(id1); v1 != `{"a":1}` || l != 3 {
		t.Fatalf("first load: %q, loaded after %d records; want both before Loaded", v1, l-1)
	}
	if !shared {
		return
	}
	defer a.Close()
	_, rev, _ := a.Get(ctx, id1)
	if _, err := a.Put(ctx, id1, []byte(`{"a":2}`), rev); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "another handle's write followed", func() bool { v, _ := f.get(id1); return v == `{"a":2}` })
}

// testRollout runs one rollout to its end over the store: on a shared
// store, started through node a and advanced by whichever holds the
// lease, each device updated through the node it is connected to; on a
// local one, then opened again, as it was left.
func testRollout(t *testing.T, handle func() rollout.Storage) {
	f := NewFleet()
	f.Connect("d1", "a", "v1")
	st := handle()
	shared := st.Info().Shared
	nodeB := "a"
	if shared {
		nodeB = "b"
	}
	f.Connect("d2", nodeB, "v1")
	newManager := func(st rollout.Storage, node string) *rollout.Manager {
		opt := f.Options(node)
		opt.Tick, opt.Lease, opt.NoSync = 50*time.Millisecond, 300*time.Millisecond, true
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
		defer cancel()
		m, err := rollout.New(ctx, st, opt)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a := newManager(st, "a")
	defer a.Close()
	b := a
	if shared {
		b = newManager(handle(), "b")
		defer b.Close()
	}
	r, err := a.Create(Channel, rollout.Request{Version: "v2", Target: rollout.Target{All: true}}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct{ peer, node string }{{"d1", "a"}, {"d2", nodeB}} {
		testwait.UntilOK(t, fmt.Sprintf("%s sent v2 through node %s", d.peer, d.node), func() error {
			s := f.Sent(d.node, d.peer)
			if len(s) == 1 && s[0].Version == "v2" && s[0].UpdateID == r.ID+".1" {
				return nil
			}
			var sent []string
			for _, u := range s {
				sent = append(sent, u.UpdateID+" "+u.Version)
			}
			return fmt.Errorf("frames sent %q; %s on node a: %s; on node b: %s", sent, d.peer, deviceView(a, r.ID, d.peer), deviceView(b, r.ID, d.peer))
		})
	}
	if shared && len(f.Sent("a", "d2")) != 0 {
		t.Fatal("node a sent d2, connected to node b, a frame")
	}
	f.Connect("d1", "a", "v2")
	f.Connect("d2", nodeB, "v2")
	if _, err := a.Report(Channel, "d1", Installed("v2")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Report(Channel, "d2", Installed("v2")); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*rollout.Manager{a, b} {
		testwait.Until(t, "the rollout done, on every node", func() bool {
			got, err := m.Get(Channel, r.ID)
			return err == nil && got.State == rollout.Done && got.Counts[rollout.Installed] == 2
		})
	}
	if shared {
		return
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	c := newManager(handle(), "a")
	defer c.Close()
	got, err := c.Get(Channel, r.ID)
	if err != nil || got.State != rollout.Done || !slices.ContainsFunc(got.Devices, func(d rollout.Device) bool { return d.PeerID == "d2" && d.State == rollout.Installed }) {
		t.Fatalf("opened again: %+v, %v", got, err)
	}
}

// deviceView says where rollout id and its device peer are in m's view,
// for a test's failure.
func deviceView(m *rollout.Manager, id, peer string) string {
	got, err := m.Get(Channel, id)
	if err != nil {
		return err.Error()
	}
	i := slices.IndexFunc(got.Devices, func(d rollout.Device) bool { return d.PeerID == peer })
	if i < 0 {
		return fmt.Sprintf("rollout %s wave %d, no device %s", got.State, got.Wave, peer)
	}
	d := got.Devices[i]
	return fmt.Sprintf("rollout %s wave %d, device wave %d %s (was %q, attempt %d, %q); controlling %v", got.State, got.Wave, d.Wave, d.State, d.Was, d.Attempt, d.Reason, m.Controlling())
}
