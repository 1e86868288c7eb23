package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/link"
	"termlink/server/config"
	"termlink/testrig/buildtest"
)

// End to end with real agent processes: device -> WebSocket -> server ->
// Terminal Protocol v1 runner -> subprocess -> back to the device.

// buildAgent builds an example agent (e.g. termlink/testrig/agents/echoagent)
// once per test binary and returns the binary's path.
func buildAgent(t *testing.T, pkg string) string { return buildtest.Command(t, pkg) }

func echoAgent(t *testing.T) string { return buildAgent(t, "termlink/testrig/agents/echoagent") }

// withTerminalAgent routes terminal-dev to a terminal agent.
func withTerminalAgent(ta config.TerminalAgent) func(*config.Config) {
	return func(c *config.Config) {
		if ta.Timeout == 0 {
			ta.Timeout = 30
		}
		if ta.Protocol == "" {
			ta.Protocol = "rich"
		}
		if ta.MaxOutputBytes == 0 {
			ta.MaxOutputBytes = 4 << 20
		}
		ta.Enabled = true
		c.Agents["agent"] = config.Agent{Terminal: &ta}
		ch := c.Channels["terminal-dev"]
		ch.Agent = "agent"
		c.Channels["terminal-dev"] = ch
	}
}

func TestTerminalAgentEndToEnd(t *testing.T) {
	t.Parallel()
	bin := echoAgent(t)
	ts := startServer(t, withTerminalAgent(config.TerminalAgent{Command: bin + " -progress", Timeout: 2}), nil)

	rich := dial(t, ts.ws, nil)
	rich.connect("rich-dev", link.CapText, link.CapProgress)
	plain := dial(t, ts.ws, nil)
	plain.connect("spec-dev")

	// A device that listed progress sees it; a spec client sees exactly the spec.
	// The run lasts 0.5 s after its first progress: a progress frame not
	// yet written when its reply comes is dropped as stale (by design),
	// so an instant reply could legitimately come without it.
	rich.send(&link.Message{MessageID: "r1", Text: "/sleep 0.5"})
	readAs[*link.Ack](rich)
	if p := readAs[*link.Progress](rich); p.MessageID != "r1" || p.Text != "thinking" {
		t.Fatalf("progress %+v", p)
	}
	for {
		f := rich.read()
		if p, ok := f.(*link.Progress); ok {
			if p.MessageID != "r1" || p.Text != "sleeping" {
				t.Fatalf("progress %+v", p)
			}
			continue
		}
		if m, ok := f.(*link.Message); !ok || m.Text != "slept 0.5 s" || m.FinishReason != "stop" {
			t.Fatalf("reply %+v", f)
		}
		break
	}
	plain.send(&link.Message{MessageID: "p1", Text: "hello"})
	readAs[*link.Ack](plain)
	if m := readAs[*link.Message](plain); m.Text != "You said: hello" {
		t.Fatalf("spec client reply %+v", m)
	}

	img := filepath.Join(t.TempDir(), "photo.png")
	if err := os.WriteFile(img, []byte("png"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		id, text, want, finish string
	}{
		{"multi", "/multi 3", "part 1\n\npart 2\n\npart 3", "stop"},
		{"media", "/media " + img, "[file: photo.png]", "stop"},
		{"error", "/error", "requested error", "error"},
		{"timeout", "/sleep 30", "timed out after 2s", "timeout"},
		{"exit", "/exit 3", "exit code 3", "error"},
	}
	for _, tt := range cases {
		t.Run(tt.id, func(t *testing.T) {
			plain.t = t
			plain.send(&link.Message{MessageID: tt.id, Text: tt.text})
			readAs[*link.Ack](plain)
			m := readAs[*link.Message](plain)
			if m.MessageID != tt.id || !strings.Contains(m.Text, tt.want) || m.FinishReason != tt.finish {
				t.Fatalf("reply %+v, want text containing %q and finish %q", m, tt.want, tt.finish)
			}
		})
	}
	plain.t = t
	// The session log has the user message and the reply.
	flushSessions(t, ts)
	lines := readLines(t, filepath.Join(ts.cfg.Workspace, "sessions", "terminal-dev:local:spec-dev.jsonl"))
	joined := strings.Join(lines, "\n")
	for _, want := range []string{`"role":"user","content":"/multi 3"`, `"content":"part 1\n\npart 2\n\npart 3"`, `"finish_reason":"timeout"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("session log lacks %s:\n%s", want, joined)
		}
	}
}

func TestPlainAgentQuotingAndNotFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	ts := startServer(t, withTerminalAgent(config.TerminalAgent{Command: "printf '%s' {message}", Protocol: "plain"}), nil)
	c := dial(t, ts.ws, nil)
	c.connect("dev")
	text := "it's $(touch " + marker + ") `touch " + marker + "` \"q\"\nline 2"
	c.send(&link.Message{MessageID: "q", Text: text})
	readAs[*link.Ack](c)
	if m := readAs[*link.Message](c); m.Text != text {
		t.Fatalf("plain agent echoed %q, want the text unchanged %q", m.Text, text)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the message text was run by the shell")
	}

	ts2 := startServer(t, withTerminalAgent(config.TerminalAgent{Command: "/nonexistent/agent-binary"}), nil)
	d := dial(t, ts2.ws, nil)
	d.connect("dev")
	d.send(&link.Message{MessageID: "nf", Text: "hi"})
	readAs[*link.Ack](d)
	if m := readAs[*link.Message](d); m.FinishReason != "error" || !strings.Contains(m.Text, "not found") {
		t.Fatalf("missing agent: %+v", m)
	}
}
