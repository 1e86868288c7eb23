package cluster_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/testrig/chaos"
	"termlink/testrig/cluster"
)

// TestEdgeCutOffFromNATSSendsDevicesElsewhere: edge-1 reaches NATS
// through a TCP proxy (testrig/chaos), the other nodes directly. The
// proxy stalls (sockets open, nothing passes: edge-1 is cut off from NATS
// as by a network partition, while the NATS cluster and every other node
// go on). edge-1's devices, with edge-2 as their fallback, send while it
// is cut off: edge-1 closes their connections a lease after NATS last
// answered it and refuses them (HTTP 503, /healthz says why), so they
// move to edge-2 and every message is answered there, in order, before
// the cut heals. Then edge-1 takes devices again.
func TestEdgeCutOffFromNATSSendsDevicesElsewhere(t *testing.T) {
	cluster.Heavy(t)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	var proxy *chaos.Proxy
	tc := startCluster(t, clusterOpts{edges: 2, workers: 2, failover: true, agent: slowAgent(runLog, 0),
		natsFor: func(c *cluster.NATS, node string) string {
			if node != "edge-1" {
				return ""
			}
			n := c.Nodes[0]
			p, err := chaos.New(chaos.Options{Target: net.JoinHostPort(n.Host, strconv.Itoa(n.ClientPort))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			proxy = p
			return "nats://" + p.Addr()
		}})
	edge1, edge2 := tc.edges[0], tc.edges[1]
	var ds []*device
	for i := range 8 {
		ds = append(ds, newDevice(t, fmt.Sprintf("cut-%d", i), edge1.WSURL(), edge2.WSURL()))
	}
	for _, d := range ds {
		d.send(d.peer + "-before")
	}
	for _, d := range ds {
		d.waitReplies(waitFor)
	}
	if n := connectedPeers(t, edge1.HTTPURL()); n != len(ds) {
		t.Fatalf("edge-1 holds %d devices before the cut, want %d", n, len(ds))
	}

	proxy.SetMode(chaos.Stall)
	cut := time.Now()
	for _, d := range ds {
		d.send(d.peer + "-during-1")
		d.send(d.peer + "-during-2")
	}
	for _, d := range ds {
		d.waitReplies(waitFor)
	}
	t.Logf("every message answered %.1fs after the cut", time.Since(cut).Seconds())
	if n := connectedPeers(t, edge2.HTTPURL()); n != len(ds) {
		t.Errorf("edge-2 holds %d devices while edge-1 is cut off, want %d", n, len(ds))
	}
	// The devices may have moved before a lease passed (edge-1's NATS
	// connection, moved off the stalled server at half a lease, fails
	// their messages meanwhile); edge-1 says it is cut off once a lease
	// has passed without NATS.
	testwait.UntilOK(t, "edge-1's /healthz saying it is cut off", func() error {
		code, body := httpGet(t, edge1.HTTPURL()+"/healthz")
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("%d %s", code, body)
		}
		if !strings.Contains(body, "edge edge-1 has lost the NATS cluster since") {
			t.Errorf("edge-1's /healthz while cut off: %d %s", code, body)
		}
		return nil
	})
	code, body := httpGet(t, strings.Replace(edge1.WSURL(), "ws://", "http://", 1))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "connect to another edge") {
		t.Errorf("edge-1's WebSocket route while cut off: %d %s", code, body)
	}
	if b, err := readFile(edge1.LogFile); err != nil || !strings.Contains(b, "NATS has not answered for longer than a lease") {
		t.Errorf("edge-1's log does not say it was cut off (%v)", err)
	}

	proxy.SetMode(chaos.Normal)
	testwait.UntilOK(t, "edge-1 healthy after the cut healed", func() error {
		if code, body := httpGet(t, edge1.HTTPURL()+"/healthz"); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	d := newDevice(t, "cut-after", edge1.WSURL())
	d.send("after")
	d.waitReplies(waitFor)
	for _, d := range append(ds, d) {
		d.check(true)
	}
}

// connectedPeers is a node's connected_peers in /api/status.
func connectedPeers(t *testing.T, base string) int {
	t.Helper()
	code, body := httpGet(t, base+"/api/status")
	var st struct {
		ConnectedPeers int `json:"connected_peers"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("%s/api/status: %d %s", base, code, body)
	}
	return st.ConnectedPeers
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: waitFor}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func readFile(name string) (string, error) {
	b, err := os.ReadFile(name)
	return string(b), err
}
