package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"termlink/server/cluster/natstest"
	"termlink/server/config"
)

// BenchmarkClaimRead compares the two reads of a message's claim on one
// in-process JetStream node: from the stream's leader through the
// JetStream API (GetClaim: a worker deciding a start) and from any
// replica by direct get (PeekClaim: an edge's lookup before it
// publishes), for a claim that is there and one that is not.
func BenchmarkClaimRead(b *testing.B) {
	ctx := context.Background()
	cfg := config.Cluster{NATS: []string{natstest.Start(b, true).ClientURL()}, Role: config.RoleAll, Name: "w1", Partitions: 1,
		Replicas: 1, AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
	n, err := Open(ctx, cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	done := Claim{State: StateDone, Session: "s", MessageID: "m", Reply: &Reply{Text: "hello"}}
	if _, err := n.UpdateClaim(ctx, done, 0); err != nil {
		b.Fatal(err)
	}
	for _, read := range []struct {
		name string
		get  func(ctx context.Context, session, id string) (Claim, uint64, bool, error)
	}{{"leader", n.GetClaim}, {"direct", n.PeekClaim}} {
		for _, id := range []string{"m", "absent"} {
			b.Run(fmt.Sprintf("%s/%s", read.name, id), func(b *testing.B) {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						_, _, found, err := read.get(ctx, "s", id)
						if err != nil || found != (id == "m") {
							b.Errorf("found %v err %v", found, err)
							return
						}
					}
				})
			})
		}
	}
}
