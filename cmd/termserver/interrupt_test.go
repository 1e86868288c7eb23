package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/internal/testwait"
	"termlink/link"
)

// A run cut short by kill -9 runs again once at the next start; cut short
// again, the message is answered with an error instead of a third run, and
// the session log says what happened.
func TestRunInterruptedTwiceIsNotRunAgain(t *testing.T) {
	t.Parallel()
	workspace := t.TempDir()
	cfg := writeConfig(t, workspace, 60_000) // runs outlast every kill below

	p := start(t, cfg)
	d := connect(t, p, "dev")
	d.send(&link.Message{MessageID: "m-1", Text: "long job"})
	if ack, ok := d.read().(*link.Ack); !ok || !ack.Accepted {
		t.Fatalf("ack %+v", ack)
	}
	p.kill(t)

	logFile := filepath.Join(workspace, "sessions", "terminal-dev:local:dev.jsonl")
	p = start(t, cfg) // runs m-1 again
	if !strings.Contains(p.log.String(), "unanswered=1") {
		t.Fatalf("first restart does not re-run m-1:\n%s", p.log)
	}
	// The re-run has started once its start is in the session log.
	testwait.UntilOK(t, "the re-run of m-1 started", func() error {
		data, _ := os.ReadFile(logFile)
		if strings.Contains(string(data), `"event":"run_interrupted"`) {
			return nil
		}
		return fmt.Errorf("the session log:\n%s\nthe server's:\n%s", data, p.log)
	})
	p.kill(t)

	p = start(t, cfg)
	if !strings.Contains(p.log.String(), "unanswered=0") || !strings.Contains(p.log.String(), "interrupted_twice=1") {
		t.Fatalf("second restart:\n%s", p.log)
	}
	d = connect(t, p, "dev")
	d.send(&link.Message{MessageID: "m-1", Text: "long job"})
	ack, ok := d.read().(*link.Ack)
	if !ok || !ack.Duplicate || ack.Reply == nil || ack.Reply.FinishReason != link.FinishError ||
		!strings.Contains(ack.Reply.Text, "interrupted twice") {
		t.Fatalf("resend after two interruptions: %+v", ack)
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), `"event":"run_interrupted"`); n != 1 {
		t.Errorf("%d run_interrupted records, want 1:\n%s", n, data)
	}
}
