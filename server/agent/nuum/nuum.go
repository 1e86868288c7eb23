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
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"termlink/server/agent"
	"termlink/server/agent/procs"
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
	DefaultWriteTimeout      = 10 * time.Second
	DefaultStopGrace         = 2 * time.Second
	DefaultRestartBackoffMin = 500 * time.Millisecond
	DefaultRestartBackoffMax = 30 * time.Second
	DefaultMaxLineBytes      = 1 << 20
	DefaultShell             = "/bin/sh"
)

// Finish reasons of a Result (the link package's values).
const (
	finishStop      = "stop"
	finishError     = "error"
	finishCancelled = "cancelled"
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

// Runner runs a Nuum agent, one process per session. It implements
// agent.Runner and agent.Injector and is safe for concurrent use.
type Runner struct {
	name    string
	command string
	opt     Options
	log     *slog.Logger

	idleTimeout  time.Duration
	startTimeout time.Duration
	hbInterval   time.Duration
	hbTimeout    time.Duration
	maxProcs     int

	mu      sync.Mutex
	closed  bool
	procs   map[string]*proc        // by session key; a stopping process is no longer here
	live    int                     // processes reserved, running or stopping
	crashes map[string]*crashRecord // restart backoff by session key
	notify  chan struct{}           // closed and replaced when procs, live or closed change
	wg      sync.WaitGroup          // one per process, done when all its goroutines are
}

type crashRecord struct {
	backoff *backoff.ExponentialBackOff // the delays of crashes in a row
	until   time.Time                   // no restart before
}

// restartJitter is the randomization factor of restart delays, so that
// agents that crashed together do not restart together.
const restartJitter = 0.5

// newRestartBackoff returns the restart delays after crashes in a row:
// doubling, each randomized by ±restartJitter, and always within
// [RestartBackoffMin, RestartBackoffMax]. The intervals are placed so that
// the randomized values span the bounds: the first in
// [Min, 3*Min], the last in [Max/3, Max] (cenkalti's randomized value is
// interval*(1±factor)).
func (r *Runner) newRestartBackoff() *backoff.ExponentialBackOff {
	lo, hi := r.opt.RestartBackoffMin, r.opt.RestartBackoffMax
	initial := time.Duration(float64(lo) / (1 - restartJitter))
	maxInterval := max(time.Duration(float64(hi)/(1+restartJitter)), initial)
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(initial),
		backoff.WithMaxInterval(maxInterval),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(restartJitter),
		backoff.WithMaxElapsedTime(0), // never gives up
	)
}

// next is the delay before the next restart.
func (c *crashRecord) next(lo, hi time.Duration) time.Duration {
	return min(max(c.backoff.NextBackOff(), lo), hi)
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
	case strings.TrimSpace(cfg.Command) == "":
		return fail("command is empty")
	case strings.ContainsRune(cfg.Command, 0):
		return fail("command contains a NUL byte")
	case cfg.IdleTimeout < 0, cfg.MaxProcesses < 0, cfg.StartTimeout < 0, cfg.HeartbeatSeconds < 0, cfg.HeartbeatTimeout < 0:
		return fail("idleTimeout, maxProcesses, startTimeout, heartbeatSeconds and heartbeatTimeout must not be negative")
	case opt.IdleTimeout < 0, opt.StartTimeout < 0, opt.HeartbeatInterval < 0, opt.HeartbeatTimeout < 0,
		opt.InterruptWait < 0, opt.InterruptedGrace < 0, opt.FollowUpWait < 0, opt.WriteTimeout < 0,
		opt.StopGrace < 0, opt.RestartBackoffMin < 0, opt.RestartBackoffMax < 0, opt.MaxLineBytes < 0:
		return fail("options must not be negative")
	}
	for _, kv := range opt.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsRune(kv, 0) {
			return fail("invalid env entry %q", kv)
		}
	}
	seconds := func(override time.Duration, v, def int) time.Duration {
		if override > 0 {
			return override
		}
		if v == 0 {
			v = def
		}
		return time.Duration(v) * time.Second
	}
	dur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	dur(&opt.InterruptWait, DefaultInterruptWait)
	dur(&opt.InterruptedGrace, DefaultInterruptedGrace)
	dur(&opt.FollowUpWait, DefaultFollowUpWait)
	dur(&opt.WriteTimeout, DefaultWriteTimeout)
	dur(&opt.StopGrace, DefaultStopGrace)
	dur(&opt.RestartBackoffMin, DefaultRestartBackoffMin)
	dur(&opt.RestartBackoffMax, DefaultRestartBackoffMax)
	if opt.RestartBackoffMax < opt.RestartBackoffMin {
		opt.RestartBackoffMax = opt.RestartBackoffMin
	}
	if opt.MaxLineBytes == 0 {
		opt.MaxLineBytes = DefaultMaxLineBytes
	}
	if opt.Shell == "" {
		opt.Shell = DefaultShell
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	maxProcs := cfg.MaxProcesses
	if maxProcs == 0 {
		maxProcs = config.DefaultNuumMaxProcesses
	}
	return &Runner{
		name:         name,
		command:      cfg.Command,
		opt:          opt,
		log:          opt.Logger.With("agent", name),
		idleTimeout:  seconds(opt.IdleTimeout, cfg.IdleTimeout, config.DefaultNuumIdleTimeout),
		startTimeout: seconds(opt.StartTimeout, cfg.StartTimeout, config.DefaultNuumStartTimeout),
		hbInterval:   seconds(opt.HeartbeatInterval, cfg.HeartbeatSeconds, config.DefaultNuumHeartbeatSeconds),
		hbTimeout:    seconds(opt.HeartbeatTimeout, cfg.HeartbeatTimeout, config.DefaultNuumHeartbeatTimeout),
		maxProcs:     maxProcs,
		procs:        map[string]*proc{},
		crashes:      map[string]*crashRecord{},
		notify:       make(chan struct{}),
	}, nil
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
		p, res, ok := r.acquire(ctx, req, progress)
		if !ok {
			return res
		}
		p.storeMeta(ctx, req)
		res, retry := p.runTurn(ctx, req, progress)
		r.release(p)
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
	if ctx.Err() != nil {
		return false
	}
	r.mu.Lock()
	p := r.procs[req.SessionKey]
	closed := r.closed
	r.mu.Unlock()
	if p == nil || closed {
		return false
	}
	return p.inject(req)
}

// Close stops every process (interrupting a turn in progress, closing
// stdin, then SIGTERM and SIGKILL to the process group after StopGrace
// each) and waits for them and their goroutines. Runs in progress end with
// an error; later ones are refused.
func (r *Runner) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		for key, p := range r.procs {
			delete(r.procs, key)
			p.stopping = true
			p.requestStop("the agent runner was closed")
		}
		r.broadcastLocked()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return nil
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
	r.mu.Lock()
	out := make([]Process, 0, len(r.procs))
	procs := make([]*proc, 0, len(r.procs))
	for _, p := range r.procs {
		out = append(out, Process{SessionKey: p.key, PID: p.pid, Busy: p.busy, Started: p.started, LastUsed: p.lastUsed})
		procs = append(procs, p)
	}
	r.mu.Unlock()
	for i, p := range procs {
		p.mu.Lock()
		out[i].SessionID = p.sessionID
		p.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SessionKey < out[j].SessionKey })
	return out
}

// acquire returns the session's process, idle and marked busy, starting it
// if needed. When ok is false, res answers the message.
func (r *Runner) acquire(ctx context.Context, req agent.Request, progress agent.Progress) (p *proc, res agent.Result, ok bool) {
	key := req.SessionKey
	toldFull, toldBackoff := false, false
	for {
		if ctx.Err() != nil {
			return nil, cancelledResult(), false
		}
		var (
			delay time.Duration // wait for the restart backoff
			full  bool          // wait for a free process slot
		)
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, errorResult("the agent runner is closed"), false
		}
		wait := r.notify
		existing := r.procs[key]
		if existing == nil {
			delay = r.backoffLocked(key)
		}
		switch {
		case existing != nil:
			if !existing.busy && !existing.dying() {
				existing.busy = true
				r.mu.Unlock()
				return existing, agent.Result{}, true
			}
			// Busy (a second Run for the session) or dying: wait for it.
		case delay > 0:
			// Crashed recently: wait for the backoff.
		case r.live < r.maxProcs:
			p := newProc(r, key)
			p.busy = true
			r.procs[key] = p
			r.live++
			r.wg.Add(1)
			r.mu.Unlock()
			if res, ok := r.start(ctx, p, req); !ok {
				return nil, res, false
			}
			return p, agent.Result{}, true
		default:
			victim := r.lruIdleLocked()
			if victim == nil {
				full = true
				break
			}
			// It leaves the map now and frees its slot once it has exited.
			delete(r.procs, victim.key)
			victim.stopping = true
			victim.requestStop("making room for another session (maxProcesses reached)")
			r.log.Info("stopping the least recently used agent process", "session", victim.key, "for", key)
		}
		r.mu.Unlock()

		var timer *time.Timer
		var timerC <-chan time.Time
		if delay > 0 {
			if !toldBackoff {
				toldBackoff = true
				r.log.Info("waiting before restarting the agent", "session", key, "delay", delay)
			}
			timer = time.NewTimer(delay)
			timerC = timer.C
		}
		if full && !toldFull {
			toldFull = true
			r.log.Info("all agent processes are busy; waiting", "session", key, "maxProcesses", r.maxProcs)
			progress("waiting for a free agent process")
		}
		select {
		case <-wait:
		case <-timerC:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// release marks p idle after a turn.
func (r *Runner) release(p *proc) {
	r.mu.Lock()
	p.busy = false
	p.lastUsed = time.Now()
	r.broadcastLocked()
	r.mu.Unlock()
}

// start spawns p's process and waits for its system/init.
func (r *Runner) start(ctx context.Context, p *proc, req agent.Request) (agent.Result, bool) {
	if err := p.spawn(req); err != nil {
		r.log.Error("cannot start the agent", "session", p.key, "error", err)
		r.mu.Lock()
		if r.procs[p.key] == p {
			delete(r.procs, p.key)
		}
		r.live--
		r.recordCrashLocked(p.key)
		r.broadcastLocked()
		r.mu.Unlock()
		r.wg.Done()
		return errorResult("cannot start the agent: " + err.Error()), false
	}
	timer := time.NewTimer(r.startTimeout)
	defer timer.Stop()
	select {
	case <-p.initDone:
		return agent.Result{}, true
	case <-p.readerDone:
	case <-p.exited:
	case <-timer.C:
		msg := fmt.Sprintf("agent did not send system/init within %s", r.startTimeout)
		p.kill(msg)
		p.awaitExit()
		return errorResult(msg + p.stderrNote()), false
	case <-ctx.Done():
		r.markStopping(p)
		p.kill("the message was cancelled while the agent was starting")
		return cancelledResult(), false
	}
	// The process exited (or closed stdout) before saying init.
	p.awaitExit()
	if reason := p.killReason(); reason != "" {
		return errorResult("agent stopped before sending system/init: " + reason + p.stderrNote()), false
	}
	return errorResult(fmt.Sprintf("agent exited before sending system/init (%s)%s", exitText(p.exitErr), p.stderrNote())), false
}

// markStopping records that p's coming exit is not a crash.
func (r *Runner) markStopping(p *proc) {
	r.mu.Lock()
	p.stopping = true
	r.mu.Unlock()
}

// lruIdleLocked returns the idle process used least recently, or nil.
func (r *Runner) lruIdleLocked() *proc {
	var victim *proc
	for _, p := range r.procs {
		if p.busy || p.dying() {
			continue
		}
		if victim == nil || p.lastUsed.Before(victim.lastUsed) {
			victim = p
		}
	}
	return victim
}

// idleCheck stops p when it has been idle for idleTimeout (returning 0), or
// returns how long to wait before checking again.
func (r *Runner) idleCheck(p *proc) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs[p.key] != p || p.busy {
		return r.idleTimeout
	}
	if idle := time.Since(p.lastUsed); idle < r.idleTimeout {
		return r.idleTimeout - idle
	}
	delete(r.procs, p.key)
	p.stopping = true
	return 0
}

// exited is called once p's process has exited.
func (r *Runner) exited(p *proc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs[p.key] == p {
		delete(r.procs, p.key)
	}
	r.live--
	// An agent may end itself (exit status 0) after answering, or before
	// taking up a message just written (Run then retries it once); any other
	// exit the runner did not ask for is a crash and delays the next start.
	p.mu.Lock()
	quit := p.exitErr == nil && p.inited && (!p.awaiting || !p.answering)
	p.mu.Unlock()
	if !p.stopping && !quit && !r.closed {
		r.recordCrashLocked(p.key)
	}
	r.broadcastLocked()
}

// turnAnswered resets the session's restart backoff: its agent works.
func (r *Runner) turnAnswered(key string) {
	r.mu.Lock()
	delete(r.crashes, key)
	r.mu.Unlock()
}

func (r *Runner) recordCrashLocked(key string) {
	now := time.Now()
	for k, c := range r.crashes { // forget sessions that have not come back
		if now.Sub(c.until) > 10*r.opt.RestartBackoffMax {
			delete(r.crashes, k)
		}
	}
	c := r.crashes[key]
	if c == nil {
		c = &crashRecord{backoff: r.newRestartBackoff()}
		r.crashes[key] = c
	}
	c.until = now.Add(c.next(r.opt.RestartBackoffMin, r.opt.RestartBackoffMax))
}

// backoffLocked is how long the session must wait before its process may
// be restarted.
func (r *Runner) backoffLocked(key string) time.Duration {
	c := r.crashes[key]
	if c == nil {
		return 0
	}
	return time.Until(c.until)
}

func (r *Runner) broadcastLocked() {
	close(r.notify)
	r.notify = make(chan struct{})
}

func errorResult(text string) agent.Result {
	return agent.Result{Text: text, FinishReason: finishError}
}

func cancelledResult() agent.Result {
	return agent.Result{Text: "cancelled", FinishReason: finishCancelled}
}

// exitText names how a process ended, from cmd.Wait's error.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
