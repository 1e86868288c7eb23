//go:build unix

package terminal

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/procs"
	"termlink/server/config"

	"termlink/internal/testwait"
)

// echoAgent is the path of the Go echo agent built by TestMain.
var echoAgent string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "terminal-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	echoAgent = filepath.Join(dir, "echoagent")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	build := exec.Command(goTool, "build", "-o", echoAgent, "termlink/testrig/agents/echoagent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the echo agent:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runTimeout bounds every Run in the tests: a guard against a hang.
const runTimeout = testwait.Deadline

// logRecorder is a slog.Handler that keeps what is logged.
type logRecorder struct {
	mu   sync.Mutex
	recs []string // "LEVEL msg text=..."
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "text" {
			b.WriteString(" text=" + a.Value.String())
		}
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r == s {
			return true
		}
	}
	return false
}

// all returns what was logged so far.
func (l *logRecorder) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.recs...)
}

// wantOrder fails the test unless each of want was logged, in this order.
func (l *logRecorder) wantOrder(t *testing.T, want ...string) {
	t.Helper()
	recs, i := l.all(), 0
	for _, r := range recs {
		if i < len(want) && r == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("log lacks %q (in order %q): %q", want[i], want, recs)
	}
}

// msgLeftBehind is what the runner logs when it kills the group because
// processes the agent left behind hold its output past the grace.
const msgLeftBehind = "INFO processes the agent left behind hold its output open; killing its process group"

// fixture is a workspace and a runner.
type fixture struct {
	t    *testing.T
	ws   string
	r    *Runner
	logs *logRecorder
}

func rich(command string) config.TerminalAgent {
	return config.TerminalAgent{Enabled: true, Command: command, Timeout: 20, Protocol: "rich", PassMedia: true}
}

func plain(command string) config.TerminalAgent {
	c := rich(command)
	c.Protocol = "plain"
	return c
}

func newFixture(t *testing.T, cfg config.TerminalAgent, opt ...Options) *fixture {
	t.Helper()
	f := &fixture{t: t, ws: t.TempDir(), logs: &logRecorder{}}
	var o Options
	if len(opt) > 0 {
		o = opt[0]
	}
	o.Logger = slog.New(f.logs)
	r, err := New("test", cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	f.r = r
	return f
}

func (f *fixture) req(text string) agent.Request {
	return agent.Request{ChannelID: "terminal-dev", SessionKey: "terminal-dev:peer1", ChatID: "peer1",
		PeerID: "peer1", MessageID: "m1", Text: text, Workspace: f.ws}
}

// run runs req and returns the result and the progress texts. It fails
// the test if Run takes longer than runTimeout.
func (f *fixture) run(ctx context.Context, req agent.Request) (agent.Result, []string) {
	f.t.Helper()
	var mu sync.Mutex
	var progress []string
	done := make(chan agent.Result, 1)
	go func() {
		done <- f.r.Run(ctx, req, func(s string) {
			mu.Lock()
			progress = append(progress, s)
			mu.Unlock()
		})
	}()
	select {
	case res := <-done:
		mu.Lock()
		defer mu.Unlock()
		return res, append([]string(nil), progress...)
	case <-time.After(runTimeout):
		f.t.Fatalf("Run(%q) did not return within %v", req.Text, runTimeout)
		return agent.Result{}, nil
	}
}

func (f *fixture) text(text string) agent.Result {
	f.t.Helper()
	res, _ := f.run(context.Background(), f.req(text))
	return res
}

// script writes an executable shell script into the workspace and
// returns its path.
func (f *fixture) script(name, body string) string {
	f.t.Helper()
	p := filepath.Join(f.ws, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// writeScript is script for a directory of its own, before the fixture
// exists.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// processGone reports whether pid no longer runs (gone or a zombie nobody
// reaped yet).
func processGone(pid int) bool { return !procs.Running(pid) }

// waitGone waits for pid to be gone (and kills it if the wait fails).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	t.Cleanup(func() {
		if !processGone(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	testwait.Until(t, fmt.Sprintf("process %d to end", pid), func() bool { return processGone(pid) })
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testwait.Until(t, "a pid in "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

func wantResult(t *testing.T, res agent.Result, finish string, contains ...string) {
	t.Helper()
	if res.FinishReason != finish {
		t.Errorf("finish_reason %q, want %q (text %q)", res.FinishReason, finish, clip(res.Text))
	}
	for _, c := range contains {
		if !strings.Contains(res.Text, c) {
			t.Errorf("reply %q does not contain %q", clip(res.Text), c)
		}
	}
}

func clip(s string) string {
	if len(s) > 600 {
		return s[:600] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

// How the runner starts an agent: "shell" runs the command with sh -c,
// "direct" runs its program without a shell (splitCommand).
var startModes = []string{"shell", "direct"}

// agentCommand returns a command that runs body, a sh script: itself
// (mode "shell") or a script file holding it, named by its path (mode
// "direct"). It fails the test if the runner would not start the command
// the way mode says.
func agentCommand(t *testing.T, mode, body string) string {
	t.Helper()
	command := body
	if mode == "direct" {
		command = ShellQuote(writeScript(t, body))
	}
	checkMode(t, mode, command)
	return command
}

// goAgentCommand returns the command that runs the Go echo agent with
// args ("" or plain words) the way mode says.
func goAgentCommand(t *testing.T, mode, args string) string {
	t.Helper()
	command := strings.TrimSpace(ShellQuote(echoAgent) + " " + args)
	if mode == "shell" {
		command += ";"
	}
	checkMode(t, mode, command)
	return command
}

func checkMode(t *testing.T, mode, command string) {
	t.Helper()
	if _, direct := splitCommand(command); direct != (mode == "direct") {
		t.Fatalf("the runner would not run %q in mode %s", command, mode)
	}
}
