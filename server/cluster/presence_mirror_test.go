package cluster

import (
	"context"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/bus"
	"termlink/server/config"
)

// A worker's presence mirror follows the bucket: a peer an edge holds is
// found without a read, a peer that left is not (SendOut then reads the
// bucket), and the mirror starts from what the bucket holds.
func TestPresenceMirror(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	url := startJetStream(t)
	open := func(name, role string) *Node {
		cfg := config.Cluster{NATS: []string{url}, Role: role, Name: name, Partitions: 1,
			Replicas: 1, AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
		n, err := Open(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	edge := open("edge-1", config.RoleEdge)
	if _, err := edge.SetPresence(ctx, "ch", "before"); err != nil {
		t.Fatal(err)
	}
	worker := open("worker-1", config.RoleWorker)
	worker.MirrorPresence()
	lookup := func(peer string) (string, bool) { return worker.mirror.Load().lookup(presenceKey("ch", peer)) }
	testwait.Until(t, "the peer held before the mirror started found", func() bool { e, ok := lookup("before"); return ok && e == "edge-1" })
	if _, err := edge.SetPresence(ctx, "ch", "after"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a peer connected later found", func() bool { e, ok := lookup("after"); return ok && e == "edge-1" })
	edge.ClearPresence(ctx, "ch", "after")
	testwait.Until(t, "a peer that left gone", func() bool { _, ok := lookup("after"); return !ok })
	if got, err := worker.SendOut(ctx, outFor("before")); err != nil || got != "edge-1" {
		t.Errorf("SendOut to a held peer: edge %q err %v, want edge-1", got, err)
	}
	if got, err := worker.SendOut(ctx, outFor("after")); err != nil || got != "" {
		t.Errorf("SendOut to a peer that left: edge %q err %v, want none", got, err)
	}
}

func outFor(peer string) bus.Outbound {
	return bus.Outbound{Kind: bus.Final, ChannelID: "ch", PeerID: peer, SessionKey: "ch:" + peer, MessageID: "m", Text: "hi"}
}
