package cluster_test

import (
	"context"
	"testing"

	"termlink/testrig/cluster"
)

// Nodes started at the same time (as a service manager does) all come
// up: each creates the shared streams and buckets, and JetStream gives a
// concurrent create of the same stream no answer (nats.go#949), so a
// node must retry instead of failing after its timeout.
func TestConcurrentNodeStart(t *testing.T) {
	cluster.Heavy(t)
	tc := startCluster(t, clusterOpts{edges: 2, workers: 2, concurrent: true})
	d := newDevice(t, "concurrent-1", tc.edges[1].WSURL())
	d.send("hello")
	d.waitReplies(waitFor)
	d.check(true)
}

// The harness restarts a killed or stopped node on the address it had,
// with its workspace: a device that knew the URL reaches it again. One
// node of role "all" (edge and worker) on one NATS node.
func TestServerKillRestartSameAddress(t *testing.T) {
	cluster.Heavy(t)
	nc := cluster.StartNATSForTest(t, 1)
	s := cluster.StartServerForTest(t, termserverBin, cluster.NodeSpec{Name: "all-1", Role: "all", NATS: nc.URLs(), Replicas: 1, Partitions: 2})
	addr := s.Addr()
	if got := exchange(t, s.WSURL(), "rs-1", "m-1", "one"); got.reply == nil || got.reply.Text != "You said: one" {
		t.Fatalf("reply %+v", got.reply)
	}
	s.Kill()
	if s.Running() {
		t.Fatal("killed node still running")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil { // SIGTERM, then start
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Errorf("restarted on %s, was %s", s.Addr(), addr)
	}
	// The reply of before the kill comes from the cluster's dedupe.
	if got := exchange(t, s.WSURL(), "rs-1", "m-1", "one"); got.ack == nil || !got.ack.Duplicate || got.reply == nil || got.reply.Text != "You said: one" {
		t.Errorf("after the restarts: ack %+v reply %+v, want the cached reply", got.ack, got.reply)
	}
}
