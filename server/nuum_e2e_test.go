package server

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"termlink/link"
	"termlink/server/config"
)

func nuumAgent(t *testing.T) string { return buildAgent(t, "termlink/testrig/agents/nuumagent") }

// The Nuum runner end to end: one long-lived process per session, progress,
// a message injected into the running turn answered by the same result,
// cancel from the device, the agent's session id in the session log.
func TestNuumAgentEndToEnd(t *testing.T) {
	t.Parallel()
	bin := nuumAgent(t)
	ts := startServer(t, func(c *config.Config) {
		c.Agents["nuum"] = config.Agent{Nuum: &config.NuumAgent{Command: bin, IdleTimeout: 600, MaxProcesses: 4,
			StartTimeout: 30, HeartbeatSeconds: 30, HeartbeatTimeout: 10}}
		ch := c.Channels["terminal-dev"]
		ch.Agent = "nuum"
		c.Channels["terminal-dev"] = ch
	}, nil)
	c := dial(t, ts.ws, nil)
	c.connect("dev", link.CapText, link.CapProgress, link.CapCancel)

	// skipProgress reads past progress frames to the next other frame.
	next := func() link.Frame {
		for {
			if f := c.read(); f.FrameType() != link.TypeProgress {
				return f
			}
		}
	}
	c.send(&link.Message{MessageID: "p1", Text: "/pid"})
	readAs[*link.Ack](c)
	first := next().(*link.Message)
	c.send(&link.Message{MessageID: "p2", Text: "/pid"})
	readAs[*link.Ack](c)
	if second := next().(*link.Message); second.Text != first.Text || !strings.HasPrefix(first.Text, "pid ") {
		t.Fatalf("turns ran in different processes: %q then %q", first.Text, second.Text)
	}

	// Injection: a message sent while a slow turn runs joins it.
	c.send(&link.Message{MessageID: "slow", Text: "/slow 1500"})
	readAs[*link.Ack](c)
	if p := readAs[*link.Progress](c); p.MessageID != "slow" {
		t.Fatalf("progress %+v", p)
	}
	c.send(&link.Message{MessageID: "inj", Text: "and this"})
	replies := map[string]*link.Message{}
	for len(replies) < 2 {
		switch f := next().(type) {
		case *link.Ack:
			if f.MessageID != "inj" {
				t.Fatalf("ack %+v", f)
			}
		case *link.Message:
			replies[f.MessageID] = f
		default:
			t.Fatalf("unexpected %+v", f)
		}
	}
	if replies["slow"].Text != replies["inj"].Text || !strings.Contains(replies["inj"].Text, "and this") {
		t.Fatalf("injected message not answered by the turn: %q / %q", replies["slow"].Text, replies["inj"].Text)
	}

	// Cancel from the device interrupts the turn.
	c.send(&link.Message{MessageID: "long", Text: "/slow 30000"})
	readAs[*link.Ack](c)
	readAs[*link.Progress](c)
	c.send(&link.Cancel{MessageID: "long"})
	if m := next().(*link.Message); m.MessageID != "long" || m.FinishReason != link.FinishCancelled {
		t.Fatalf("cancelled turn %+v", m)
	}

	// The agent's own session id is kept in the session metadata.
	lines := readLines(t, filepath.Join(ts.cfg.Workspace, "sessions", "terminal-dev:local:dev.jsonl"))
	var meta struct{ Metadata map[string]any }
	if err := json.Unmarshal([]byte(lines[0]), &meta); err != nil || meta.Metadata["nuum_session_id"] == nil {
		t.Fatalf("metadata line %s lacks nuum_session_id (%v)", lines[0], err)
	}
}
