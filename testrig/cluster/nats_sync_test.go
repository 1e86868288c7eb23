package cluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestNATSSyncAlways: NATSOptions.SyncAlways starts the nodes with
// jetstream { sync_interval: always }, in this process and as processes;
// without it they keep nats-server's default.
func TestNATSSyncAlways(t *testing.T) {
	heavy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, always := range []bool{false, true} {
		c, err := StartNATS(ctx, NATSOptions{Nodes: 1, Dir: t.TempDir(), SyncAlways: always})
		if err != nil {
			t.Fatal(err)
		}
		n := c.Nodes[0]
		n.mu.Lock()
		got := n.run.(embeddedRun).s.JetStreamConfig().SyncAlways
		n.mu.Unlock()
		if got != always {
			t.Errorf("in process, SyncAlways %v: the server's JetStream has sync always %v", always, got)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := BuildNATSServer(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, always := range []bool{false, true} {
		c, err := StartNATS(ctx, NATSOptions{Nodes: 1, Dir: t.TempDir(), Binary: bin, SyncAlways: always})
		if err != nil {
			t.Fatal(err)
		}
		conf, err := os.ReadFile(c.Nodes[0].confFile)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(conf), "sync_interval: always"); got != always {
			t.Errorf("process, SyncAlways %v: its config file says sync_interval: always: %v\n%s", always, got, conf)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
