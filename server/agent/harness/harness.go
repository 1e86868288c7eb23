package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/procs"
	"termlink/server/config"
)

// Defaults of Options.
const (
	DefaultIdleTimeout      = 10 * time.Minute
	DefaultCols             = 160
	DefaultRows             = 40
	DefaultMaxResponseBytes = 1 << 20
)

// Options tune a Runner beyond its config block. The zero value is fine.
type Options struct {
	// Workspace is used when a Request has none; default "./workspace".
	// Work directories are {workspace}/harness/<session>.
	Workspace string
	// IdleTimeout: a session's terminal (tmux session, PTY shell or
	// serial port) is torn down after this long unused; default 10 min.
	IdleTimeout time.Duration
	// Shell is the command of the tmux and PTY terminals; default
	// "bash --noprofile --norc" (prompt "user@host:dir$ "), or "sh" when
	// there is no bash.
	Shell []string
	// Cols and Rows are the terminal size; default 160x40.
	Cols, Rows int
	// MaxResponseBytes caps what the agent may print in one step;
	// default 1 MiB. More is an agent failure.
	MaxResponseBytes int
	// TmuxPath is the tmux binary; default "tmux" from PATH. When it is
	// not found a "tmux" target falls back to "pty".
	TmuxPath string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Procs records the agents' process groups for the reaping after a
	// crash, and marks the terminals' processes (the tmux server
	// included); nil records nothing (agents still die with the server).
	Procs *procs.Registry
}

// Target kinds.
const (
	TargetTmux   = "tmux"
	TargetPTY    = "pty"
	TargetSerial = "serial"
)

var (
	errMaxDuration = errors.New("max duration reached")
	errClosed      = errors.New("harness closed")
	errStepTimeout = errors.New("step timeout")
)

// Runner is an agent.Runner for agent protocol 3 (Term Challenge): the
// server is the harness. For each message it asks the agent command for
// keystrokes, types them into the session's terminal and shows the agent
// the new screen, until the agent confirms the task is complete or a limit
// is hit. Runner is safe for concurrent use; runs of one session wait for
// each other, and a serial target is shared by all sessions.
type Runner struct {
	name        string
	cfg         config.HarnessAgent
	opt         Options
	log         *slog.Logger
	kind        string
	serialPath  string
	baud        int
	shell       []string
	shellEnv    []string // PS1 for the default shell
	tmux        *tmuxServer
	stepTimeout time.Duration
	maxDuration time.Duration

	ctx    context.Context // cancelled by Close
	cancel context.CancelCauseFunc
	seq    atomic.Int64

	mu     sync.Mutex
	closed bool
	slots  map[string]*slot
	runs   sync.WaitGroup
	reaper sync.WaitGroup
}

// slot is one terminal and the runs using it: a session's (tmux, pty) or
// everyone's (serial).
type slot struct {
	key      string
	sem      chan struct{} // held by the run using the terminal
	term     terminal      // nil when torn down; guarded by Runner.mu
	refs     int           // runs holding or waiting for sem; guarded by Runner.mu
	lastUsed time.Time     // guarded by Runner.mu
}

var runnerSeq atomic.Int64

// New returns the Runner of harness agent name. It applies the config
// defaults (target tmux, 50 steps, 1800 s, 10000 bytes, 120 s per step)
// and checks the target; a tmux target without tmux installed falls back
// to pty.
func New(name string, cfg config.HarnessAgent, opt Options) (*Runner, error) {
	if strings.TrimSpace(cfg.Command) == "" {
		return nil, fmt.Errorf("harness agent %q: command is required", name)
	}
	if cfg.Target == "" {
		cfg.Target = config.DefaultHarnessTarget
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = config.DefaultHarnessMaxSteps
	}
	if cfg.MaxDuration <= 0 {
		cfg.MaxDuration = config.DefaultHarnessMaxDuration
	}
	if cfg.ObservationBytes <= 0 {
		cfg.ObservationBytes = config.DefaultHarnessObservationBytes
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = config.DefaultHarnessStepTimeout
	}
	if opt.IdleTimeout <= 0 {
		opt.IdleTimeout = DefaultIdleTimeout
	}
	if opt.Cols <= 0 {
		opt.Cols = DefaultCols
	}
	if opt.Rows <= 0 {
		opt.Rows = DefaultRows
	}
	if opt.MaxResponseBytes <= 0 {
		opt.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if opt.Workspace == "" {
		opt.Workspace = config.DefaultWorkspace
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	r := &Runner{
		name:        name,
		cfg:         cfg,
		opt:         opt,
		log:         opt.Logger.With("agent", name),
		stepTimeout: time.Duration(cfg.StepTimeout) * time.Second,
		maxDuration: time.Duration(cfg.MaxDuration) * time.Second,
		slots:       map[string]*slot{},
	}
	r.shell = opt.Shell
	if len(r.shell) == 0 {
		if bash, err := exec.LookPath("bash"); err == nil {
			r.shell = []string{bash, "--noprofile", "--norc"}
			r.shellEnv = []string{`PS1=\u@\h:\w\$ `}
		} else {
			r.shell = []string{"/bin/sh"}
			r.shellEnv = []string{"PS1=$ "}
		}
	}
	switch {
	case cfg.Target == TargetTmux:
		path := opt.TmuxPath
		if path == "" {
			path = "tmux"
		}
		if abs, err := exec.LookPath(path); err == nil {
			r.kind = TargetTmux
			env := opt.Procs.Env(append(cleanEnv("TMUX", "TMUX_PANE"), "TERM=xterm"))
			reapStaleTmux(abs, env, r.log)
			r.tmux = &tmuxServer{
				path:   abs,
				socket: fmt.Sprintf("%s%d-%d", tmuxSocketPrefix, os.Getpid(), runnerSeq.Add(1)),
				env:    env,
			}
		} else {
			r.kind = TargetPTY
			r.log.Warn("harness: tmux not found, using a pty terminal instead", "tmux", path, "err", err)
		}
	case cfg.Target == TargetPTY:
		r.kind = TargetPTY
	default:
		p, baud, ok := cfg.Serial()
		if !ok {
			return nil, fmt.Errorf("harness agent %q: target must be \"tmux\", \"pty\" or \"serial:PATH@BAUD\", got %q", name, cfg.Target)
		}
		r.kind, r.serialPath, r.baud = TargetSerial, p, baud
	}
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	r.reaper.Add(1)
	go r.reap()
	return r, nil
}

// Target returns the kind of terminal in use: "tmux", "pty" or "serial".
func (r *Runner) Target() string { return r.kind }

// Close stops the runs in progress (their agents are killed; they finish
// "cancelled"), tears down every terminal and the tmux server, and stops
// the idle reaper. It is safe to call more than once.
func (r *Runner) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel(errClosed)
	r.runs.Wait()
	r.reaper.Wait()
	r.mu.Lock()
	var terms []terminal
	for k, s := range r.slots {
		if s.term != nil {
			terms = append(terms, s.term)
			s.term = nil
		}
		delete(r.slots, k)
	}
	r.mu.Unlock()
	var errs []error
	for _, t := range terms {
		errs = append(errs, t.Close())
	}
	if r.tmux != nil {
		r.tmux.kill()
	}
	return errors.Join(errs...)
}

// reap tears down the terminals unused for IdleTimeout.
func (r *Runner) reap() {
	defer r.reaper.Done()
	tick := min(max(r.opt.IdleTimeout/4, 10*time.Millisecond), 30*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case now := <-t.C:
			var idle []terminal
			r.mu.Lock()
			for k, s := range r.slots {
				if s.refs == 0 && now.Sub(s.lastUsed) >= r.opt.IdleTimeout {
					if s.term != nil {
						idle = append(idle, s.term)
					}
					delete(r.slots, k)
				}
			}
			r.mu.Unlock()
			for _, term := range idle {
				if err := term.Close(); err != nil {
					r.log.Warn("harness: tear down idle terminal", "err", err)
				}
			}
			if len(idle) > 0 {
				r.log.Info("harness: idle terminals torn down", "count", len(idle))
			}
		}
	}
}

// acquire returns the slot of key, holding its semaphore.
func (r *Runner) acquire(ctx context.Context, key string) (*slot, error) {
	r.mu.Lock()
	s := r.slots[key]
	if s == nil {
		s = &slot{key: key, sem: make(chan struct{}, 1)}
		r.slots[key] = s
	}
	s.refs++
	r.mu.Unlock()
	select {
	case s.sem <- struct{}{}:
		return s, nil
	case <-ctx.Done():
		r.mu.Lock()
		s.refs--
		s.lastUsed = time.Now()
		r.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (r *Runner) release(s *slot) {
	r.mu.Lock()
	s.refs--
	s.lastUsed = time.Now()
	r.mu.Unlock()
	<-s.sem
}

// terminal returns the slot's terminal, starting one when there is none or
// the old one died. fresh reports a new terminal.
func (r *Runner) terminal(ctx context.Context, s *slot, dir string) (t terminal, fresh bool, err error) {
	r.mu.Lock()
	old := s.term
	r.mu.Unlock()
	if old != nil && old.Alive() {
		return old, false, nil
	}
	if old != nil {
		_ = old.Close()
	}
	t, err = r.start(ctx, dir)
	r.mu.Lock()
	s.term = t // nil on error
	closed := r.closed
	r.mu.Unlock()
	if err == nil && closed {
		// Close ran while the terminal started; it may have missed it.
		_ = t.Close()
		return nil, false, errClosed
	}
	return t, err == nil, err
}

func (r *Runner) start(ctx context.Context, dir string) (terminal, error) {
	switch r.kind {
	case TargetTmux:
		name := "s" + strconv.FormatInt(r.seq.Add(1), 10)
		t, err := r.tmux.start(ctx, name, dir, r.shell, r.shellEnv, r.opt.Cols, r.opt.Rows)
		if err != nil {
			return nil, err
		}
		r.log.Info("harness: tmux session started", "socket", r.tmux.socket, "session", name, "dir", dir)
		return t, nil
	case TargetPTY:
		env := append(cleanEnv("TERM", "PS1", "COLUMNS", "LINES"), "TERM=xterm")
		env = append(env, r.shellEnv...)
		t, err := startPTY(r.opt.Procs, r.shell, env, dir, r.opt.Cols, r.opt.Rows)
		if err != nil {
			return nil, err
		}
		r.log.Info("harness: pty shell started", "pid", t.cmd.Process.Pid, "dir", dir)
		return t, nil
	default:
		t, err := openSerial(r.serialPath, r.baud, r.opt.Cols, r.opt.Rows)
		if err != nil {
			return nil, err
		}
		r.log.Info("harness: serial console opened", "port", r.serialPath, "baud", r.baud)
		return t, nil
	}
}

// waitReady waits until a fresh shell has drawn something (its prompt),
// at most 3 s. A serial console is left alone: a board prints nothing
// until something is typed.
func (r *Runner) waitReady(ctx context.Context, t terminal) {
	if r.kind == TargetSerial {
		_ = sleep(ctx, 100*time.Millisecond)
		return
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if s, err := t.Screen(ctx); err == nil && s != "" {
			// Let the prompt finish drawing.
			_ = sleep(ctx, 20*time.Millisecond)
			return
		}
		if sleep(ctx, 20*time.Millisecond) != nil {
			return
		}
	}
}

// cleanEnv returns the process environment without the named variables.
func cleanEnv(drop ...string) []string {
	env := os.Environ()
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, d := range drop {
			if k == d {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// WorkDir returns the work directory of a session: {workspace}/harness/
// followed by the session key with every byte outside [A-Za-z0-9._:-]
// (and a leading '.') percent-encoded, as session files are named.
func WorkDir(workspace, sessionKey string) string {
	if sessionKey == "" {
		sessionKey = "default"
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(sessionKey); i++ {
		c := sessionKey[i]
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			c == '_' || c == '-' || c == ':' || (c == '.' && i > 0) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	name := b.String()
	if len(name) > 200 {
		name = name[:180] + "-" + strconv.FormatUint(fnv64(sessionKey), 16)
	}
	return filepath.Join(workspace, "harness", name)
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ agent.Runner = (*Runner)(nil)
