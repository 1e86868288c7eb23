package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	"termlink/internal/testwait"
	"termlink/testrig/cluster"
)

// listedPeer is a peer as GET .../peers lists it.
type listedPeer struct {
	PeerID string `json:"peer_id"`
	Online bool   `json:"online"`
	Edge   string `json:"edge"`
}

// The device registry across the cluster (issue 25): GET .../peers on
// each edge and on the worker lists every device of the cluster with
// its state and the edge that holds it, and so does the live stream's
// hello (what the console reads). Edge 1 killed with SIGKILL: its device
// that knows edge 2 shows online there, the one that does not shows
// offline at edge 1, on every surviving node.
func TestDevicesAcrossNodes(t *testing.T) {
	cluster.Heavy(t)
	tc := startCluster(t, clusterOpts{edges: 2, workers: 1})
	e1, e2, w := tc.edges[0], tc.edges[1], tc.workers[0]
	devs := []*device{
		newDevice(t, "kiosk-a1", e1.WSURL(), e2.WSURL()), // moves to edge 2
		newDevice(t, "kiosk-a2", e1.WSURL()),             // edge 1 only
		newDevice(t, "kiosk-b1", e2.WSURL()),
		newDevice(t, "kiosk-b2", e2.WSURL()),
	}
	for _, d := range devs {
		d.waitUntil(waitFor, "connected", func() bool { return d.online })
	}
	want := "kiosk-a1 online edge-1, kiosk-a2 online edge-1, kiosk-b1 online edge-2, kiosk-b2 online edge-2"
	for _, s := range []*cluster.Server{e1, e2, w} {
		waitPeers(t, s, want)
	}
	// The live stream's hello lists them on the worker too, and the
	// pages the console asks for after it run over every edge's devices.
	if got := helloPeers(t, w); got != "kiosk-a1 online edge-1, kiosk-a2 online edge-1, kiosk-b1 online edge-2, kiosk-b2 online edge-2" {
		t.Errorf("the worker's live stream says hello with %s", got)
	}
	var page struct {
		Peers      []listedPeer `json:"peers"`
		NextCursor *string      `json:"next_cursor"`
	}
	if st := call(t, http.MethodGet, w.HTTPURL()+"/api/channels/"+cluster.Channel+"/peers?limit=3", "", &page); st != http.StatusOK || len(page.Peers) != 3 || page.NextCursor == nil {
		t.Fatalf("the worker's first page of 3: %d %+v", st, page)
	}
	if st := call(t, http.MethodGet, w.HTTPURL()+"/api/channels/"+cluster.Channel+"/peers?limit=3&cursor="+*page.NextCursor, "", &page); st != http.StatusOK || len(page.Peers) != 1 || page.Peers[0].PeerID != "kiosk-b2" || page.NextCursor != nil {
		t.Fatalf("the worker's second page: %d %+v", st, page)
	}

	e1.Kill()
	devs[0].waitReconnected(1, waitFor)
	want = "kiosk-a1 online edge-2, kiosk-a2 offline edge-1, kiosk-b1 online edge-2, kiosk-b2 online edge-2"
	for _, s := range []*cluster.Server{e2, w} {
		waitPeers(t, s, want)
	}
}

// waitPeers waits until GET .../peers on s lists want (the peers in
// order, each "peer state edge").
func waitPeers(t *testing.T, s *cluster.Server, want string) {
	t.Helper()
	testwait.UntilOK(t, s.Spec.Name+" listing "+want, func() error {
		var page struct {
			Peers []listedPeer `json:"peers"`
		}
		st := call(t, http.MethodGet, s.HTTPURL()+"/api/channels/"+cluster.Channel+"/peers", "", &page)
		if got := describePeers(page.Peers); st != http.StatusOK || got != want {
			return fmt.Errorf("HTTP %d: %s", st, got)
		}
		return nil
	})
}

func describePeers(peers []listedPeer) string {
	var out []string
	for _, p := range peers {
		state := "offline"
		if p.Online {
			state = "online"
		}
		out = append(out, fmt.Sprintf("%s %s %s", p.PeerID, state, p.Edge))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// helloPeers reads the hello of s's live event stream.
func helloPeers(t *testing.T, s *cluster.Server) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.HTTPURL()+"/api/channels/"+cluster.Channel+"/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%s's live stream: %v", s.Spec.Name, err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var hello struct {
				Total int          `json:"total"`
				Peers []listedPeer `json:"peers"`
			}
			if err := json.Unmarshal([]byte(data), &hello); err != nil {
				t.Fatalf("%s's hello %s: %v", s.Spec.Name, data, err)
			}
			if hello.Total != len(hello.Peers) {
				t.Errorf("%s's hello: total %d, %d peers", s.Spec.Name, hello.Total, len(hello.Peers))
			}
			return describePeers(hello.Peers)
		}
	}
}
