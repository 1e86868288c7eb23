// Package acp runs agents that speak the Agent Client Protocol (ACP v1:
// JSON-RPC 2.0, one message per line, over the agent's stdin and stdout),
// agent protocol 4: Gemini CLI (gemini --acp), Claude Code through
// @zed-industries/claude-code-acp, codex-acp, goose acp. termlink is the
// ACP client ("host"), through github.com/coder/acp-go-sdk.
//
// The lifecycle is package stdio's: one long-lived process per session,
// started for the session's first message (initialize, advertising no file
// system and no terminal: a text-only screen; then session/new with the
// configured cwd, the server workspace by default), stopped after
// idleTimeout without a turn, at most maxProcesses at once (the least
// recently used idle process makes room), restarted after a crash with the
// jittered backoff of package restart. Processes run in their own process
// group and die with the server (package procs).
//
// A message is one session/prompt (its text, and each media file as a
// resource_link). session/update notifications make the reply and the
// progress: agent_message_chunk text accumulates into the reply;
// tool_call, tool_call_update and plan become short progress lines;
// agent_thought_chunk shows "thinking" once; other kinds are ignored (a
// debug log). The prompt's stopReason becomes the finish reason: end_turn
// "stop", cancelled "cancelled", max_tokens "length", max_turn_requests
// "max_turns", refusal "refusal" (devices show the reason before the text).
//
// A device cancel sends session/cancel; permission requests still open are
// answered "cancelled" (as the protocol requires), and the agent has
// InterruptWait to answer the prompt before its process is killed.
//
// session/request_permission is answered by the agent's permission policy:
// "reject" (default) picks a reject option, "allow_once" the allow_once
// option (never an "always" one), and "ask" shows the question on the
// device as a progress line with numbered options. ACP has no message
// injection: a message that arrives during a turn waits for the turn,
// except while a question is open: the router offers such a message to
// the running turn (Inject) and it becomes the answer (its number picks
// the option; anything else rejects), and the turn's reply answers it too.
// No answer within askTimeout rejects. A device that did not ask for
// progress cannot see a question, so "ask" rejects for it.
//
// "device" asks a device that listed "choice" (agent.Request.Ask): a
// question with the request's own options (their optionIds the ids,
// their names the labels, cut to link's bounds; the kinds stay with the
// request, whose option the answer picks), open for askTimeout, answered
// with one key. No answer in time, a device without "choice", or a
// request whose options do not fit a question (2-9, ids within
// link.MaxOptionIDBytes) gets permissionFallback ("reject", the default,
// or "allow_once"); a cancel of the turn answers "cancelled", as the
// protocol requires.
//
// Errors become error replies whose first line says what to do: a
// JSON-RPC error from the agent, an authentication failure (code -32000,
// e.g. a missing API key), a crash (with the last lines of stderr), a
// start failure.
package acp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/procs"
	"termlink/server/agent/stdio"
	"termlink/server/agent/terminal"
	"termlink/server/config"
)

// MetaSessionID is the session metadata key under which the agent's ACP
// session id is kept.
const MetaSessionID = "acp_session_id"

// Defaults of Options.
const (
	DefaultInterruptWait     = 5 * time.Second
	DefaultWriteTimeout      = stdio.DefaultWriteTimeout
	DefaultStopGrace         = stdio.DefaultStopGrace
	DefaultRestartBackoffMin = stdio.DefaultRestartBackoffMin
	DefaultRestartBackoffMax = stdio.DefaultRestartBackoffMax
	DefaultShell             = stdio.DefaultShell
	// DefaultMaxReplyBytes bounds the reply accumulated from message
	// chunks; what comes after is dropped and the reply says so.
	DefaultMaxReplyBytes = 1 << 20
)

// Finish reasons of a Result.
const (
	finishStop      = "stop"
	finishError     = stdio.FinishError
	finishCancelled = stdio.FinishCancelled
	finishLength    = "length"
	finishMaxTurns  = "max_turns"
	finishRefusal   = "refusal"
)

// Options tune a Runner beyond its config. The zero value is the default.
type Options struct {
	Logger *slog.Logger // default slog.Default()

	// Overrides of the config's whole seconds (for tests and embedders);
	// zero keeps the config's value.
	IdleTimeout  time.Duration
	StartTimeout time.Duration
	AskTimeout   time.Duration

	// InterruptWait is how long a cancelled prompt waits for the agent's
	// answer after session/cancel before the process is killed. Default 5s.
	InterruptWait time.Duration
	// WriteTimeout bounds every write to the agent's stdin; an agent that
	// does not read for that long is killed. Default 10s.
	WriteTimeout time.Duration
	// StopGrace is how long a stopped process (idle, evicted, Close) has
	// to exit after its stdin is closed before its process group gets
	// SIGTERM, and as long again before SIGKILL. Default 2s.
	StopGrace time.Duration
	// Restart backoff after crashes (package restart). Defaults 0.5s, 30s.
	RestartBackoffMin time.Duration
	RestartBackoffMax time.Duration
	// MaxReplyBytes bounds a reply. Default 1 MiB.
	MaxReplyBytes int
	// Shell runs a command without args as Shell -c COMMAND. Default /bin/sh.
	Shell string
	// Procs records the agents' process groups for the reaping after a
	// crash; nil records nothing (agents still die with the server).
	Procs *procs.Registry
}

// Runner runs an ACP agent, one process per session (package stdio). It
// implements agent.Runner and agent.Injector (for the answers to
// permission questions) and is safe for concurrent use.
type Runner struct {
	*stdio.Runner[*proc]
	name string
	cfg  config.ACPAgent
	opt  Options

	startTimeout time.Duration
	askTimeout   time.Duration
}

var (
	_ agent.Runner   = (*Runner)(nil)
	_ agent.Injector = (*Runner)(nil)
)

// New returns the runner of the ACP agent called name. Zero values in cfg
// get the config package's defaults.
func New(name string, cfg config.ACPAgent, opt Options) (*Runner, error) {
	fail := func(format string, a ...any) (*Runner, error) {
		return nil, fmt.Errorf("acp agent %q: %s", name, fmt.Sprintf(format, a...))
	}
	switch {
	case stdio.CheckCommand(cfg.Command, cfg.Args...) != nil:
		return fail("%v", stdio.CheckCommand(cfg.Command, cfg.Args...))
	case cfg.IdleTimeout < 0, cfg.MaxProcesses < 0, cfg.StartTimeout < 0, cfg.AskTimeout < 0:
		return fail("idleTimeout, maxProcesses, startTimeout and askTimeout must not be negative")
	case opt.IdleTimeout < 0, opt.StartTimeout < 0, opt.AskTimeout < 0, opt.InterruptWait < 0, opt.WriteTimeout < 0,
		opt.StopGrace < 0, opt.RestartBackoffMin < 0, opt.RestartBackoffMax < 0, opt.MaxReplyBytes < 0:
		return fail("options must not be negative")
	}
	switch cfg.Permission {
	case "":
		cfg.Permission = config.DefaultACPPermission
	case config.ACPPermissionReject, config.ACPPermissionAllowOnce, config.ACPPermissionAsk, config.ACPPermissionDevice:
	default:
		return fail("permission must be %q, %q, %q or %q, got %q", config.ACPPermissionReject, config.ACPPermissionAllowOnce, config.ACPPermissionAsk, config.ACPPermissionDevice, cfg.Permission)
	}
	switch cfg.PermissionFallback {
	case "":
		cfg.PermissionFallback = config.ACPPermissionReject
	case config.ACPPermissionReject, config.ACPPermissionAllowOnce:
	default:
		return fail("permissionFallback must be %q or %q, got %q", config.ACPPermissionReject, config.ACPPermissionAllowOnce, cfg.PermissionFallback)
	}
	var env []string
	for k, v := range cfg.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fail("invalid env entry %q", k)
		}
		env = append(env, k+"="+v)
	}
	dur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	dur(&opt.InterruptWait, DefaultInterruptWait)
	if opt.MaxReplyBytes == 0 {
		opt.MaxReplyBytes = DefaultMaxReplyBytes
	}
	seconds := stdio.Seconds
	maxProcs := cfg.MaxProcesses
	if maxProcs == 0 {
		maxProcs = config.DefaultACPMaxProcesses
	}
	r := &Runner{
		name:         name,
		cfg:          cfg,
		opt:          opt,
		startTimeout: seconds(opt.StartTimeout, cfg.StartTimeout, config.DefaultACPStartTimeout),
		askTimeout:   seconds(opt.AskTimeout, cfg.AskTimeout, config.DefaultACPAskTimeout),
	}
	r.Runner = stdio.NewRunner(stdio.Config{
		Name: name, Logger: opt.Logger, Command: cfg.Command, Args: cfg.Args, PlainWords: terminal.PlainWords,
		Shell: opt.Shell, Env: env, Procs: opt.Procs, MaxProcesses: maxProcs,
		IdleTimeout:  seconds(opt.IdleTimeout, cfg.IdleTimeout, config.DefaultACPIdleTimeout),
		WriteTimeout: opt.WriteTimeout, StopGrace: opt.StopGrace,
		RestartBackoffMin: opt.RestartBackoffMin, RestartBackoffMax: opt.RestartBackoffMax,
		StderrNote: "\nstderr: ", ClosedText: "The agent runner is shutting down; send the message again in a moment.",
		StartFailed: func(err error) string {
			return fmt.Sprintf("Check agents.%s.acp.command in the server config: the agent cannot be started.\n%v", name, err)
		},
	}, func(b *stdio.Proc) *proc { return &proc{Proc: b, r: r} })
	return r, nil
}

// Run answers req as one prompt turn of the session's agent process,
// starting the process first if the session has none.
func (r *Runner) Run(ctx context.Context, req agent.Request, progress agent.Progress) agent.Result {
	if progress == nil {
		progress = func(string) {}
	}
	cwd := r.cwd(req)
	p, res, ok := r.Acquire(ctx, req, cwd, progress, func(ctx context.Context, p *proc) (agent.Result, bool) {
		return r.start(ctx, p, cwd)
	})
	if !ok {
		return res
	}
	p.StoreMeta(ctx, req, MetaSessionID, string(p.sessionID))
	res = p.prompt(ctx, req, progress)
	r.Pool.Release(p)
	return res
}

// Inject takes req as the answer to the permission question open in req's
// session, if there is one; otherwise it returns false and the message
// waits for the turn (ACP has no injection).
func (r *Runner) Inject(ctx context.Context, req agent.Request) bool {
	p, ok := r.Get(ctx, req.SessionKey)
	if !ok {
		return false
	}
	p.mu.Lock()
	t := p.turn
	p.mu.Unlock()
	if t == nil || !t.answer(req.Text) {
		return false
	}
	p.Log.Info("message taken as the answer to the permission question", "message_id", req.MessageID)
	return true
}

// PID returns the process id of the session's agent process (the group
// leader), or 0.
func (r *Runner) PID(sessionKey string) int {
	p, ok := r.Pool.Get(sessionKey)
	if !ok {
		return 0
	}
	return p.PID()
}

// start does the handshake of p's process, just spawned in cwd.
func (r *Runner) start(ctx context.Context, p *proc, cwd string) (agent.Result, bool) {
	if res, ok := p.handshake(ctx, cwd); !ok {
		r.Pool.MarkStopping(p)
		p.Kill("the handshake failed")
		p.awaitExit()
		return res, false
	}
	return agent.Result{}, true
}

// cwd is the agent's working directory and ACP session cwd.
func (r *Runner) cwd(req agent.Request) string {
	dir := req.Workspace
	if dir == "" {
		dir, _ = os.Getwd()
	}
	if c := r.cfg.Cwd; c != "" {
		if filepath.IsAbs(c) {
			return filepath.Clean(c)
		}
		return filepath.Join(dir, c)
	}
	return dir
}

var (
	errorResult     = stdio.ErrorResult
	cancelledResult = stdio.CancelledResult
	exitText        = stdio.ExitText
	preview         = stdio.Preview
)
