package server

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/server/cluster"
	"termlink/server/config"
	"termlink/server/identity"
)

// In cluster mode device identity is the cluster's: a binding made
// through the backend's openBindings is read by every node (another handle on the
// cluster's bucket, as another node opens it) and nothing is written to
// the workspace; the pairing codes are the cluster's. Outside it, the
// workspace's file and identity's default codes (nil: LocalCodes).
func TestIdentityStoreBindingsByMode(t *testing.T) {
	t.Parallel()
	ts, _ := startClusterServer(t, newCountingRunner(false), nil, nil)
	dir := t.TempDir()
	left := filepath.Join(dir, "terminal-dev.json") // a single server's, before the cluster
	if err := os.WriteFile(left, []byte(`{"version":1,"bindings":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	b, err := ts.backend.openBindings(context.Background(), dir, "terminal-dev", true, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "not read") || !strings.Contains(logged.String(), left) {
		t.Errorf("the workspace's bindings file is not named in a warning: %s", logged.String())
	}
	if err := b.Enroll(config.DigestOf("tl_a"), identity.Binding{PeerID: "kiosk", Source: identity.BindEnrolled, BoundAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	other, err := clusterStore(ts).Node().OpenBindings(context.Background(), "terminal-dev")
	if err != nil {
		t.Fatal(err)
	}
	if !other.Known(config.DigestOf("tl_a")) {
		t.Fatal("a binding made on this node is unknown to the cluster's bucket")
	}
	if raw, _ := os.ReadFile(left); string(raw) != `{"version":1,"bindings":[]}` {
		t.Fatalf("cluster mode wrote to the workspace: %s", raw)
	}
	if _, ok := ts.backend.openCodes(context.Background(), ts.log).(*cluster.Codes); !ok {
		t.Fatal("cluster mode: the pairing codes are not the cluster's")
	}

	local := startServer(t, nil, nil)
	lb, err := local.backend.openBindings(context.Background(), dir, "terminal-dev", true, local.log)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lb.(*identity.LocalBindings); !ok {
		t.Fatalf("single server: bindings %T", lb)
	}
	if c := local.backend.openCodes(context.Background(), local.log); c != nil {
		t.Fatalf("single server: codes %T, want nil (identity's LocalCodes)", c)
	}
}
