package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/procs"
)

// failure is an agent failure: the run ends with FinishReason "error".
type failure struct{ msg string }

func (f *failure) Error() string { return f.msg }

func failf(format string, a ...any) error { return &failure{fmt.Sprintf(format, a...)} }

// run is the state of one task.
type run struct {
	r        *Runner
	ctx      context.Context
	progress agent.Progress
	slot     *slot
	term     terminal
	dir      string
	key      string
	task     string

	step     int
	format   Format // of the agent's last parsed response; JSON until known
	pending  bool   // the agent said task_complete once; asked to confirm
	confirm  bool   // the next request asks the agent to confirm
	analysis string // the agent's last analysis
	feedback string // errors or warnings block for the next request
	note     string // harness note for the next request
}

// Run implements agent.Runner: it drives the session's terminal with the
// agent until the agent confirms the task complete, a limit is hit, ctx
// ends (FinishReason "cancelled") or the agent fails ("error").
func (r *Runner) Run(ctx context.Context, req agent.Request, progress agent.Progress) agent.Result {
	if progress == nil {
		progress = func(string) {}
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return agent.Result{Text: "The harness is shutting down.", FinishReason: "cancelled"}
	}
	r.runs.Add(1)
	r.mu.Unlock()
	defer r.runs.Done()

	if strings.TrimSpace(req.Text) == "" {
		return agent.Result{Text: "Nothing to do: the message is empty.", FinishReason: "error"}
	}
	ws := req.Workspace
	if ws == "" {
		ws = r.opt.Workspace
	}
	if abs, err := filepath.Abs(ws); err == nil {
		ws = abs
	}
	key := req.SessionKey
	if key == "" {
		key = "default"
	}
	dir := WorkDir(ws, key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return agent.Result{Text: fmt.Sprintf("Cannot create the work directory: %v", err), FinishReason: "error"}
	}

	runCtx, cancelRun := context.WithCancelCause(ctx)
	stopClose := context.AfterFunc(r.ctx, func() { cancelRun(errClosed) })
	runCtx, cancelTimeout := context.WithTimeoutCause(runCtx, r.maxDuration, errMaxDuration)
	defer func() {
		cancelTimeout()
		stopClose()
		cancelRun(nil)
	}()

	u := &run{r: r, ctx: runCtx, progress: progress, dir: dir, key: key, task: req.Text, format: FormatJSON}
	slotKey := key
	if r.kind == TargetSerial {
		slotKey = "serial:" + r.serialPath
	}
	s, err := r.acquire(runCtx, slotKey)
	if err != nil {
		return u.finishCtx()
	}
	defer r.release(s)
	u.slot = s
	term, fresh, err := r.terminal(runCtx, s, dir)
	if err != nil {
		if runCtx.Err() != nil {
			return u.finishCtx()
		}
		return agent.Result{Text: fmt.Sprintf("Cannot start the %s terminal: %v", r.kind, err), FinishReason: "error"}
	}
	u.term = term
	if fresh {
		r.waitReady(runCtx, term)
	}
	return u.loop()
}

func (u *run) loop() agent.Result {
	r := u.r
	for u.step = 1; ; u.step++ {
		if u.ctx.Err() != nil {
			return u.finishCtx()
		}
		if u.step > r.cfg.MaxSteps {
			return u.finish("stop", fmt.Sprintf("Stopped after %d steps (the step limit) before the agent confirmed the task complete.", r.cfg.MaxSteps))
		}
		screen, err := u.screen()
		if err != nil {
			if u.ctx.Err() != nil {
				return u.finishCtx()
			}
			return u.finish("error", fmt.Sprintf("Stopped at step %d: %v", u.step, err))
		}
		request := BuildRequest(u.task, u.note+u.feedback, capObservation(screen, r.cfg.ObservationBytes), u.confirm, u.format)
		u.note, u.feedback, u.confirm = "", "", false

		u.progress(fmt.Sprintf("step %d: thinking", u.step))
		out, err := r.runAgent(u.ctx, u.dir, u.key, u.step, request)
		if err != nil {
			var f *failure
			if errors.As(err, &f) {
				return u.finish("error", fmt.Sprintf("Agent failed at step %d: %s", u.step, f.msg))
			}
			return u.finishCtx()
		}

		resp := Parse(out)
		if resp.Format != FormatUnknown {
			u.format = resp.Format
		}
		if !resp.OK() {
			u.feedback = errorBlock(resp, u.format)
			u.progress(fmt.Sprintf("step %d: bad response, asking again", u.step))
			r.log.Info("harness: agent response had errors", "step", u.step, "errors", strings.Join(resp.Errors, "; "))
			continue
		}
		if resp.Analysis != "" {
			u.analysis = resp.Analysis
		}
		u.progress(fmt.Sprintf("step %d: %s", u.step, summarize(resp)))
		for i, c := range resp.Commands {
			if err := u.term.Send(u.ctx, c.Keystrokes); err != nil {
				if u.ctx.Err() != nil {
					return u.finishCtx()
				}
				if !u.term.Alive() {
					// The shell exited (or the port failed) while typing;
					// the next step starts a new one and says so.
					u.r.log.Info("harness: terminal gone while typing", "step", u.step, "command", i+1, "err", err)
					break
				}
				return u.finish("error", fmt.Sprintf("Stopped at step %d: cannot type into the terminal: %v", u.step, err))
			}
			if err := sleep(u.ctx, c.Duration); err != nil {
				return u.finishCtx()
			}
		}
		if resp.TaskComplete {
			if u.pending {
				return u.finish("stop", fmt.Sprintf("Task complete (confirmed at step %d).", u.step))
			}
			u.pending, u.confirm = true, true
		} else {
			u.pending = false
		}
		if len(resp.Warnings) > 0 {
			u.feedback = warningBlock(resp)
		}
	}
}

// screen reads the terminal's screen. When the terminal is gone (the
// shell exited, the port failed) it starts a new one and tells the agent
// so in the next request.
func (u *run) screen() (string, error) {
	screen, err := u.term.Screen(u.ctx)
	if err == nil || u.term.Alive() {
		if err != nil {
			return "", fmt.Errorf("cannot read the terminal: %w", err)
		}
		return screen, nil
	}
	t, _, err := u.r.terminal(u.ctx, u.slot, u.dir)
	if err != nil {
		return "", fmt.Errorf("the terminal is gone and a new one failed to start: %w", err)
	}
	u.term = t
	u.r.waitReady(u.ctx, t)
	if u.r.kind == TargetSerial {
		u.note = "Note: the serial console was reopened.\n\n"
	} else {
		u.note = "Note: the shell exited; a new shell was started in the work directory.\n\n"
	}
	screen, err = t.Screen(u.ctx)
	if err != nil {
		return "", fmt.Errorf("cannot read the terminal: %w", err)
	}
	return screen, nil
}

func (u *run) finish(reason, outcome string) agent.Result {
	text := outcome
	if u.analysis != "" {
		text = u.analysis + "\n\n" + outcome
	}
	u.r.log.Info("harness: run finished", "session", u.key, "steps", u.step, "finish_reason", reason, "outcome", outcome)
	return agent.Result{Text: text, FinishReason: reason}
}

func (u *run) finishCtx() agent.Result {
	switch context.Cause(u.ctx) {
	case errMaxDuration:
		return u.finish("timeout", fmt.Sprintf("Stopped at step %d: the task took longer than %s (the time limit).", u.step, u.r.maxDuration))
	case errClosed:
		return u.finish("cancelled", "Stopped: the harness is shutting down.")
	}
	if u.step == 0 {
		return u.finish("cancelled", "Cancelled before it started.")
	}
	return u.finish("cancelled", fmt.Sprintf("Cancelled at step %d.", u.step))
}

// runAgent runs the agent command once: request on stdin, response from
// stdout. The agent and everything it started are killed when it exits,
// when the step times out and when ctx ends.
func (r *Runner) runAgent(ctx context.Context, dir, key string, step int, request string) (string, error) {
	sctx, cancel := context.WithTimeoutCause(ctx, r.stepTimeout, errStepTimeout)
	defer cancel()
	cmd := procs.Command("/bin/sh", r.cfg.Command)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv("TERMLINK_STEP", "TERMLINK_SESSION"),
		"TERMLINK_STEP="+strconv.Itoa(step), "TERMLINK_SESSION="+key)
	cmd.Stdin = strings.NewReader(request)
	out := &capWriter{max: r.opt.MaxResponseBytes}
	errTail := &tailWriter{max: 1024}
	cmd.Stdout, cmd.Stderr = out, errTail
	cmd.WaitDelay = time.Second
	if err := r.opt.Procs.Start(cmd); err != nil {
		return "", failf("cannot start the agent: %v", err)
	}
	pid := cmd.Process.Pid
	stop := context.AfterFunc(sctx, func() { _ = procs.KillGroup(pid) })
	err := cmd.Wait()
	stop()
	_ = procs.KillGroup(pid) // whatever it left running
	r.opt.Procs.Done(pid)
	switch {
	case ctx.Err() != nil:
		return "", context.Cause(ctx)
	case sctx.Err() != nil && context.Cause(sctx) == errStepTimeout:
		return "", failf("the agent did not answer within %s (the step timeout); it and everything it started were killed", r.stepTimeout)
	case out.overflow:
		return "", failf("the agent printed more than %d bytes", r.opt.MaxResponseBytes)
	case err != nil:
		msg := "the agent failed: " + err.Error()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if code := ee.ExitCode(); code >= 0 {
				msg = fmt.Sprintf("the agent exited with status %d", code)
			} else {
				msg = "the agent was killed (" + ee.String() + ")"
			}
		}
		if tail := strings.TrimSpace(errTail.String()); tail != "" {
			msg += ": " + tail
		}
		return "", failf("%s", msg)
	}
	return out.String(), nil
}

// capWriter keeps up to max bytes; more is an overflow, and an error that
// makes exec stop reading (the agent then gets EPIPE).
type capWriter struct {
	max      int
	buf      []byte
	overflow bool
}

var errOverflow = errors.New("output too large")

func (w *capWriter) Write(p []byte) (int, error) {
	if len(w.buf)+len(p) > w.max {
		w.overflow = true
		return 0, errOverflow
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *capWriter) String() string { return string(w.buf) }

// tailWriter keeps the last max bytes written.
type tailWriter struct {
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string { return string(w.buf) }
