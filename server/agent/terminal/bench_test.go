//go:build unix

package terminal

import (
	"bytes"
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"termlink/server/agent"
	"termlink/server/agent/procs"
)

// BenchmarkRunEcho runs the Go echo agent through the Runner, one process
// per message, as the router does, with a registry as termserver has.
// Compare with BenchmarkDirectEcho for the runner's own cost. Each
// benchmark reports the CPU time per run of this process (self-ms/op)
// and of the processes it started (child-ms/op), which a busy machine
// changes less than the wall time.
func BenchmarkRunEcho(b *testing.B) { benchRun(b, ShellQuote(echoAgent)) }

// BenchmarkRunEchoShell is BenchmarkRunEcho with a command that needs the
// shell (a trailing ";"): sh -c runs the agent.
func BenchmarkRunEchoShell(b *testing.B) { benchRun(b, ShellQuote(echoAgent)+";") }

func benchRun(b *testing.B, command string) {
	ws := b.TempDir()
	reg, err := procs.Open(ws, nil)
	if err != nil {
		b.Fatal(err)
	}
	r, err := New("bench", rich(command), Options{Logger: slog.New(slog.DiscardHandler), Procs: reg})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	req := agent.Request{ChannelID: "terminal-dev", SessionKey: "terminal-dev:peer1", ChatID: "peer1",
		Text: "hello", Workspace: ws}
	ctx := context.Background()
	defer reportCPU(b)()
	for b.Loop() {
		res := r.Run(ctx, req, nil)
		if res.Text != "You said: hello" {
			b.Fatalf("reply %+v", res)
		}
	}
}

// reportCPU reports the CPU time per op of this process and of its
// children, from now to the call of the function it returns.
func reportCPU(b *testing.B) func() {
	var self0, child0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &child0)
	return func() {
		var self1, child1 syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
		syscall.Getrusage(syscall.RUSAGE_CHILDREN, &child1)
		ms := func(a, b syscall.Rusage) float64 {
			return float64(b.Utime.Nano()+b.Stime.Nano()-a.Utime.Nano()-a.Stime.Nano()) / 1e6
		}
		b.ReportMetric(ms(self0, self1)/float64(b.N), "self-ms/op")
		b.ReportMetric(ms(child0, child1)/float64(b.N), "child-ms/op")
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
	defer reportCPU(b)()
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
