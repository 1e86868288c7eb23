package cluster_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"termlink/testrig/cluster"
)

// Rig in this process (what `termrig cluster` runs, here under the race
// detector): one NATS node, an edge and a worker; the edge answers, and
// cancelling the context stops everything.
func TestRigInProcess(t *testing.T) {
	cluster.Heavy(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- cluster.Rig(ctx, cluster.RigOptions{Nodes: 1, Edges: 1, Workers: 1, Partitions: 2, Dir: t.TempDir()},
			pw, slog.New(slog.DiscardHandler))
		pw.Close()
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	edgeRE := regexp.MustCompile(`^edge    edge-1 http://\S+ (ws://\S+)$`)
	var ws string
	timeout := time.After(waitFor)
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("rig ended before ready: %v", <-done)
			}
			if m := edgeRE.FindStringSubmatch(l); m != nil {
				ws = m[1]
			}
			ready = l == "ready"
		case <-timeout:
			t.Fatal("rig not ready")
		}
	}
	got := exchange(t, ws, "rig-1", "m-1", "hi")
	if got.reply == nil || got.reply.Text != "You said: hi" {
		t.Errorf("reply %+v", got.reply)
	}
	cancel()
	go func() {
		for range lines {
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor):
		t.Fatal("rig did not stop")
	}
}
