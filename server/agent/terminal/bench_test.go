//go:build unix

package terminal

import (
	"bytes"
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"testing"

	"termlink/server/agent"
)

// BenchmarkRunEcho runs the Go echo agent through the Runner, one process
// per message, as the router does. Compare with BenchmarkDirectEcho for the
// runner's own cost.
func BenchmarkRunEcho(b *testing.B) {
	r, err := New("bench", rich(ShellQuote(echoAgent)), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	req := agent.Request{ChannelID: "terminal-dev", SessionKey: "terminal-dev:peer1", ChatID: "peer1",
		Text: "hello", Workspace: b.TempDir()}
	ctx := context.Background()
	for b.Loop() {
		res := r.Run(ctx, req, nil)
		if res.Text != "You said: hello" {
			b.Fatalf("reply %+v", res)
		}
	}
}

// BenchmarkDirectEcho runs the same agent binary directly: the envelope on
// stdin, stdout read whole, no shell, no runner.
func BenchmarkDirectEcho(b *testing.B) { benchDirect(b, false) }

// BenchmarkShellEcho is BenchmarkDirectEcho through "/bin/sh -c", as the
// runner starts agents: the difference to BenchmarkRunEcho is the
// runner's own cost, the difference to BenchmarkDirectEcho the shell's.
func BenchmarkShellEcho(b *testing.B) { benchDirect(b, true) }

func benchDirect(b *testing.B, shell bool) {
	ws := b.TempDir()
	env := Envelope{Version: 1, Text: "hello", Channel: "terminal-dev", ChatID: "peer1",
		SessionKey: "terminal-dev:peer1", Workspace: ws, UserDataDir: filepath.Join(ws, "users", "peer1")}
	payload, err := env.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	want := []byte(`{"text":"You said: hello","type":"message"}` + "\n")
	for b.Loop() {
		cmd := exec.Command(echoAgent)
		if shell {
			cmd = exec.Command(DefaultShell, "-c", ShellQuote(echoAgent))
		}
		cmd.Dir = ws
		cmd.Stdin = bytes.NewReader(payload)
		out, err := cmd.Output()
		if err != nil || !bytes.Equal(out, want) {
			b.Fatalf("%q %v", out, err)
		}
	}
}
