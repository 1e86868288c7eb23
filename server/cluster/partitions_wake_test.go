package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/internal/testwait"
	"termlink/server/config"
)

// TestDeadWorkersPartitionsTakenAtItsLeaseEnd: a worker "ghost" (the
// test writes its node entry and partition leases, as a worker does)
// holds some partitions; worker w2 the others. The ghost dies just after
// one of w2's ticks: its leases expire a lease later, just after another
// of w2's ticks (lease/3 apart). w2 takes the ghost's partitions at
// once, not a tick (lease/3) later (the schedule: TestLeaseWake).
func TestDeadWorkersPartitionsTakenAtItsLeaseEnd(t *testing.T) {
	t.Parallel()
	const lease, partitions = time.Second, 8
	ctx, cancel := context.WithTimeout(context.Background(), 2*testwait.Deadline)
	defer cancel()
	cfg := config.Cluster{NATS: []string{startJetStream(t)}, Role: config.RoleWorker, Name: "w2", Partitions: partitions,
		Replicas: 1, AckWait: 5 * time.Second, Lease: lease, DuplicateWindow: time.Minute, DedupeTTL: time.Hour,
		ConsumerStuck: 20 * time.Second}
	n, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	var ghostParts, mine []int
	for p := range partitions {
		if score("ghost", p) > score("w2", p) {
			ghostParts = append(ghostParts, p)
		} else {
			mine = append(mine, p)
		}
	}
	if len(ghostParts) == 0 || len(mine) == 0 {
		t.Fatalf("the ghost wins partitions %v, w2 %v: pick other names", ghostParts, mine)
	}
	ghost, _ := json.Marshal(NodeInfo{Name: "ghost", Role: "worker"})
	beat := func() time.Time {
		at := time.Now()
		if _, err := n.nodes.Put(ctx, "ghost", ghost); err != nil {
			t.Fatal(err)
		}
		for _, p := range ghostParts {
			if _, err := n.parts.Put(ctx, leaseKey(p), []byte("ghost")); err != nil {
				t.Fatal(err)
			}
		}
		return at
	}
	beat()
	n.RunWorker(WorkerHooks{Deliver: func(context.Context, *Delivery) {}, Unfinished: func(int) int { return 0 }})
	t.Cleanup(n.StopWorker)
	ownsAll := func(ps []int) bool {
		for _, p := range ps {
			if !n.Owns(p) {
				return false
			}
		}
		return true
	}
	// The ghost beats while it waits (a loaded machine may stretch a
	// wait past its lease: then w2 takes its partitions early, which the
	// outcome below allows).
	last := beat()
	beating := func() {
		if time.Since(last) > lease/6 {
			last = beat()
		}
	}
	testwait.Until(t, "w2 to own its partitions", func() bool { beating(); return ownsAll(mine) })
	// The ghost beats until just after one of w2's ticks (its lease
	// renewal), then dies.
	renewal := func() uint64 {
		e, err := n.parts.Get(ctx, leaseKey(mine[0]))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0 // expired (w2 late on a loaded machine): its next tick takes it again
		}
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	rev := renewal()
	testwait.Until(t, "w2 to renew its lease", func() bool { beating(); return renewal() != rev })
	last = beat()
	expiry := last.Add(lease)
	// The outcome is asserted (NATS expires the dead worker's entries
	// late on a loaded machine).
	testwait.Until(t, "w2 to take the dead ghost's partitions", func() bool { return ownsAll(ghostParts) })
	// How soon is logged, not asserted (a loaded machine delays any
	// timer): TestLeaseWake holds the schedule, this test the outcome.
	took := time.Since(expiry)
	t.Logf("the ghost's partitions %v taken %s after its leases expired (w2 ticks every %s)", ghostParts, took.Round(time.Millisecond), lease/3)
}

// TestLeaseWake: the loop's next tick is just after the soonest expiry of
// another worker's lease when that comes before the regular tick; entries
// written in the future or long expired (a clock off) are left to the
// regular tick.
func TestLeaseWake(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	regular := now.Add(lease / 3)
	for _, tc := range []struct {
		name string
		ages []time.Duration
		want time.Time
	}{
		{"none", nil, regular},
		{"expires before the tick", []time.Duration{lease - 200*time.Millisecond}, now.Add(200*time.Millisecond + expiryMargin)},
		{"the soonest of several", []time.Duration{lease / 2, lease - 300*time.Millisecond, lease - 100*time.Millisecond}, now.Add(100*time.Millisecond + expiryMargin)},
		{"expires after the tick", []time.Duration{lease / 3}, regular},
		{"just expired", []time.Duration{lease + 50*time.Millisecond}, now.Add(expiryMargin)},
		{"long expired (clock off)", []time.Duration{2 * lease}, regular},
		{"written in the future (clock off)", []time.Duration{-time.Second}, regular},
	} {
		w := leaseWake{lease: lease, now: now}
		for _, age := range tc.ages {
			w.expires(age)
		}
		if got := w.next(regular); !got.Equal(tc.want) {
			t.Errorf("%s: next tick at +%s, want +%s", tc.name, got.Sub(now), tc.want.Sub(now))
		}
	}
}
