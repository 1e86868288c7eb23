package cluster_test

import "testing"

// Nodes started at the same time (as a service manager does) all come
// up: each creates the shared streams and buckets, and JetStream gives a
// concurrent create of the same stream no answer (nats.go#949), so a
// node must retry instead of failing after its timeout.
func TestConcurrentNodeStart(t *testing.T) {
	tc := startCluster(t, clusterOpts{edges: 2, workers: 2, concurrent: true})
	d := newDevice(t, "concurrent-1", tc.edges[1].WSURL())
	d.send("hello")
	d.waitReplies(waitFor)
	d.check(true)
}
