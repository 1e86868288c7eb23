// Package nuum runs agents that speak the Nuum wire protocol
// (spec/nuum-wire-protocol.md, agent protocol 2): one long-lived process
// per session, NDJSON on stdin and stdout.
//
// A session's process is started (sh -c COMMAND, in its own process group,
// in the workspace) for its first message, answers that message and the
// following ones as turns, and is stopped after idleTimeout without a turn.
// At most maxProcesses run at once; the least recently used idle one makes
// room for a new session. The runner heartbeats every process and kills one
// that stops answering; a crashed process is restarted for the next
// message, with jittered exponential backoff while it keeps crashing.
// Processes die with the server (package procs).
//
// A turn's reply is the result frame's "result" text, Nuum's final answer;
// each assistant frame is one model step, and the steps before the last
// are shown as progress (to devices that asked for progress). Only when
// the result has no text do the assistant steps, joined, make the reply.
//
// Streaming (Request.Stream, a device that listed "stream"): each
// assistant text step is streamed as it arrives, the steps joined by "\n"
// as the reply joins them; Claude Code's partial messages
// (--include-partial-messages: stream_event frames whose content_block_delta
// carries a text_delta) stream each text block as it is generated, and
// the assistant frame that then carries the block whole is not streamed
// again. A subagent's deltas (parent_tool_use_id set), tool input and
// thinking deltas are not streamed. The streamed text is the reply when
// the result has no text or equals the steps (one text step, the common
// case); when the result says something else (a turn of several steps
// whose result is its last), the final reply replaces what was streamed,
// as it does on the device. An assistant frame that does not continue the
// deltas streamed for its block stops the streaming for the turn (logged).
//
// A message that arrives while its session's turn runs can be handed to
// that turn (Inject, for the router): the agent injects it, and the turn's
// Result answers both. Cancelling a run writes an interrupt; a turn the
// agent does not end within Options.InterruptWait is ended by killing the
// process.
//
// Only the parts of the protocol that Claude Code's stream-json dialect
// shares are required to run a turn: system/init, assistant messages
// (text and tool_use blocks), tool results as user messages, and a result.
// Nuum's extras (turn_accepted, system/tool_result, queued/injected,
// interrupted, heartbeat_ack) are used when present. Claude Code knows
// neither Nuum's interrupt (such an agent is killed on cancel) nor its
// heartbeats (see Options.HeartbeatAckOptional).
package nuum

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/pool"
	"termlink/server/agent/procs"
	"termlink/server/agent/stdio"
	"termlink/server/config"
)

// MetaSessionID is the session metadata key under which the agent's own
// session id (from system/init) is kept.
const MetaSessionID = "nuum_session_id"

// Defaults of Options.
const (
	DefaultInterruptWait     = 5 * time.Second
	DefaultInterruptedGrace  = time.Second
	DefaultFollowUpWait      = 5 * time.Second
	DefaultWriteTimeout      = stdio.DefaultWriteTimeout
	DefaultStopGrace         = stdio.DefaultStopGrace
	DefaultRestartBackoffMin = stdio.DefaultRestartBackoffMin
	DefaultRestartBackoffMax = stdio.DefaultRestartBackoffMax
	DefaultMaxLineBytes      = 1 << 20
	DefaultShell             = stdio.DefaultShell
)

// Finish reasons of a Result (the link package's values).
const (
	finishStop      = "stop"
	finishError     = stdio.FinishError
	finishCancelled = stdio.FinishCancelled
	finishTimeout   = "timeout"
)

var (
	errorResult     = stdio.ErrorResult
	cancelledResult = stdio.CancelledResult
	exitText        = stdio.ExitText
	preview         = stdio.Preview
)

// Options tune a Runner beyond its config. The zero value is the default.
type Options struct {
	Logger *slog.Logger // default slog.Default()

	// Overrides of the config's whole seconds (for tests and embedders);
	// zero keeps the config's value.
	IdleTimeout       time.Duration
	StartTimeout      time.Duration
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// TurnTimeout bounds a turn: after it the turn is interrupted (as a
	// cancel would) and its reply says it timed out (FinishReason
	// "timeout"). Zero keeps the config's turnTimeout (0: no limit).
	TurnTimeout time.Duration

	// InterruptWait is how long a cancelled turn waits for the agent to
	// end the turn after the interrupt before the process is killed.
	// Default 5s.
	InterruptWait time.Duration
	// InterruptedGrace is how long a system/interrupted may go without a
	// following result before the turn ends as cancelled. Default 1s.
	InterruptedGrace time.Duration
	// FollowUpWait is how long a turn that got its result while messages
	// injected into it were not confirmed (system/injected) waits for the
	// agent to start answering them. Default 5s.
	FollowUpWait time.Duration
	// WriteTimeout bounds every write to an agent's stdin; an agent that
	// does not read for that long is killed. Default 10s.
	WriteTimeout time.Duration
	// StopGrace is how long a stopped process (idle, evicted, Close) has to
	// exit after its stdin is closed before its process group gets SIGTERM,
	// and as long again before SIGKILL. Default 2s.
	StopGrace time.Duration
	// Restart backoff after crashes: about RestartBackoffMin after the
	// first, doubling up to RestartBackoffMax, each delay randomized
	// (±50%, cenkalti/backoff) within [RestartBackoffMin,
	// RestartBackoffMax]. Defaults 0.5s and 30s.
	RestartBackoffMin time.Duration
	RestartBackoffMax time.Duration
	// MaxLineBytes is the longest stdout line read; longer ones are
	// skipped. Default 1 MiB.
	MaxLineBytes int
	// HeartbeatAckOptional spares an agent that has never answered a
	// heartbeat (Claude Code's stream-json knows none) from being killed
	// for it; once an agent answers one, it is held to answering. Default
	// false: every agent must answer, as the Nuum protocol says.
	HeartbeatAckOptional bool
	// Env is added to the agent's environment ("KEY=value").
	Env []string
	// Push takes the text of an assistant frame sent outside any turn
	// (push.go); nil drops it.
	Push func(sessionKey, text string)
	// Shell runs the command as Shell -c COMMAND. Default "/bin/sh".
	Shell string
	// Procs records the agents' process groups for the reaping after a
	// crash; nil records nothing (agents still die with the server).
	Procs *procs.Registry
}

// Runner runs a Nuum agent, one process per session (package stdio). It
// implements agent.Runner and agent.Injector and is safe for concurrent
// use.
type Runner struct {
	*stdio.Runner[*proc]
	name    string
	command string
	opt     Options

	idleTimeout  time.Duration
	startTimeout time.Duration
	hbInterval   time.Duration
	hbTimeout    time.Duration
	turnTimeout  time.Duration // 0: none
	maxProcs     int
}

var (
	_ agent.Runner   = (*Runner)(nil)
	_ agent.Injector = (*Runner)(nil)
)

// New returns the runner of the Nuum agent called name. Zero values in cfg
// get the config package's defaults. It fails for an empty command and
// negative values.
func New(name string, cfg config.NuumAgent, opt Options) (*Runner, error) {
	fail := func(format string, a ...any) (*Runner, error) {
		return nil, fmt.Errorf("nuum agent %q: %s", name, fmt.Sprintf(format, a...))
	}
	switch {
	case stdio.CheckCommand(cfg.Command) != nil:
		return fail("%v", stdio.CheckCommand(cfg.Command))
	case cfg.IdleTimeout < 0, cfg.MaxProcesses < 0, cfg.StartTimeout < 0, cfg.HeartbeatSeconds < 0, cfg.HeartbeatTimeout < 0, cfg.TurnTimeout < 0:
		return fail("idleTimeout, maxProcesses, startTimeout, heartbeatSeconds, heartbeatTimeout and turnTimeout must not be negative")
	case cfg.HeartbeatAck != "" && cfg.HeartbeatAck != config.NuumHeartbeatAckRequired && cfg.HeartbeatAck != config.NuumHeartbeatAckOptional:
		return fail("heartbeatAck must be %q or %q, got %q", config.NuumHeartbeatAckRequired, config.NuumHeartbeatAckOptional, cfg.HeartbeatAck)
	case opt.TurnTimeout < 0, opt.IdleTimeout < 0, opt.StartTimeout < 0, opt.HeartbeatInterval < 0, opt.HeartbeatTimeout < 0,
		opt.InterruptWait < 0, opt.InterruptedGrace < 0, opt.FollowUpWait < 0, opt.WriteTimeout < 0,
		opt.StopGrace < 0, opt.RestartBackoffMin < 0, opt.RestartBackoffMax < 0, opt.MaxLineBytes < 0:
		return fail("options must not be negative")
	}
	if err := stdio.ValidEnv(opt.Env); err != nil {
		return fail("%v", err)
	}
	seconds := stdio.Seconds
	dur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	dur(&opt.InterruptWait, DefaultInterruptWait)
	dur(&opt.InterruptedGrace, DefaultInterruptedGrace)
	dur(&opt.FollowUpWait, DefaultFollowUpWait)
	if opt.MaxLineBytes == 0 {
		opt.MaxLineBytes = DefaultMaxLineBytes
	}
	if cfg.HeartbeatAck == config.NuumHeartbeatAckOptional {
		opt.HeartbeatAckOptional = true
	}
	turnTimeout := opt.TurnTimeout
	if turnTimeout == 0 {
		turnTimeout = time.Duration(cfg.TurnTimeout) * time.Second
	}
	maxProcs := cfg.MaxProcesses
	if maxProcs == 0 {
		maxProcs = config.DefaultNuumMaxProcesses
	}
	r := &Runner{
		name:         name,
		command:      cfg.Command,
		opt:          opt,
		idleTimeout:  seconds(opt.IdleTimeout, cfg.IdleTimeout, config.DefaultNuumIdleTimeout),
		startTimeout: seconds(opt.StartTimeout, cfg.StartTimeout, config.DefaultNuumStartTimeout),
		hbInterval:   seconds(opt.HeartbeatInterval, cfg.HeartbeatSeconds, config.DefaultNuumHeartbeatSeconds),
		hbTimeout:    seconds(opt.HeartbeatTimeout, cfg.HeartbeatTimeout, config.DefaultNuumHeartbeatTimeout),
		turnTimeout:  turnTimeout,
		maxProcs:     maxProcs,
	}
	r.Runner = stdio.NewRunner(stdio.Config{
		Name: name, Logger: opt.Logger, Command: cfg.Command, Shell: opt.Shell, Env: opt.Env, Procs: opt.Procs,
		MaxProcesses: maxProcs, IdleTimeout: r.idleTimeout, WriteTimeout: opt.WriteTimeout, StopGrace: opt.StopGrace,
		RestartBackoffMin: opt.RestartBackoffMin, RestartBackoffMax: opt.RestartBackoffMax,
		StderrNote: "; stderr: ", ClosedText: "the agent runner is closed",
	}, func(b *stdio.Proc) *proc { return newProc(r, b) })
	return r, nil
}

// Run answers req as one turn of the session's agent process, starting the
// process first if the session has none. It returns when the agent's
// result arrives, the process dies, or ctx ends (after interrupting the
// turn; FinishReason "cancelled").
func (r *Runner) Run(ctx context.Context, req agent.Request, progress agent.Progress) agent.Result {
	if progress == nil {
		progress = func(string) {}
	}
	for attempt := 0; ; attempt++ {
		p, res, ok := r.Acquire(ctx, req, req.Workspace, progress, r.start)
		if !ok {
			return res
		}
		p.mu.Lock()
		id := p.sessionID
		p.mu.Unlock()
		p.StoreMeta(ctx, req, MetaSessionID, id)
		res, retry := p.runTurn(ctx, req, progress)
		r.Pool.Release(p)
		if !retry || attempt > 0 {
			if retry {
				res = errorResult("agent exited (exit status 0) without answering")
			}
			return res
		}
	}
}

// Inject hands req to the turn running in req's session: the message is
// written to the agent at once, which includes it in the turn in progress
// (or answers it right after), and the running turn's Result answers it
// too. It returns false, writing nothing, when the session has no turn in
// progress, the turn is ending, or the write fails.
func (r *Runner) Inject(ctx context.Context, req agent.Request) bool {
	p, ok := r.Get(ctx, req.SessionKey)
	return ok && p.inject(req)
}

// Process describes one agent process.
type Process struct {
	SessionKey string
	PID        int    // of the shell running the command (the process group leader); 0 while starting
	SessionID  string // the agent's, from system/init
	Busy       bool   // a turn is running (or the process is starting)
	Started    time.Time
	LastUsed   time.Time // end of the last turn
}

// Processes lists the sessions' processes, by session key.
func (r *Runner) Processes() []Process {
	var out []Process
	var procs []*proc
	r.Pool.Each(func(p *proc, st pool.State) {
		out = append(out, Process{SessionKey: st.Key, Busy: st.Busy, LastUsed: st.LastUsed})
		procs = append(procs, p)
	})
	for i, p := range procs {
		out[i].PID, out[i].Started = p.PID(), p.Started()
		p.mu.Lock()
		out[i].SessionID = p.sessionID
		p.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SessionKey < out[j].SessionKey })
	return out
}

// start waits for the system/init of p's process, just spawned.
func (r *Runner) start(ctx context.Context, p *proc) (agent.Result, bool) {
	timer := time.NewTimer(r.startTimeout)
	defer timer.Stop()
	select {
	case <-p.initDone:
		return agent.Result{}, true
	case <-p.readerDone:
	case <-p.Exited():
	case <-timer.C:
		msg := fmt.Sprintf("agent did not send system/init within %s", r.startTimeout)
		p.Kill(msg)
		p.AwaitExit()
		return errorResult(msg + p.StderrNote()), false
	case <-ctx.Done():
		r.Pool.MarkStopping(p)
		p.Kill("the message was cancelled while the agent was starting")
		return cancelledResult(), false
	}
	// The process exited (or closed stdout) before saying init.
	p.AwaitExit()
	if reason := p.Reason(); reason != "" {
		return errorResult("agent stopped before sending system/init: " + reason + p.StderrNote()), false
	}
	return errorResult(fmt.Sprintf("agent exited before sending system/init (%s)%s", exitText(p.ExitErr), p.StderrNote())), false
}

// timeoutResult answers a turn interrupted by the turn timeout d.
func timeoutResult(d time.Duration) agent.Result {
	return agent.Result{Text: fmt.Sprintf("the agent did not finish within %s; the turn was interrupted", d), FinishReason: finishTimeout}
}
