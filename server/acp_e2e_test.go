package server

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"termlink/link"
	"termlink/server/config"
)

func acpAgent(t *testing.T) string { return buildAgent(t, "termlink/testrig/agents/acpagent") }

// withACP routes terminal-dev to an ACP agent.
func withACP(a config.ACPAgent) func(*config.Config) {
	return func(c *config.Config) {
		if a.Permission == "" {
			a.Permission = config.ACPPermissionReject
		}
		a.IdleTimeout, a.MaxProcesses, a.StartTimeout, a.AskTimeout = 600, 4, 30, 30
		c.Agents["coder"] = config.Agent{ACP: &a}
		ch := c.Channels["terminal-dev"]
		ch.Agent = "coder"
		c.Channels["terminal-dev"] = ch
	}
}

// acpDevice is a device that keeps the progress it was shown.
type acpDevice struct {
	*client
	progress map[string][]string // by message id
}

func newACPDevice(t *testing.T, ts *testServer, caps ...string) *acpDevice {
	c := dial(t, ts.ws, nil)
	c.connect("dev", append([]string{link.CapText}, caps...)...)
	return &acpDevice{client: c, progress: map[string][]string{}}
}

// next returns the next frame other than progress.
func (d *acpDevice) next() link.Frame {
	for {
		f := d.read()
		p, ok := f.(*link.Progress)
		if !ok {
			return f
		}
		d.progress[p.MessageID] = append(d.progress[p.MessageID], p.Text)
	}
}

// ask sends a message and returns its reply.
func (d *acpDevice) ask(id, text string) *link.Message {
	d.t.Helper()
	d.send(&link.Message{MessageID: id, Text: text})
	if a, ok := d.next().(*link.Ack); !ok || a.MessageID != id {
		d.t.Fatalf("want the ack of %s, got %+v", id, a)
	}
	m, ok := d.next().(*link.Message)
	if !ok || m.MessageID != id {
		d.t.Fatalf("want the reply to %s, got %+v", id, m)
	}
	return m
}

// waitProgress reads progress of id until one contains s.
func (d *acpDevice) waitProgress(id, s string) {
	d.t.Helper()
	for _, p := range d.progress[id] {
		if strings.Contains(p, s) {
			return
		}
	}
	for {
		f := d.read()
		p, ok := f.(*link.Progress)
		if !ok {
			d.t.Fatalf("waiting for progress %q of %s, got %+v", s, id, f)
		}
		d.progress[p.MessageID] = append(d.progress[p.MessageID], p.Text)
		if p.MessageID == id && strings.Contains(p.Text, s) {
			return
		}
	}
}

// A chat with the SDK's own example agent over a real WebSocket: its
// chunks make the reply, its tool calls are progress, its permission
// request is answered by the allow_once policy.
func TestACPExampleAgentEndToEnd(t *testing.T) {
	t.Parallel()
	bin := buildAgent(t, "github.com/coder/acp-go-sdk/example/agent")
	ts := startServer(t, withACP(config.ACPAgent{Command: bin, Args: []string{}, Permission: config.ACPPermissionAllowOnce}), nil)
	d := newACPDevice(t, ts, link.CapProgress)
	m := d.ask("m1", "hello")
	if m.FinishReason != link.FinishStop || !strings.HasPrefix(m.Text, "ACP Go Example Agent") ||
		!strings.Contains(m.Text, "Perfect! I've successfully updated the configuration.") {
		t.Fatalf("reply %+v", m)
	}
	if !strings.Contains(strings.Join(d.progress["m1"], "\n"), "tool: ") {
		t.Fatalf("no tool progress: %q", d.progress["m1"])
	}
	lines := readLines(t, filepath.Join(ts.cfg.Workspace, "sessions", "terminal-dev:local:dev.jsonl"))
	var meta struct{ Metadata map[string]any }
	if err := json.Unmarshal([]byte(lines[0]), &meta); err != nil || meta.Metadata["acp_session_id"] == nil {
		t.Fatalf("metadata line %s lacks acp_session_id (%v)", lines[0], err)
	}
}

// The scripted agent end to end: tool calls as progress, permission by
// policy, crash and restart.
func TestACPAgentEndToEnd(t *testing.T) {
	t.Parallel()
	bin := acpAgent(t)
	ts := startServer(t, withACP(config.ACPAgent{Command: bin}), nil)
	d := newACPDevice(t, ts, link.CapProgress, link.CapCancel)

	if m := d.ask("t1", "/tool read_file"); m.Text != "used read_file" || m.FinishReason != link.FinishStop {
		t.Fatalf("reply %+v", m)
	}
	if !strings.Contains(strings.Join(d.progress["t1"], "\n"), "tool: read_file") {
		t.Fatalf("the tool call was not shown as progress: %q", d.progress["t1"])
	}
	// Policy reject (the default).
	if m := d.ask("p1", "/perm"); m.Text != "rejected" {
		t.Fatalf("reply %+v", m)
	}
	// Crash: an error reply saying what to do, then a fresh process.
	first := d.ask("pid1", "/pid")
	m := d.ask("c1", "/crash")
	if m.FinishReason != link.FinishError || !strings.HasPrefix(m.Text, "The agent stopped; send the message again to start a new one.") {
		t.Fatalf("crash reply %+v", m)
	}
	if second := d.ask("pid2", "/pid"); second.Text == first.Text || !strings.HasPrefix(second.Text, "pid ") {
		t.Fatalf("pid before the crash %q, after %q: want a fresh process", first.Text, second.Text)
	}
	// A message sent during a turn waits for it (ACP has no injection),
	// then is a turn of its own.
	d.send(&link.Message{MessageID: "w1", Text: "/slow 400"})
	readAs[*link.Ack](d.client)
	d.send(&link.Message{MessageID: "w2", Text: "next"})
	var order []string
	for len(order) < 3 {
		switch f := d.next().(type) {
		case *link.Ack:
			order = append(order, "ack "+f.MessageID)
		case *link.Message:
			order = append(order, f.MessageID+": "+f.Text)
		}
	}
	if order[0] != "ack w2" || order[1] != "w1: slept" || order[2] != "w2: You said: next" {
		t.Fatalf("a message during a turn: %q", order)
	}
	// A JSON-RPC error.
	if m := d.ask("e1", "/auth"); m.FinishReason != link.FinishError || !strings.HasPrefix(m.Text, "Sign the agent in") {
		t.Fatalf("auth error reply %+v", m)
	}
}

// permission "ask": the question reaches the device as progress, the
// device's next message answers it (acked at once, answered by the turn's
// reply); a cancel mid-turn answers the open question cancelled.
func TestACPPermissionAskEndToEnd(t *testing.T) {
	t.Parallel()
	bin := acpAgent(t)
	ts := startServer(t, withACP(config.ACPAgent{Command: bin, Permission: config.ACPPermissionAsk}), nil)
	d := newACPDevice(t, ts, link.CapProgress, link.CapCancel)

	d.send(&link.Message{MessageID: "q1", Text: "/perm"})
	if a := readAs[*link.Ack](d.client); a.MessageID != "q1" {
		t.Fatalf("ack %+v", a)
	}
	d.waitProgress("q1", "Allow? Edit config.json: 1 Allow, 2 Skip")
	d.send(&link.Message{MessageID: "a1", Text: "1"})
	replies := map[string]*link.Message{}
	for len(replies) < 2 {
		switch f := d.next().(type) {
		case *link.Ack:
			if f.MessageID != "a1" {
				t.Fatalf("ack %+v", f)
			}
		case *link.Message:
			replies[f.MessageID] = f
		default:
			t.Fatalf("unexpected %+v", f)
		}
	}
	if replies["q1"].Text != "allowed" || replies["a1"].Text != "allowed" {
		t.Fatalf("replies %+v %+v", replies["q1"], replies["a1"])
	}

	// Cancel while the question is open.
	d.send(&link.Message{MessageID: "q2", Text: "/perm"})
	readAs[*link.Ack](d.client)
	d.waitProgress("q2", "Allow?")
	d.send(&link.Cancel{MessageID: "q2"})
	m, ok := d.next().(*link.Message)
	if !ok || m.MessageID != "q2" || m.FinishReason != link.FinishCancelled || strings.Contains(m.Text, "rejected") || strings.Contains(m.Text, "allowed") {
		t.Fatalf("cancelled turn %+v", m)
	}
	// A message after the cancel is a prompt again, not an answer.
	if m := d.ask("after", "2"); m.Text != "You said: 2" {
		t.Fatalf("reply %+v", m)
	}
	// A cancel mid-turn with no question: session/cancel, answered cancelled.
	d.send(&link.Message{MessageID: "long", Text: "/slow 30000"})
	readAs[*link.Ack](d.client)
	d.send(&link.Cancel{MessageID: "long"})
	if m, ok := d.next().(*link.Message); !ok || m.MessageID != "long" || m.FinishReason != link.FinishCancelled {
		t.Fatalf("cancelled turn %+v", m)
	}
}

// A Nuum turn longer than turnTimeout is interrupted; the reply says so.
func TestNuumTurnTimeoutEndToEnd(t *testing.T) {
	t.Parallel()
	bin := nuumAgent(t)
	ts := startServer(t, func(c *config.Config) {
		c.Agents["nuum"] = config.Agent{Nuum: &config.NuumAgent{Command: bin, IdleTimeout: 600, MaxProcesses: 4,
			StartTimeout: 30, HeartbeatSeconds: 30, HeartbeatTimeout: 10, TurnTimeout: 1}}
		ch := c.Channels["terminal-dev"]
		ch.Agent = "nuum"
		c.Channels["terminal-dev"] = ch
	}, nil)
	d := newACPDevice(t, ts)
	m := d.ask("slow", "/slow 30000")
	if m.FinishReason != link.FinishTimeout || !strings.Contains(m.Text, "did not finish within 1s; the turn was interrupted") {
		t.Fatalf("reply %+v", m)
	}
	if m := d.ask("next", "hi"); m.FinishReason != link.FinishStop || m.Text != "You said: hi" {
		t.Fatalf("reply after the timeout %+v", m)
	}
}
