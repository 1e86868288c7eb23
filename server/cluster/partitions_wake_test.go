package cluster

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"termlink/server/config"
)

// TestDeadWorkersPartitionsTakenAtItsLeaseEnd: a worker "ghost" (the
// test writes its node entry and partition leases, as a worker does)
// holds some partitions; worker w2 the others. The ghost dies just after
// one of w2's ticks: its leases expire a lease later, just after another
// of w2's ticks (lease/3 apart). w2 takes the ghost's partitions at
// once, not a tick (lease/3) later.
func TestDeadWorkersPartitionsTakenAtItsLeaseEnd(t *testing.T) {
	const lease, partitions = 3 * time.Second, 8
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
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
	deadline := time.Now().Add(20 * time.Second)
	ownsAll := func(ps []int) bool {
		for _, p := range ps {
			if !n.Owns(p) {
				return false
			}
		}
		return true
	}
	for !ownsAll(mine) {
		if time.Now().After(deadline) {
			t.Fatalf("w2 does not own its partitions %v", mine)
		}
		beat()
		time.Sleep(50 * time.Millisecond)
	}
	// The ghost beats until just after one of w2's ticks (its lease
	// renewal), then dies.
	renewal := func() uint64 {
		e, err := n.parts.Get(ctx, leaseKey(mine[0]))
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	last := beat()
	for rev := renewal(); renewal() == rev; {
		if time.Since(last) > lease/6 {
			last = beat()
		}
		time.Sleep(5 * time.Millisecond)
	}
	last = beat()
	expiry := last.Add(lease)
	for !ownsAll(ghostParts) {
		if time.Now().After(expiry.Add(5 * time.Second)) {
			t.Fatalf("w2 has not taken the dead ghost's partitions %v 5 s after its leases expired", ghostParts)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(expiry)
	t.Logf("the ghost's partitions %v taken %s after its leases expired (w2 ticks every %s)", ghostParts, took.Round(time.Millisecond), lease/3)
	if took > 500*time.Millisecond {
		t.Errorf("the ghost's partitions taken %s after its leases expired, want at once (< 500 ms)", took.Round(time.Millisecond))
	}
}
