package cluster

import (
	"context"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/config"
)

// PeekClaim (an edge's lookup, by direct get from any replica) reads what
// GetClaim (from the leader) reads: the claim and its sequence, or none.
func TestPeekClaim(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	cfg := config.Cluster{NATS: []string{startJetStream(t)}, Role: config.RoleAll, Name: "w1", Partitions: 1,
		Replicas: 1, AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
	n, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, _, found, err := n.PeekClaim(ctx, "s", "m"); err != nil || found {
		t.Fatalf("before any claim: found %v err %v, want none", found, err)
	}
	rev, err := n.UpdateClaim(ctx, Claim{State: StateCancel, Session: "s", MessageID: "m"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := Claim{State: StateDone, Session: "s", MessageID: "m", Reply: &Reply{Text: "hi", RunID: "r"}}
	if rev, err = n.UpdateClaim(ctx, done, rev); err != nil {
		t.Fatal(err)
	}
	c, prev, found, err := n.PeekClaim(ctx, "s", "m")
	if err != nil || !found || prev != rev || !c.Answered() || c.Reply.Text != "hi" {
		t.Errorf("peek: %+v rev %d found %v err %v, want the done claim at %d", c, prev, found, err, rev)
	}
	if _, grev, _, _ := n.GetClaim(ctx, "s", "m"); grev != prev {
		t.Errorf("leader read rev %d, peek %d", grev, prev)
	}
	if _, err := n.UpdateClaim(ctx, done, rev-1); err != ErrConflict {
		t.Errorf("a write at a stale sequence: %v, want ErrConflict", err)
	}
	if _, _, found, _ := n.PeekClaim(ctx, "s", "other"); found {
		t.Error("another message of the session: found, want none")
	}
}
