package cluster_test

import (
	"fmt"
	"net/http"
	"testing"

	"termlink/internal/testwait"
	"termlink/testrig/cluster"
)

// A channel's events can be read from any node (issue 25): with a device
// on each edge, GET .../events on either edge and on the worker lists
// both connects, each naming the edge that recorded it, and the runs the
// worker recorded, naming the worker.
func TestEventsAcrossNodes(t *testing.T) {
	cluster.Heavy(t)
	tc := startCluster(t, clusterOpts{edges: 2, workers: 1})
	edgeA, edgeB, worker := tc.edges[0], tc.edges[1], tc.workers[0]
	a := newDevice(t, "ev-a", edgeA.WSURL())
	b := newDevice(t, "ev-b", edgeB.WSURL())
	a.send("from a")
	b.send("from b")
	a.waitReplies(waitFor)
	b.waitReplies(waitFor)

	for _, n := range []*cluster.Server{edgeA, edgeB, worker} {
		var want = map[[3]string]bool{
			{"terminal_connected", "ev-a", edgeA.Spec.Name}:   false,
			{"terminal_connected", "ev-b", edgeB.Spec.Name}:   false,
			{"inbound_accepted", "ev-a", edgeA.Spec.Name}:     false,
			{"direct_run_finished", "ev-b", worker.Spec.Name}: false,
		}
		testwait.UntilOK(t, "the events of both devices on "+n.Spec.Name, func() error {
			var got struct {
				Events []struct {
					Event  string `json:"event"`
					PeerID string `json:"peer_id"`
					Node   string `json:"node"`
				} `json:"events"`
			}
			if st := call(t, http.MethodGet, n.HTTPURL()+"/api/channels/"+cluster.Channel+"/events?limit=1000", "", &got); st != http.StatusOK {
				t.Fatalf("events on %s: HTTP %d", n.Spec.Name, st)
			}
			for k := range want {
				want[k] = false
			}
			for _, e := range got.Events {
				k := [3]string{e.Event, e.PeerID, e.Node}
				if _, ok := want[k]; ok {
					want[k] = true
				}
			}
			for _, seen := range want {
				if !seen {
					return fmt.Errorf("missing some of %v (true: seen) in %+v", want, got.Events)
				}
			}
			return nil
		})
	}
}
