package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/link"
	"termlink/server/config"
)

// The Term Challenge harness end to end: the device's message is the task,
// a scripted agent drives a real PTY shell, the device sees progress and
// the outcome.
func TestHarnessAgentEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	agent := filepath.Join(dir, "agent.sh")
	script := `#!/bin/sh
screen=$(cat)
case "$TERMLINK_STEP" in
1) printf '%s\n' '{"analysis":"start","plan":"print a marker","commands":[{"keystrokes":"echo harness-$((6*7))\n","duration":0.3}],"task_complete":false}' ;;
2) if printf '%s' "$screen" | grep -q 'harness-42'; then
     printf '%s\n' '{"analysis":"the marker harness-42 is on screen","plan":"finish","commands":[],"task_complete":true}'
   else
     printf '%s\n' '{"analysis":"no marker on screen","plan":"give up","commands":[],"task_complete":false}'
   fi ;;
3) printf '%s\n' '{"analysis":"confirmed: harness-42 printed","plan":"","commands":[],"task_complete":true}' ;;
*) printf '%s\n' '{"analysis":"stuck","plan":"","commands":[],"task_complete":false}' ;;
esac
`
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, func(c *config.Config) {
		c.Agents["bringup"] = config.Agent{Harness: &config.HarnessAgent{Command: agent, Target: "pty", MaxSteps: 10,
			MaxDuration: 60, ObservationBytes: 10000, StepTimeout: 30}}
		ch := c.Channels["terminal-dev"]
		ch.Agent = "bringup"
		c.Channels["terminal-dev"] = ch
	}, nil)
	c := dial(t, ts.ws, nil)
	c.connect("bench", link.CapText, link.CapProgress)
	c.send(&link.Message{MessageID: "task", Text: "print the answer to everything"})
	readAs[*link.Ack](c)
	var progress []string
	for {
		f := c.read()
		if p, ok := f.(*link.Progress); ok {
			progress = append(progress, p.Text)
			continue
		}
		m, ok := f.(*link.Message)
		if !ok {
			t.Fatalf("unexpected %+v", f)
		}
		if m.FinishReason != "stop" || !strings.Contains(m.Text, "confirmed: harness-42 printed") {
			t.Fatalf("outcome %+v", m)
		}
		break
	}
	if !strings.Contains(strings.Join(progress, "\n"), "echo harness-") {
		t.Fatalf("progress %q does not show the command typed", progress)
	}
}
