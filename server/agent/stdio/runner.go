package stdio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/pool"
	"termlink/server/agent/procs"
)

// Finish reasons of the Results made here (the link package's values).
const (
	FinishError     = "error"
	FinishCancelled = "cancelled"
)

// Defaults of Config.
const (
	DefaultWriteTimeout      = 10 * time.Second
	DefaultStopGrace         = 2 * time.Second
	DefaultRestartBackoffMin = 500 * time.Millisecond
	DefaultRestartBackoffMax = 30 * time.Second
	DefaultShell             = "/bin/sh"
	// ExitDelay is how long stdout and stderr may stay open after the
	// process exited (held by processes that left its group).
	ExitDelay = time.Second
)

// Config is what a runner's processes share. Zero durations get the
// defaults above.
type Config struct {
	Name   string       // the agent's name (TERMLINK_AGENT, logs)
	Logger *slog.Logger // default slog.Default()
	// Command, with Args, is what runs; without Args it runs as Shell -c
	// Command, or, with PlainWords and no shell syntax in it, as its words.
	Command    string
	Args       []string
	PlainWords func(string) ([]string, bool)
	Shell      string
	Env        []string // added to the environment ("KEY=value")
	Procs      *procs.Registry

	MaxProcesses      int
	IdleTimeout       time.Duration
	WriteTimeout      time.Duration
	StopGrace         time.Duration
	RestartBackoffMin time.Duration
	RestartBackoffMax time.Duration

	// StderrNote starts the quote of the last stderr lines in an error
	// reply ("; stderr: ").
	StderrNote string
	// ClosedText answers a message that comes after Close.
	ClosedText string
	// StartFailed is the reply when the process cannot be started.
	StartFailed func(err error) string
}

// Session is a protocol's process: a type embedding *Proc (which supplies
// Base, Dying and RequestStop) and implementing Protocol.
type Session interface {
	pool.Member
	Protocol
	Base() *Proc
}

// Runner keeps one process per session (type P). Protocol runners embed
// it. It is safe for concurrent use.
type Runner[P Session] struct {
	Cfg  Config
	Log  *slog.Logger
	Pool *pool.Pool[P] // the sessions' processes

	wrap func(*Proc) P
}

// NewRunner returns the runner of cfg; wrap makes a session's process of
// the base one (it must only build the value).
func NewRunner[P Session](cfg Config, wrap func(*Proc) P) *Runner[P] {
	dur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	dur(&cfg.WriteTimeout, DefaultWriteTimeout)
	dur(&cfg.StopGrace, DefaultStopGrace)
	dur(&cfg.RestartBackoffMin, DefaultRestartBackoffMin)
	dur(&cfg.RestartBackoffMax, DefaultRestartBackoffMax)
	if cfg.RestartBackoffMax < cfg.RestartBackoffMin {
		cfg.RestartBackoffMax = cfg.RestartBackoffMin
	}
	if cfg.Shell == "" {
		cfg.Shell = DefaultShell
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StartFailed == nil {
		cfg.StartFailed = func(err error) string { return "cannot start the agent: " + err.Error() }
	}
	log := cfg.Logger.With("agent", cfg.Name)
	return &Runner[P]{Cfg: cfg, Log: log, wrap: wrap,
		Pool: pool.New[P](cfg.MaxProcesses, cfg.RestartBackoffMin, cfg.RestartBackoffMax, log)}
}

// Acquire returns the session's process, started and idle, marked busy,
// starting it in dir if the session has none: spawn, then open (the
// protocol's handshake; it cleans up a process it fails). When ok is
// false, res answers the message.
func (r *Runner[P]) Acquire(ctx context.Context, req agent.Request, dir string, progress agent.Progress,
	open func(ctx context.Context, p P) (agent.Result, bool)) (p P, res agent.Result, ok bool) {
	p, out := r.Pool.Acquire(ctx, req.SessionKey, func() P { return bind(r, r.wrap(r.newProc(req.SessionKey))) },
		func() { progress("waiting for a free agent process") })
	switch out {
	case pool.Cancelled:
		return p, CancelledResult(), false
	case pool.Closed:
		return p, ErrorResult(r.Cfg.ClosedText), false
	case pool.Created:
		if err := p.Base().spawn(req, dir); err != nil {
			r.Log.Error("cannot start the agent", "session", req.SessionKey, "error", err)
			r.Pool.StartFailed(p)
			return p, ErrorResult(r.Cfg.StartFailed(err)), false
		}
		if res, ok := open(ctx, p); !ok {
			return p, res, false
		}
	}
	return p, agent.Result{}, true
}

// Get returns the session's process, if it has one.
func (r *Runner[P]) Get(ctx context.Context, sessionKey string) (P, bool) {
	if ctx.Err() != nil {
		var zero P
		return zero, false
	}
	return r.Pool.Get(sessionKey)
}

// Close stops every process (interrupting a turn in progress, closing
// stdin, then SIGTERM and SIGKILL to the process group after StopGrace
// each) and waits for them and their goroutines. Runs in progress end with
// an error; later ones are refused.
func (r *Runner[P]) Close() error {
	r.Pool.Close("the agent runner was closed")
	return nil
}

// Live reports how many agent processes run (or start, or stop).
func (r *Runner[P]) Live() int { return r.Pool.Live() }

// command is the process of the configured command.
func (c *Config) command() *exec.Cmd {
	if len(c.Args) > 0 {
		return procs.Exec(c.Command, c.Args...)
	}
	if c.PlainWords != nil {
		if words, ok := c.PlainWords(c.Command); ok {
			return procs.Exec(words[0], words[1:]...) // no shell for plain words
		}
	}
	return procs.Command(c.Shell, c.Command)
}

// CheckCommand checks a configured command and its args.
func CheckCommand(command string, args ...string) error {
	switch {
	case strings.TrimSpace(command) == "":
		return errors.New("command is empty")
	case len(args) > 0 && (strings.ContainsRune(command, 0) || strings.ContainsRune(strings.Join(args, ""), 0)):
		return errors.New("command or args contain a NUL byte")
	case strings.ContainsRune(command, 0):
		return errors.New("command contains a NUL byte")
	}
	return nil
}

// ValidEnv checks "KEY=value" entries.
func ValidEnv(env []string) error {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("invalid env entry %q", kv)
		}
	}
	return nil
}

// Seconds is override if set, else the config's whole seconds v (def if 0).
func Seconds(override time.Duration, v, def int) time.Duration {
	if override > 0 {
		return override
	}
	if v == 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

// ErrorResult is an error reply.
func ErrorResult(text string) agent.Result {
	return agent.Result{Text: text, FinishReason: FinishError}
}

// CancelledResult answers a cancelled message.
func CancelledResult() agent.Result {
	return agent.Result{Text: "cancelled", FinishReason: FinishCancelled}
}

// ExitText names how a process ended, from cmd.Wait's error.
func ExitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func environ(name string, req agent.Request, extra []string) []string {
	env := append(os.Environ(),
		"TERMLINK_AGENT="+name,
		"TERMLINK_SESSION_KEY="+req.SessionKey,
		"TERMLINK_CHANNEL_ID="+req.ChannelID,
	)
	return append(env, extra...)
}
