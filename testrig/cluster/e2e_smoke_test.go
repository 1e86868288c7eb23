package cluster_test

import (
	"fmt"
	"testing"
)

func TestSmoke(t *testing.T) {
	tc := startCluster(t, clusterOpts{edges: 2, workers: 2})
	d := newDevice(t, "smoke-1", tc.edges[0].WSURL())
	for i := range 3 {
		d.send(fmt.Sprintf("m%d", i))
	}
	d.waitReplies(waitFor)
	d.check(true)
	for _, r := range readHistory(t, tc.nats.URLs()) {
		t.Logf("%s %s %s %q %v", r.Session, r.Record.Role, r.Record.MessageID, r.Record.Content, r.Record.Extra)
	}
}

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
