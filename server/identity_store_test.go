package server

import (
	"context"
	"os"
	"testing"
	"time"

	"termlink/server/cluster"
	"termlink/server/config"
	"termlink/server/identity"
)

// In cluster mode device identity is the cluster's: a binding made
// through openBindings is read by every node (another handle on the
// cluster's bucket, as another node opens it) and nothing is written to
// the workspace; the pairing codes are the cluster's. Outside it, the
// workspace's file and identity's default codes (nil: LocalCodes).
func TestIdentityStoreBindingsByMode(t *testing.T) {
	ts, _ := startClusterServer(t, newCountingRunner(false), nil, nil)
	dir := t.TempDir()
	b, err := openBindings(ts.rt, dir, "terminal-dev", true, ts.log)
	if err != nil {
		t.Fatal(err)
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
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Fatalf("cluster mode wrote to the workspace: %v", files)
	}
	if _, ok := openCodes(ts.rt, ts.log).(*cluster.Codes); !ok {
		t.Fatal("cluster mode: the pairing codes are not the cluster's")
	}

	local := startServer(t, nil, nil)
	lb, err := openBindings(local.rt, dir, "terminal-dev", true, local.log)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lb.(*identity.LocalBindings); !ok {
		t.Fatalf("single server: bindings %T", lb)
	}
	if c := openCodes(local.rt, local.log); c != nil {
		t.Fatalf("single server: codes %T, want nil (identity's LocalCodes)", c)
	}
}
