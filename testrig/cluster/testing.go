package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BuildTermserver builds termlink's termserver into dir (go build, run
// from inside the termlink module) and returns its path. The binary is
// named tlnode, not termserver: someone's `pkill termserver` on the same
// machine must not take a running test's nodes down.
func BuildTermserver(ctx context.Context, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "tlnode")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	out, err := exec.CommandContext(ctx, "go", append(args, "termlink/cmd/termserver")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building termserver: %w\n%s", err, out)
	}
	return bin, nil
}

// StartNATSForTest starts a JetStream cluster of nodes nats-server
// processes (the binary built once per cache directory) under the
// test's temporary directory. It is stopped when the test ends; when the
// test failed, every node's log tail is logged.
func StartNATSForTest(t testing.TB, nodes int) *NATS {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := BuildNATSServer(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := StartNATS(ctx, NATSOptions{Nodes: nodes, Dir: t.TempDir(), Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("--- nats %s log tail:\n%s", n.Name, logTail(n.LogFile, 30))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("stopping nats: %v", err)
		}
	})
	return c
}

// StartServerForTest runs a termserver node (StartServer) with its files
// under the test's temporary directory when spec.Dir is empty. It is
// stopped when the test ends; when the test failed, its log tail is
// logged.
func StartServerForTest(t testing.TB, binary string, spec NodeSpec) *Server {
	t.Helper()
	if spec.Dir == "" {
		spec.Dir = filepath.Join(t.TempDir(), spec.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := StartServer(ctx, binary, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- termserver %s log tail:\n%s", spec.Name, s.LogTail(40))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("stopping %s: %v", spec.Name, err)
		}
	})
	return s
}
