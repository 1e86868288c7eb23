package nuum

import (
	"context"
	"strings"
	"testing"
	"time"

	"termlink/server/config"
)

// A turn longer than turnTimeout is interrupted and its reply says it
// timed out; the process stays for the next turn. Issue 16.
func TestTurnTimeout(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "", func(_ *config.NuumAgent, o *Options) { o.TurnTimeout = 300 * time.Millisecond })
	rc := &recorder{}
	pid := agentPID(t, r, "s")
	res := run(t, r, rc, "s", "/slow 10000")
	if res.FinishReason != "timeout" || !strings.Contains(res.Text, "did not finish within 300ms") || !strings.Contains(res.Text, "interrupted") {
		t.Fatalf("result %+v, want a timeout reply that says the turn was interrupted", res)
	}
	if got := agentPID(t, r, "s"); got != pid {
		t.Fatalf("pid changed from %d to %d: the interrupt should have ended the turn, not the process", pid, got)
	}
	// A device cancel is still a cancel, not a timeout.
	ctx, cancel := context.WithCancel(context.Background())
	resCh, started := runAsync(r, ctx, rc, "s", "/slow 200")
	awaitStart(t, started)
	cancel()
	if res := await(t, resCh); res.FinishReason != "cancelled" {
		t.Fatalf("cancelled turn %+v", res)
	}
}

// The config's turnTimeout (seconds) and heartbeatAck reach the runner.
func TestTurnTimeoutAndHeartbeatAckFromConfig(t *testing.T) {
	t.Parallel()
	r, err := New("x", config.NuumAgent{Command: "true", TurnTimeout: 90, HeartbeatAck: "optional"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.turnTimeout != 90*time.Second || !r.opt.HeartbeatAckOptional {
		t.Fatalf("turnTimeout %s, heartbeatAckOptional %v", r.turnTimeout, r.opt.HeartbeatAckOptional)
	}
	if _, err := New("x", config.NuumAgent{Command: "true", HeartbeatAck: "never"}, Options{}); err == nil {
		t.Fatal(`heartbeatAck "never" accepted`)
	}
	// heartbeatAck "optional" in config keeps an agent that never acks.
	r2 := newRunner(t, "--no-heartbeat-ack", func(c *config.NuumAgent, o *Options) {
		o.HeartbeatInterval = 50 * time.Millisecond
		o.HeartbeatTimeout = 300 * time.Millisecond
		c.HeartbeatAck = "optional"
	})
	pid := agentPID(t, r2, "s")
	if res := run(t, r2, &recorder{}, "s", "/slow 1000"); res.FinishReason != "stop" {
		t.Fatalf("result %+v", res)
	}
	if got := agentPID(t, r2, "s"); got != pid {
		t.Fatalf("pid changed from %d to %d: killed for heartbeats", pid, got)
	}
}

// Message media reach the agent as the spec's content blocks: the text,
// then a text block naming each file. Issue 16.
func TestMediaAsContentBlocks(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "", nil)
	rc := &recorder{}
	req := rc.Req("s", "look at these")
	req.Media = []string{"/tmp/a.png", "/tmp/b.pdf"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := r.Run(ctx, req, rc.Progress)
	want := "You said: look at these\nAttached file: /tmp/a.png\nAttached file: /tmp/b.pdf"
	if res.FinishReason != "stop" || res.Text != want {
		t.Fatalf("result %+v, want %q", res, want)
	}
	f := userFrame(req)
	blocks, ok := f.Message.Content.([]textBlock)
	if !ok || len(blocks) != 3 || blocks[0] != (textBlock{"text", "look at these"}) {
		t.Fatalf("content %#v", f.Message.Content)
	}
	// Without media the content stays a string, as before.
	if s, ok := userFrame(rc.Req("s", "x")).Message.Content.(string); !ok || s != "x" {
		t.Fatalf("content without media %#v", userFrame(rc.Req("s", "x")).Message.Content)
	}
}
