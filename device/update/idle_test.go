package update

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"termlink/device/activity"
	"termlink/internal/testwait"
)

// The release is downloaded and staged while the device is in use (a
// run in progress), but the supervisor is told to restart into it only
// once the device is idle (issue 42): termd never restarts in the middle
// of a conversation.
func TestApplyRestartsAtIdle(t *testing.T) {
	t.Parallel()
	pub, priv, _ := newKey(t)
	v1, v2 := workerBin(t, "v1.0.0"), workerBin(t, "v1.1.0")
	f := newFixture(t, v1)
	srv := newFileServer(t)
	m := sign(t, priv, "v1.1.0", v2)
	var runs atomic.Int64
	runs.Store(1) // a message sent, its reply not yet shown
	tr := activity.New(func() int { return int(runs.Load()) }, time.Minute)
	defer tr.Stop()
	applied := make(chan error, 1)
	go func() {
		applied <- Apply(context.Background(), Options{URL: srv.serve("v2", v2), Manifest: m, Key: pub,
			Version: "v1.0.0", Worker: f.w, UpdateID: "r-1.1", WaitIdle: tr.WaitIdle})
	}()
	testwait.Until(t, "the release staged and its request recorded", func() bool {
		req, err := ReadRequest(f.state)
		return err == nil && req.IDFor("v1.1.0") == "r-1.1"
	})
	if _, err := os.Stat(f.exe + StagedSuffix); err != nil {
		t.Fatalf("not staged while busy: %v", err)
	}
	select {
	case msg := <-f.msgs:
		t.Fatalf("the supervisor was told %q while a run is in progress", msg)
	case err := <-applied:
		t.Fatalf("Apply returned %v while a run is in progress", err)
	default:
	}
	runs.Store(0) // the reply
	tr.Changed()
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if msg := <-f.msgs; msg != "update" {
		t.Fatalf("the supervisor was told %q, want update", msg)
	}
}

// termd stopping while it waits for idle leaves the release staged and
// tells the supervisor nothing.
func TestApplyStoppedWhileBusy(t *testing.T) {
	t.Parallel()
	pub, priv, _ := newKey(t)
	v1, v2 := workerBin(t, "v1.0.0"), workerBin(t, "v1.1.0")
	f := newFixture(t, v1)
	srv := newFileServer(t)
	m := sign(t, priv, "v1.1.0", v2)
	tr := activity.New(nil, time.Hour)
	defer tr.Stop()
	tr.SetQuestionOpen(true)
	ctx, cancel := context.WithCancel(context.Background())
	applied := make(chan error, 1)
	go func() {
		applied <- Apply(ctx, Options{URL: srv.serve("v2", v2), Manifest: m, Key: pub, Version: "v1.0.0", Worker: f.w, WaitIdle: tr.WaitIdle})
	}()
	testwait.Until(t, "the release staged", func() bool {
		req, err := ReadRequest(f.state)
		return err == nil && req != nil
	})
	cancel()
	if err := <-applied; !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply: %v, want the context's cancel", err)
	}
	select {
	case msg := <-f.msgs:
		t.Fatalf("the supervisor was told %q", msg)
	default:
	}
}
