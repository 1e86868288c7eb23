package server

import (
	"context"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/runtime"
)

// A cancel that arrives after the ack but before the router has taken the
// message (the ack goes out first) is not "unknown_run": the
// message is answered cancelled when it arrives, and never runs.
func TestCancelBeforeTheRouterHasIt(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	runs := newCountingRunner(false)
	s, err := New(cfg, Options{Logger: quietLog(), NoSync: true, Runners: map[string]agent.Runner{"echo": runs}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	const key = "terminal-dev:local:dev"
	in := bus.Inbound{ChannelID: "terminal-dev", AccountID: "local", PeerID: "dev", SessionKey: key, MessageID: "m-1", Text: "stop me"}
	// The cancel comes in the ack, as a device's cancel right after its
	// ack would: the message is logged and acked, and the store of record
	// hands it to the router only after the ack. (Cancelling after
	// AcceptInbound returned, as this test once did, raced the run: the
	// router has the message at once, and the counting runner answers it
	// at once; 4 of 60 runs under load found it answered already.)
	var acked runtime.AcceptResult
	found := false
	if err := s.rt.AcceptInbound(context.Background(), in, func(r runtime.AcceptResult) {
		acked = r
		found = s.router.Cancel(key, "m-1")
	}); err != nil || acked.Duplicate {
		t.Fatalf("accept: %v %+v", err, acked)
	}
	if !found {
		t.Fatal("cancel of an accepted message the router does not have yet: not found")
	}
	if s.router.Cancel(key, "m-unknown") {
		t.Fatal("cancel of a message never accepted: found")
	}
	s.Start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got runtime.AcceptResult
		if err := s.rt.AcceptInbound(context.Background(), in, func(r runtime.AcceptResult) { got = r }); err != nil {
			t.Fatal(err)
		}
		if got.Reply != nil {
			if got.Reply.FinishReason != link.FinishCancelled {
				t.Fatalf("reply %+v, want finish_reason cancelled", got.Reply)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reply for the cancelled message: %+v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := runs.runs.Load(); n != 0 {
		t.Fatalf("the agent ran %d times for a message cancelled before it started", n)
	}
	if _, waiting := s.router.Load(); waiting != 0 {
		t.Fatalf("%d messages still counted as waiting", waiting)
	}
}
