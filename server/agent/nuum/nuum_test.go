package nuum

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/stdio/stdiotest"
	"termlink/server/config"

	"termlink/internal/testwait"
)

// agentBin is the example agent (testrig/agents/nuumagent), built by TestMain.
var agentBin string

func TestMain(m *testing.M) {
	os.Exit(stdiotest.Main(m, map[*string]string{&agentBin: "termlink/testrig/agents/nuumagent"}))
}

// testOptions are short timeouts for tests.
func testOptions(tb testing.TB) Options {
	return Options{
		Logger:            stdiotest.Logger(tb),
		IdleTimeout:       time.Minute,
		StartTimeout:      5 * time.Second,
		HeartbeatInterval: 200 * time.Millisecond,
		HeartbeatTimeout:  2 * time.Second,
		InterruptWait:     2 * time.Second,
		InterruptedGrace:  300 * time.Millisecond,
		FollowUpWait:      2 * time.Second,
		WriteTimeout:      2 * time.Second,
		StopGrace:         500 * time.Millisecond,
		RestartBackoffMin: 50 * time.Millisecond,
		RestartBackoffMax: 400 * time.Millisecond,
	}
}

// newRunner returns a runner of the example agent with flags, closed at
// the end of the test.
func newRunner(tb testing.TB, flags string, edit func(*config.NuumAgent, *Options)) *Runner {
	tb.Helper()
	cfg := config.NuumAgent{Command: shellQuote(agentBin) + " " + flags, MaxProcesses: 4}
	opt := testOptions(tb)
	if edit != nil {
		edit(&cfg, &opt)
	}
	r, err := New("test", cfg, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// recorder is a session as the router would present it.
type recorder = stdiotest.Recorder

// run runs one message within a bounded time.
func run(tb testing.TB, r *Runner, rc *recorder, key, text string) agent.Result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return r.Run(ctx, rc.Req(key, text), rc.Progress)
}

// agentPID asks the session's agent for its process id.
func agentPID(tb testing.TB, r *Runner, key string) int {
	tb.Helper()
	res := run(tb, r, &recorder{}, key, "/pid")
	pid, err := strconv.Atoi(strings.TrimPrefix(res.Text, "pid "))
	if err != nil || res.FinishReason != "stop" {
		tb.Fatalf("/pid answered %+v", res)
	}
	return pid
}

var (
	alive    = stdiotest.Alive
	waitGone = stdiotest.WaitGone
	await    = stdiotest.Await
)

// runAsync starts a run and returns its result channel; started is closed
// at the turn's "thinking" progress.
func runAsync(r *Runner, ctx context.Context, rc *recorder, key, text string) (res <-chan agent.Result, started <-chan struct{}) {
	ch := make(chan agent.Result, 1)
	st := make(chan struct{})
	var once sync.Once
	progress := func(s string) {
		rc.Progress(s)
		if s == "thinking" {
			once.Do(func() { close(st) })
		}
	}
	go func() { ch <- r.Run(ctx, rc.Req(key, text), progress) }()
	return ch, st
}

func awaitStart(tb testing.TB, st <-chan struct{}) {
	tb.Helper()
	select {
	case <-st:
	case <-time.After(testwait.Deadline):
		tb.Fatal("the turn was not accepted")
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  config.NuumAgent
		opt  Options
	}{
		{"empty command", config.NuumAgent{Command: "  "}, Options{}},
		{"NUL", config.NuumAgent{Command: "a\x00b"}, Options{}},
		{"negative config", config.NuumAgent{Command: "x", IdleTimeout: -1}, Options{}},
		{"negative option", config.NuumAgent{Command: "x"}, Options{InterruptWait: -1}},
		{"bad env", config.NuumAgent{Command: "x"}, Options{Env: []string{"NOEQUALS"}}},
	} {
		if _, err := New("a", tc.cfg, tc.opt); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
	r, err := New("a", config.NuumAgent{Command: "x"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.idleTimeout != 600*time.Second || r.startTimeout != 30*time.Second || r.hbInterval != 30*time.Second ||
		r.hbTimeout != 10*time.Second || r.maxProcs != 32 {
		t.Errorf("defaults: idle %s start %s hb %s/%s max %d", r.idleTimeout, r.startTimeout, r.hbInterval, r.hbTimeout, r.maxProcs)
	}
}

func TestTurnsReuseProcess(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "", nil)
	rc := &recorder{}
	pid := agentPID(t, r, "s1")
	for _, text := range []string{"hello", "second turn", "ü ∑ \"quoted\"\nnewline"} {
		res := run(t, r, rc, "s1", text)
		if res.FinishReason != "stop" || res.Text != "You said: "+text {
			t.Fatalf("turn %q answered %+v", text, res)
		}
	}
	if got := agentPID(t, r, "s1"); got != pid {
		t.Fatalf("pid changed from %d to %d between turns", pid, got)
	}
	procs := r.Processes()
	if len(procs) != 1 || procs[0].SessionKey != "s1" || procs[0].Busy {
		t.Fatalf("processes %+v", procs)
	}
}

func TestSessionIDStored(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "--session-id nuum_01TEST", nil)
	rc := &recorder{}
	run(t, r, rc, "s1", "a")
	run(t, r, rc, "s1", "b")
	meta, metaCalls := rc.Meta()
	if meta[MetaSessionID] != "nuum_01TEST" {
		t.Errorf("meta %v", meta)
	}
	if metaCalls != 1 {
		t.Errorf("UpdateMeta called %d times for one process, want 1", metaCalls)
	}
	if p := r.Processes(); len(p) != 1 || p[0].SessionID != "nuum_01TEST" {
		t.Errorf("processes %+v", p)
	}
	// A nil UpdateMeta is fine.
	req := rc.Req("s2", "x")
	req.UpdateMeta, req.Event = nil, nil
	if res := r.Run(context.Background(), req, nil); res.FinishReason != "stop" {
		t.Errorf("run without hooks: %+v", res)
	}
}

func TestProgressAndToolResults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, flags, text string
		progress          []string
		events            []string
		reply             string
	}{
		{"nuum system/tool_result", "", "/tool read", []string{"thinking", "using read"},
			[]string{"agent_tool_result read: result of read"}, "Used read"},
		{"claude user tool_result", "--claude", "/tool bash", []string{"using bash"},
			[]string{"agent_tool_result bash: result of bash"}, "Used bash"},
		{"both shapes, reported once", "", "/tool-both grep", []string{"thinking", "using grep"},
			[]string{"agent_tool_result grep: result of grep"}, "Used grep"},
		{"plain turn", "", "hi", []string{"thinking"}, nil, "You said: hi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRunner(t, tc.flags, func(_ *config.NuumAgent, o *Options) { o.HeartbeatAckOptional = true })
			rc := &recorder{}
			res := run(t, r, rc, "s", tc.text)
			if res.FinishReason != "stop" || res.Text != tc.reply {
				t.Fatalf("result %+v", res)
			}
			progress, events := rc.Snapshot()
			if !slices.Equal(progress, tc.progress) {
				t.Errorf("progress %q, want %q", progress, tc.progress)
			}
			if !slices.Equal(events, tc.events) {
				t.Errorf("events %q, want %q", events, tc.events)
			}
		})
	}
}

func TestInject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, flags string
	}{
		{"nuum injects into the turn", ""},
		{"claude answers in a follow-up turn", "--claude"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRunner(t, tc.flags, func(_ *config.NuumAgent, o *Options) { o.HeartbeatAckOptional = true })
			rc := &recorder{}
			ctx := context.Background()
			if r.Inject(ctx, rc.Req("s", "nobody")) {
				t.Fatal("Inject into a session without a process succeeded")
			}
			pid := agentPID(t, r, "s")
			if r.Inject(ctx, rc.Req("s", "idle")) {
				t.Fatal("Inject into an idle session succeeded")
			}
			resCh := make(chan agent.Result, 1)
			go func() { resCh <- run(t, r, rc, "s", "/slow 800") }()
			// Wait until the turn is open (claude mode has no turn_accepted).
			testwait.Until(t, "an Inject during the turn to succeed", func() bool { return r.Inject(ctx, rc.Req("s", "second")) })
			res := await(t, resCh)
			// The result's text is the answer; the earlier step was progress.
			if want := "You said: second"; res.FinishReason != "stop" || res.Text != want {
				t.Fatalf("result %+v, want %q", res, want)
			}
			if p, _ := rc.Snapshot(); !slices.Contains(p, "You said: /slow 800") {
				t.Errorf("progress %q lacks the first step", p)
			}
			// The process is idle and in step: the next turn is answered alone.
			if res := run(t, r, rc, "s", "third"); res.Text != "You said: third" {
				t.Fatalf("next turn %+v", res)
			}
			if got := agentPID(t, r, "s"); got != pid {
				t.Fatalf("pid changed from %d to %d", pid, got)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	// No kill for not ending the turn within a test: only the interrupt
	// can end it.
	r, log := newRecordedRunner(t, "", func(o *Options) { o.InterruptWait = time.Hour })
	rc := &recorder{}
	pid := agentPID(t, r, "s")
	ctx, cancel := context.WithCancel(context.Background())
	resCh, started := runAsync(r, ctx, rc, "s", "/slow 10000")
	awaitStart(t, started)
	cancel()
	res := await(t, resCh)
	if res.FinishReason != "cancelled" {
		t.Fatalf("result %+v", res)
	}
	if ex := log.Find("agent exited"); len(ex) != 0 {
		t.Errorf("the agent exited on the cancel: %v", ex[0].Attrs)
	}
	// The interrupt ended the turn; the process stays.
	if res := run(t, r, rc, "s", "after"); res.Text != "You said: after" {
		t.Fatalf("turn after cancel %+v", res)
	}
	if got := agentPID(t, r, "s"); got != pid {
		t.Fatalf("pid changed from %d to %d", pid, got)
	}
}

func TestInterruptedWithoutResult(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "--no-cancel-result", nil)
	rc := &recorder{}
	pid := agentPID(t, r, "s")

	// The agent says interrupted on its own, and no result: the turn
	// waits the 300ms grace for one, then ends as cancelled.
	t0 := time.Now()
	res := run(t, r, rc, "s", "/interrupted")
	if res.FinishReason != "cancelled" {
		t.Fatalf("result %+v", res)
	}
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Errorf("turn ended after %s, before the 300ms grace", d)
	}

	// Cancelled by ctx; the agent answers the interrupt without a result.
	ctx, cancel := context.WithCancel(context.Background())
	resCh, started := runAsync(r, ctx, rc, "s", "/slow 10000")
	awaitStart(t, started)
	cancel()
	if res := await(t, resCh); res.FinishReason != "cancelled" {
		t.Fatalf("result %+v", res)
	}
	if res := run(t, r, rc, "s", "after"); res.Text != "You said: after" {
		t.Fatalf("turn after %+v", res)
	}
	if got := agentPID(t, r, "s"); got != pid {
		t.Fatalf("pid changed from %d to %d", pid, got)
	}
}

func TestCancelUnresponsiveAgent(t *testing.T) {
	t.Parallel()
	// The Claude dialect ignores Nuum's interrupt: the process is killed.
	r, log := newRecordedRunner(t, "--claude", func(o *Options) {
		o.HeartbeatAckOptional = true
		o.InterruptWait = 300 * time.Millisecond
		o.RestartBackoffMin = 5 * time.Second // a kill for not stopping is not a crash
	})
	rc := &recorder{}
	pid := agentPID(t, r, "s")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res := r.Run(ctx, rc.Req("s", "/slow 10000"), nil)
	if res.FinishReason != "cancelled" {
		t.Fatalf("result %+v", res)
	}
	// The turn ended by the kill, not by the agent's 10s step.
	ex := log.Wait(t, "agent exited", 1)
	if got := ex[0].Str("reason"); got != "agent did not end the turn within 300ms of an interrupt" {
		t.Errorf("exit reason %q", got)
	}
	waitGone(t, pid)
	if got := agentPID(t, r, "s"); got == pid {
		t.Fatal("same pid after the kill")
	}
	if c := log.Find("agent crashed; its next start waits"); len(c) != 0 {
		t.Errorf("a kill for not stopping counted as a crash: %v", c[0].Attrs)
	}
}

func TestCrashAndRestart(t *testing.T) {
	t.Parallel()
	r, log := newRecordedRunner(t, "--crash-after 1", func(o *Options) { o.RestartBackoffMin = 300 * time.Millisecond })
	rc := &recorder{}
	pid := agentPID(t, r, "s")
	res := run(t, r, rc, "s", "hello")
	if res.FinishReason != "error" || !strings.Contains(res.Text, "exit status 3") ||
		!strings.Contains(res.Text, "crashing after 1 turns") {
		t.Fatalf("crashed turn answered %+v", res)
	}
	waitGone(t, pid)
	pid2 := agentPID(t, r, "s")
	if pid2 == pid {
		t.Fatal("same pid after the crash")
	}
	// A successful turn resets the backoff: the next crash is the first
	// in a row again, and waits the minimum again.
	res = run(t, r, rc, "s", "crash again")
	if res.FinishReason != "error" {
		t.Fatalf("second crash answered %+v", res)
	}
	agentPID(t, r, "s")
	crashes := log.Find("agent crashed; its next start waits")
	starts := log.Find("agent started")
	if len(crashes) != 2 || len(starts) != 3 {
		t.Fatalf("%d crashes and %d starts, want 2 and 3", len(crashes), len(starts))
	}
	for i, c := range crashes {
		if n := c.Attrs["crashes"].Int64(); n != 1 {
			t.Errorf("crash %d is %d in a row, want 1 (reset by the answer between)", i, n)
		}
		d := c.Attrs["delay"].Duration()
		if d < 300*time.Millisecond {
			t.Errorf("crash %d: restart delay %s, below the 300ms minimum", i, d)
		}
		// next_start, not the line's own time: the line is written after
		// the backoff began, later still on a busy machine.
		if next, notBefore := starts[i+1].At, c.Attrs["next_start"].Time(); next.Before(notBefore) {
			t.Errorf("crash %d: restarted %s before its %s backoff ended", i, notBefore.Sub(next), d)
		}
	}
}

func TestCrashBackoff(t *testing.T) {
	t.Parallel()
	lo, hi := 100*time.Millisecond, 400*time.Millisecond
	r, log := newRecordedRunner(t, "--crash-after 0", func(o *Options) {
		o.RestartBackoffMin, o.RestartBackoffMax = lo, hi
	})
	rc := &recorder{}
	for i := 0; i < 5; i++ {
		res := run(t, r, rc, "s", "x")
		if res.FinishReason != "error" || !strings.Contains(res.Text, "exit status 3") {
			t.Fatalf("run %d answered %+v", i, res)
		}
	}
	// Each crash is one more in a row; its delay is randomized within
	// [min, max] (package restart's TestDelays); the next start waits it.
	crashes := log.Wait(t, "agent crashed; its next start waits", 5)
	starts := log.Find("agent started")
	if len(starts) != 5 {
		t.Fatalf("%d starts, want 5", len(starts))
	}
	for i, c := range crashes {
		if n := c.Attrs["crashes"].Int64(); n != int64(i+1) {
			t.Errorf("crash %d is %d in a row", i, n)
		}
		d := c.Attrs["delay"].Duration()
		if d < lo || d > hi {
			t.Errorf("crash %d: delay %s, want %s..%s", i, d, lo, hi)
		}
		// next_start, not the line's own time: the line is written after
		// the backoff began, later still on a busy machine (stress run 25).
		if notBefore := c.Attrs["next_start"].Time(); i+1 < len(starts) && starts[i+1].At.Before(notBefore) {
			t.Errorf("crash %d: restarted %s before its %s backoff ended", i, notBefore.Sub(starts[i+1].At), d)
		}
	}

	// Waiting for the backoff honours ctx: a run cancelled while it waits
	// starts nothing.
	r, log = newRecordedRunner(t, "--crash-after 0", func(o *Options) { o.RestartBackoffMin = time.Hour })
	if res := run(t, r, rc, "s", "x"); res.FinishReason != "error" {
		t.Fatalf("run answered %+v", res)
	}
	log.Wait(t, "agent crashed; its next start waits", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if res := r.Run(ctx, rc.Req("s", "x"), nil); res.FinishReason != "cancelled" {
		t.Fatalf("run cancelled during the backoff answered %+v", res)
	}
	if n := len(log.Find("agent started")); n != 1 {
		t.Errorf("%d starts, want 1: the cancelled run started an agent", n)
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	fast := func(_ *config.NuumAgent, o *Options) {
		o.HeartbeatInterval = 50 * time.Millisecond
		o.HeartbeatTimeout = 500 * time.Millisecond
	}
	t.Run("acked", func(t *testing.T) {
		t.Parallel()
		r := newRunner(t, "", fast)
		rc := &recorder{}
		pid := agentPID(t, r, "s")
		if res := run(t, r, rc, "s", "/slow 1200"); res.FinishReason != "stop" {
			t.Fatalf("result %+v", res)
		}
		if got := agentPID(t, r, "s"); got != pid {
			t.Fatalf("pid changed from %d to %d", pid, got)
		}
	})
	t.Run("not acked", func(t *testing.T) {
		t.Parallel()
		r := newRunner(t, "--no-heartbeat-ack", fast)
		rc := &recorder{}
		// An idle process is killed...
		pid := agentPID(t, r, "s")
		waitGone(t, pid)
		// ... and a running turn is answered with an error (by the kill,
		// not by the end of the agent's 10s step).
		res := run(t, r, rc, "s", "/slow 10000")
		if res.FinishReason != "error" || !strings.HasPrefix(res.Text, "agent stopped answering heartbeats") {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("ack optional until seen", func(t *testing.T) {
		t.Parallel()
		r := newRunner(t, "--no-heartbeat-ack", func(c *config.NuumAgent, o *Options) {
			fast(c, o)
			o.HeartbeatAckOptional = true
		})
		rc := &recorder{}
		pid := agentPID(t, r, "s")
		if res := run(t, r, rc, "s", "/slow 1200"); res.FinishReason != "stop" {
			t.Fatalf("result %+v", res)
		}
		if got := agentPID(t, r, "s"); got != pid {
			t.Fatalf("pid changed from %d to %d", pid, got)
		}
	})
}

func TestStartFailures(t *testing.T) {
	t.Parallel()
	t.Run("no init", func(t *testing.T) {
		t.Parallel()
		r := newRunner(t, "--no-init", func(_ *config.NuumAgent, o *Options) { o.StartTimeout = 300 * time.Millisecond })
		res := run(t, r, &recorder{}, "s", "hello")
		if res.FinishReason != "error" || res.Text != "agent did not send system/init within 300ms" {
			t.Fatalf("result %+v", res)
		}
		waitProcs(t, r, 0)
	})
	t.Run("exits before init", func(t *testing.T) {
		t.Parallel()
		// Ended by the exit: the start timeout is beyond the run's bound.
		o := testOptions(t)
		o.StartTimeout = time.Hour
		r, err := New("x", config.NuumAgent{Command: "echo boom >&2; exit 7"}, o)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		res := run(t, r, &recorder{}, "s", "hello")
		if res.FinishReason != "error" || !strings.Contains(res.Text, "exit status 7") || !strings.Contains(res.Text, "boom") {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("missing workspace", func(t *testing.T) {
		t.Parallel()
		r := newRunner(t, "", nil)
		req := (&recorder{}).Req("s", "x")
		req.Workspace = filepath.Join(t.TempDir(), "missing")
		res := r.Run(context.Background(), req, nil)
		if res.FinishReason != "error" || !strings.Contains(res.Text, "cannot start the agent") {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("default timeout text", func(t *testing.T) {
		t.Parallel()
		r, err := New("x", config.NuumAgent{Command: "sleep 60", StartTimeout: 1}, Options{Logger: testOptions(t).Logger})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if res := run(t, r, &recorder{}, "s", "x"); res.Text != "agent did not send system/init within 1s" {
			t.Fatalf("result %+v", res)
		}
	})
}

func waitProcs(tb testing.TB, r *Runner, n int) {
	tb.Helper()
	testwait.UntilOK(tb, fmt.Sprintf("%d processes", n), func() error {
		if p := r.Processes(); len(p) != n {
			return fmt.Errorf("processes %+v", p)
		}
		return nil
	})
}

func TestWorkspaceAndEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, err := New("x", config.NuumAgent{
		Command: `printf '{"type":"system","subtype":"init","session_id":"%s"}\n' "$(pwd)|$TERMLINK_SESSION_KEY|$EXTRA"; cat >/dev/null`,
	}, func() Options {
		o := testOptions(t)
		o.Env = []string{"EXTRA=yes"}
		o.HeartbeatAckOptional = true
		o.InterruptWait = 100 * time.Millisecond
		return o
	}())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rc := &recorder{}
	req := rc.Req("sess-1", "x")
	req.Workspace = dir
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan agent.Result, 1)
	go func() { done <- r.Run(ctx, req, nil) }() // the agent never answers
	// Its init (the session id it reports) is stored once it started.
	testwait.Until(t, "the agent's session id stored", func() bool { meta, _ := rc.Meta(); return meta[MetaSessionID] != nil })
	cancel()
	await(t, done)
	meta, _ := rc.Meta()
	if want := dir + "|sess-1|yes"; meta[MetaSessionID] != want {
		t.Errorf("agent saw %v, want %q", meta[MetaSessionID], want)
	}
}

func TestIdleStop(t *testing.T) {
	t.Parallel()
	// A second idle: far above the pauses between turns below (a loaded
	// machine stretches them).
	r := newRunner(t, "", func(_ *config.NuumAgent, o *Options) { o.IdleTimeout = time.Second })
	pid := agentPID(t, r, "s")
	// Turns keep it alive.
	for i := 0; i < 3; i++ {
		time.Sleep(100 * time.Millisecond)
		if got := agentPID(t, r, "s"); got != pid {
			t.Fatalf("pid changed from %d to %d while in use", pid, got)
		}
	}
	waitGone(t, pid)
	waitProcs(t, r, 0)
	if got := agentPID(t, r, "s"); got == pid {
		t.Fatal("same pid after the idle stop")
	}
}

func TestMaxProcessesLRU(t *testing.T) {
	t.Parallel()
	var log *stdiotest.Log
	r := newRunner(t, "", func(c *config.NuumAgent, o *Options) { c.MaxProcesses = 2; log = recordLog(o) })
	pa := agentPID(t, r, "a")
	pb := agentPID(t, r, "b")
	pc := agentPID(t, r, "c") // evicts a, the least recently used
	waitGone(t, pa)
	if !alive(pb) || !alive(pc) {
		t.Fatal("b or c stopped")
	}
	keys := func() []string {
		var k []string
		for _, p := range r.Processes() {
			k = append(k, p.SessionKey)
		}
		return k
	}
	if k := keys(); !slices.Equal(k, []string{"b", "c"}) {
		t.Fatalf("sessions %v", k)
	}
	if got := agentPID(t, r, "b"); got != pb {
		t.Fatal("b restarted")
	}
	agentPID(t, r, "a") // evicts c: b was used after it
	waitGone(t, pc)
	if k := keys(); !slices.Equal(k, []string{"a", "b"}) {
		t.Fatalf("sessions %v", k)
	}

	// Both busy: a third session waits for one of them, honouring ctx.
	rc := &recorder{}
	ctx := context.Background()
	resA, stA := runAsync(r, ctx, rc, "a", "/slow 1000")
	resB, stB := runAsync(r, ctx, rc, "b", "/slow 1000")
	awaitStart(t, stA)
	awaitStart(t, stB)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	crc := &recorder{}
	if res := r.Run(short, crc.Req("c", "x"), crc.Progress); res.FinishReason != "cancelled" {
		t.Fatalf("waiting run answered %+v", res)
	}
	if p, _ := crc.Snapshot(); !slices.Contains(p, "waiting for a free agent process") {
		t.Errorf("progress %q", p)
	}
	res := run(t, r, crc, "c", "x")
	if res.Text != "You said: x" {
		t.Fatalf("c answered %+v", res)
	}
	// c got its slot by evicting a or b once its turn had ended (only an
	// idle process is evicted), not beside them.
	if ev := log.Find("stopping the least recently used agent process"); len(ev) == 0 ||
		ev[len(ev)-1].Str("for") != "c" || (ev[len(ev)-1].Str("session") != "a" && ev[len(ev)-1].Str("session") != "b") {
		t.Errorf("c did not take an idle slot of a or b: %v", ev)
	}
	for _, ch := range []<-chan agent.Result{resA, resB} {
		if res := await(t, ch); res.FinishReason != "stop" {
			t.Errorf("slow run %+v", res)
		}
	}
	if n := len(r.Processes()); n > 2 {
		t.Errorf("%d processes", n)
	}
}

func TestGarbageSkipped(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "--garbage", nil)
	rc := &recorder{}
	pid := agentPID(t, r, "s")
	for _, text := range []string{"one", "/tool read"} {
		res := run(t, r, rc, "s", text)
		if res.FinishReason != "stop" || strings.Contains(res.Text, "OVERLONG") {
			t.Fatalf("turn %q answered %.200q", text, res.Text)
		}
	}
	if got := agentPID(t, r, "s"); got != pid {
		t.Fatalf("pid changed from %d to %d", pid, got)
	}
}

func TestResultSubtypes(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "", nil)
	rc := &recorder{}
	for _, tc := range []struct {
		text, reason, reply string
	}{
		{"hello", "stop", "You said: hello"},
		{"/result success Done!", "stop", "Done!"},
		{"/result error_during_execution boom", "error", "agent failed during execution: boom"},
		{"/result error_max_turns", "error", "agent stopped: it reached its maximum number of turns"},
		{"/result error oops", "error", "agent error: oops"},
		{"/result cancelled", "cancelled", "cancelled"},
		{"/result error_something_new detail", "error", "agent error (error_something_new): detail"},
		{"/iserror api down", "error", "agent error: api down"},
		{"/syserror disk full", "error", "agent error: disk full"},
	} {
		rc.Reset()
		res := run(t, r, rc, "s", tc.text)
		if res.FinishReason != tc.reason || res.Text != tc.reply {
			t.Errorf("%q answered %+v, want %s %q", tc.text, res, tc.reason, tc.reply)
		}
	}
	if _, ev := rc.Snapshot(); !slices.Equal(ev, []string{"agent_error disk full"}) {
		t.Errorf("events of /syserror: %q", ev)
	}
}

func TestStdinNotRead(t *testing.T) {
	t.Parallel()
	r, err := New("x", config.NuumAgent{
		Command: `printf '{"type":"system","subtype":"init","session_id":"s"}\n'; exec sleep 30`,
	}, func() Options {
		o := testOptions(t)
		o.WriteTimeout = 300 * time.Millisecond
		o.HeartbeatAckOptional = true
		return o
	}())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Ended by the kill for not reading (the reply says so), not by the
	// run's bound.
	res := run(t, r, &recorder{}, "s", strings.Repeat("x", 256<<10))
	if res.FinishReason != "error" || !strings.Contains(res.Text, "stopped reading its stdin") {
		t.Fatalf("result %.300q", res)
	}
}

func TestStdoutClosed(t *testing.T) {
	t.Parallel()
	r, err := New("x", config.NuumAgent{
		Command: `printf '{"type":"system","subtype":"init","session_id":"s"}\n'; exec sleep 30 >&-`,
	}, func() Options { o := testOptions(t); o.HeartbeatAckOptional = true; return o }())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	res := run(t, r, &recorder{}, "s", "x")
	if res.FinishReason != "error" || !strings.Contains(res.Text, "closed its stdout") {
		t.Fatalf("result %+v", res)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	r, log := newRecordedRunner(t, "", nil)
	rc := &recorder{}
	pa := agentPID(t, r, "a")
	pb := agentPID(t, r, "b")
	resCh, started := runAsync(r, context.Background(), rc, "a", "/slow 10000")
	awaitStart(t, started)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returned once both processes had exited, stopped by it.
	ex := log.Find("agent exited")
	if len(ex) != 2 {
		t.Fatalf("%d exits when Close returned, want 2", len(ex))
	}
	for _, e := range ex {
		if got := e.Str("reason"); got != "the agent runner was closed" {
			t.Errorf("pid %s exited for %q", e.Str("pid"), got)
		}
	}
	res := await(t, resCh)
	if res.FinishReason == "stop" {
		t.Errorf("run during Close answered %+v", res)
	}
	for _, pid := range []int{pa, pb} {
		if alive(pid) {
			t.Errorf("process %d alive after Close", pid)
		}
	}
	if res := run(t, r, rc, "a", "x"); res.FinishReason != "error" || !strings.Contains(res.Text, "closed") {
		t.Errorf("run after Close %+v", res)
	}
	if r.Inject(context.Background(), rc.Req("a", "x")) {
		t.Error("Inject after Close succeeded")
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestExitDuringTurn(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "", nil)
	res := run(t, r, &recorder{}, "s", "/exit 9")
	if res.FinishReason != "error" || !strings.Contains(res.Text, "exit status 9") || !strings.Contains(res.Text, "exiting with status 9") {
		t.Fatalf("result %+v", res)
	}
}

func BenchmarkTurn(b *testing.B) {
	r := newRunner(b, "", func(_ *config.NuumAgent, o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	rc := &recorder{}
	ctx := context.Background()
	req := rc.Req("bench", "hello")
	if res := r.Run(ctx, req, nil); res.FinishReason != "stop" {
		b.Fatalf("warm-up %+v", res)
	}
	b.ResetTimer()
	for b.Loop() {
		if res := r.Run(ctx, req, nil); res.Text != "You said: hello" {
			b.Fatalf("result %+v", res)
		}
	}
}

func Example() {
	bin := agentBin // any command speaking the Nuum wire protocol, e.g. "nuum --stdio"
	r, err := New("nuum", config.NuumAgent{Command: shellQuote(bin), IdleTimeout: 600}, Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	res := r.Run(context.Background(), agent.Request{SessionKey: "terminal-dev:peer1", Text: "hello"},
		func(p string) { fmt.Println("progress:", p) })
	fmt.Println(res.FinishReason, res.Text)
	// Output:
	// progress: thinking
	// stop You said: hello
}

func TestAgentQuitsAfterAnswering(t *testing.T) {
	t.Parallel()
	// A one-shot agent: init, one answer, exit 0. Restarting it is no
	// crash recovery, so no backoff.
	var log *stdiotest.Log
	r, err := New("x", config.NuumAgent{
		Command: `printf '%s\n' '{"type":"system","subtype":"init","session_id":"one"}'; read -r line; ` +
			`printf '%s\n' '{"type":"result","subtype":"success","result":"once"}'; exit 0`,
	}, func() Options {
		o := testOptions(t)
		o.RestartBackoffMin = 5 * time.Second
		o.HeartbeatAckOptional = true
		log = recordLog(&o)
		return o
	}())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; i < 3; i++ {
		if res := run(t, r, &recorder{}, "s", "x"); res.FinishReason != "stop" || res.Text != "once" {
			t.Fatalf("run %d: %+v", i, res)
		}
	}
	if n := len(log.Find("agent started")); n != 3 {
		t.Errorf("%d starts for three one-shot runs, want 3", n)
	}
	if c := log.Find("agent crashed; its next start waits"); len(c) != 0 {
		t.Errorf("an agent that quit after answering counted as a crash: %v", c[0].Attrs)
	}
}

func TestCloseKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := newRunner(t, "", func(c *config.NuumAgent, _ *Options) {
		c.Command = "sleep 60 & echo $! > child.pid; exec " + c.Command
	})
	req := (&recorder{}).Req("s", "hi")
	req.Workspace = dir
	if res := r.Run(context.Background(), req, nil); res.Text != "You said: hi" {
		t.Fatalf("result %+v", res)
	}
	b, err := os.ReadFile(filepath.Join(dir, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !alive(child) {
		t.Fatalf("child %q not running", b)
	}
	r.Close()
	waitGone(t, child)
}

func TestDescendantHoldingStdout(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	// A descendant outside the process group keeps stdout open after the
	// agent crashed: the turn still ends, within the read grace, while the
	// descendant still runs.
	dir := t.TempDir()
	// The descendant writes its pid once in its own session, and the
	// agent starts only then: a group kill before its setsid took it
	// too on a loaded machine.
	r := newRunner(t, "--crash-after 0", func(c *config.NuumAgent, _ *Options) {
		c.Command = `setsid sh -c 'echo $$ > desc.tmp; mv desc.tmp desc.pid; exec sleep 60' & while [ ! -s desc.pid ]; do sleep 0.01; done; exec ` + c.Command
	})
	req := (&recorder{}).Req("s", "x")
	req.Workspace = dir
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := r.Run(ctx, req, nil)
	b, err := os.ReadFile(filepath.Join(dir, "desc.pid"))
	if err != nil {
		t.Fatal(err)
	}
	desc, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("desc.pid %q", b)
	}
	defer syscall.Kill(desc, syscall.SIGKILL)
	if res.FinishReason != "error" || !strings.Contains(res.Text, "exit status 3") {
		t.Fatalf("result %+v", res)
	}
	if !alive(desc) {
		t.Error("the descendant holding stdout is gone: the turn waited for it")
	}
}

// The reply is the result's text (Nuum's final answer); the assistant
// steps before it are progress; the joined steps answer only when the
// result has no text. Issue 11, "Nuum replies".
func TestReplyIsTheResult(t *testing.T) {
	t.Parallel()
	r := newRunner(t, "", nil)
	tests := []struct {
		name, msg, reply string
		progress         []string
	}{
		{"one step", "hello", "You said: hello", []string{"thinking"}},
		{"steps, the last one the result", "/steps I'll read that file.|The file contains: Hello world!",
			"The file contains: Hello world!", []string{"thinking", "I'll read that file."}},
		{"streamed pieces, the result whole", "/steps Hello| world|=Hello world",
			"Hello world", []string{"thinking", "Hello"}},
		{"result without text", "/steps-noresult one|two", "one\ntwo", []string{"thinking", "one"}},
		{"tool use between steps", "/tool read", "Used read", []string{"thinking", "using read"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := &recorder{}
			res := run(t, r, rc, "s", tt.msg)
			if res.FinishReason != "stop" || res.Text != tt.reply {
				t.Errorf("reply %+v, want %q", res, tt.reply)
			}
			if p, _ := rc.Snapshot(); !slices.Equal(p, tt.progress) {
				t.Errorf("progress %q, want %q", p, tt.progress)
			}
		})
	}
}
