package kiosk_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"termlink/testrig/cluster"
)

// The console on any node of a cluster (issue 25): opened on the worker,
// which holds no device, it lists the kiosk of each edge online with the
// edge that holds it, live; the kiosk of an edge killed with SIGKILL
// goes offline there, still naming its edge.
func TestConsoleAcrossCluster(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	bin, err := cluster.BuildTermserver(ctx, t.TempDir(), false)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	nats := cluster.StartNATSForTest(t, 1)
	node := func(name, role string) *cluster.Server {
		return cluster.StartServerForTest(t, bin, cluster.NodeSpec{Name: name, Role: role, NATS: nats.URLs(),
			Partitions: 4, Replicas: 1, Cluster: map[string]any{"leaseSeconds": 2}})
	}
	east, west, worker := node("edge-1", "edge"), node("edge-2", "edge"), node("worker-1", "worker")
	startTextKiosk(t, east.Addr(), "kiosk-east")
	startTextKiosk(t, west.Addr(), "kiosk-west")

	row := func(peer string, online bool, edge string) string {
		return fmt.Sprintf(`(() => { const r = document.querySelector('[data-testid=peer-row][data-peer-id=%q][data-online="%t"]');
			const e = r && r.querySelector('[data-testid=peer-edge]'); return !!e && e.textContent === %q; })()`, peer, online, edge)
	}
	b := startBrowser(t, chromium)
	b.must("opening the console on the worker", chromedp.Navigate(worker.HTTPURL()+"/"))
	b.waitFor("kiosk-east online at edge-1", row("kiosk-east", true, "edge-1"))
	b.waitFor("kiosk-west online at edge-2", row("kiosk-west", true, "edge-2"))

	east.Kill()
	b.waitFor("kiosk-east offline at edge-1", row("kiosk-east", false, "edge-1"))
	b.waitFor("kiosk-west still online at edge-2", row("kiosk-west", true, "edge-2")+
		` && document.getElementById('fleet-count').textContent === '1 of 2 online'`)
}
