package stdio

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"termlink/server/agent"

	"termlink/internal/testwait"
)

// lineProc is a whole protocol on the base, in a few lines: a message is
// one line to stdin, its reply the next line of stdout.
type lineProc struct {
	*Proc
	lines      chan string
	readerDone chan struct{}
}

func (p *lineProc) Begin() {
	go func() {
		defer close(p.readerDone)
		sc := bufio.NewScanner(p.Stdout())
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default: // nobody asked: dropped
			}
		}
	}()
}

func (p *lineProc) Interrupt()  {}
func (p *lineProc) Ended() bool { <-p.readerDone; return false }
func (p *lineProc) Finish()     {}

type lineRunner struct{ *Runner[*lineProc] }

func (r lineRunner) Run(ctx context.Context, req agent.Request) agent.Result {
	p, res, ok := r.Acquire(ctx, req, req.Workspace, func(string) {},
		func(context.Context, *lineProc) (agent.Result, bool) { return agent.Result{}, true })
	if !ok {
		return res
	}
	defer r.Pool.Release(p)
	if _, err := p.Write([]byte(req.Text + "\n")); err != nil {
		return ErrorResult(err.Error())
	}
	select {
	case l := <-p.lines:
		return agent.Result{Text: l, FinishReason: "stop"}
	case <-p.Exited():
		p.AwaitExit()
		return ErrorResult("exited (" + ExitText(p.ExitErr) + ")" + p.StderrNote())
	case <-ctx.Done():
		return CancelledResult()
	}
}

const lineAgent = `while read -r l; do case $l in crash) echo dying >&2; exit 3;; esac; echo "got $l $$"; done`

func newLineRunner(t *testing.T, edit func(*Config)) lineRunner {
	cfg := Config{
		Name: "line", Command: lineAgent, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxProcesses: 2, IdleTimeout: time.Minute, StopGrace: 200 * time.Millisecond,
		RestartBackoffMin: time.Millisecond, RestartBackoffMax: time.Millisecond,
		StderrNote: "; stderr: ", ClosedText: "closed",
	}
	if edit != nil {
		edit(&cfg)
	}
	r := lineRunner{NewRunner(cfg, func(b *Proc) *lineProc {
		return &lineProc{Proc: b, lines: make(chan string, 1), readerDone: make(chan struct{})}
	})}
	t.Cleanup(func() { r.Close() })
	return r
}

func run(t *testing.T, r lineRunner, key, text string) agent.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return r.Run(ctx, agent.Request{SessionKey: key, Text: text})
}

// The base runs a protocol: one process per session, kept between
// messages, restarted after a crash with its stderr quoted, all stopped
// by Close.
func TestLineProtocol(t *testing.T) {
	r := newLineRunner(t, nil)
	first := run(t, r, "s", "a")
	second := run(t, r, "s", "b")
	pid := strings.Fields(first.Text)[2]
	if first.Text != "got a "+pid || second.Text != "got b "+pid {
		t.Fatalf("replies %q, %q: want one process for the session", first.Text, second.Text)
	}
	if p, ok := r.Get(context.Background(), "s"); !ok || p.PID() == 0 {
		t.Fatal("no process for the session")
	}
	other := run(t, r, "t", "c")
	if other.FinishReason != "stop" || strings.HasSuffix(other.Text, " "+pid) {
		t.Fatalf("another session answered %+v", other)
	}
	if res := run(t, r, "s", "crash"); res.FinishReason != FinishError || res.Text != "exited (exit status 3); stderr: dying" {
		t.Fatalf("crash answered %+v", res)
	}
	if res := run(t, r, "s", "d"); res.FinishReason != "stop" || strings.HasSuffix(res.Text, " "+pid) {
		t.Fatalf("after the crash %+v, want a new process", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := r.Get(ctx, "s"); ok {
		t.Error("Get with an ended context found a process")
	}
	r.Close()
	if n := r.Live(); n != 0 {
		t.Errorf("%d processes live after Close", n)
	}
	if res := run(t, r, "s", "e"); res.Text != "closed" || res.FinishReason != FinishError {
		t.Errorf("after Close %+v", res)
	}
}

// A process without a turn for IdleTimeout is stopped; the session's
// next message starts another.
func TestIdleStop(t *testing.T) {
	r := newLineRunner(t, func(c *Config) { c.IdleTimeout = 50 * time.Millisecond })
	first := run(t, r, "s", "a")
	testwait.Until(t, "the idle process to be stopped", func() bool { return r.Live() == 0 })
	if res := run(t, r, "s", "a"); res.FinishReason != "stop" || res.Text == first.Text {
		t.Fatalf("after the idle stop %+v (before %q), want a new process", res, first.Text)
	}
}

// A command that cannot start is the configured reply, and the session's
// next start waits out a restart delay.
func TestStartFailed(t *testing.T) {
	r := newLineRunner(t, nil)
	res := r.Run(context.Background(), agent.Request{SessionKey: "s", Text: "a", Workspace: "/nonexistent/dir"})
	if res.FinishReason != FinishError || !strings.HasPrefix(res.Text, "cannot start the agent: ") {
		t.Fatalf("result %+v", res)
	}
}
