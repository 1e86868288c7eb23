package stdio

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"termlink/server/agent"
	"termlink/server/agent/procs"
)

// Limits of what is kept and logged from an agent's stderr.
const (
	stderrLineBytes = 1 << 10 // longer stderr lines are cut
	stderrTailLines = 3       // last stderr lines quoted in error replies
	logBurst        = 50      // log lines per process per logWindow
	logWindow       = 10 * time.Second
)

// Protocol is what a protocol adds to a process. The base calls its
// methods from its own goroutines; none may call back into the pool.
type Protocol interface {
	// Begin starts the protocol's goroutines (its stdout reader) on the
	// process just started, before the base's.
	Begin()
	// Interrupt ends a turn in progress, if any: the process is being
	// stopped (idle, evicted, Close). Stdin closes right after.
	Interrupt()
	// Ended is called by the waiter once the process has exited (ExitErr
	// is set); it reports whether the agent quit on its own,
	// which is no crash and delays no restart. It may wait for the
	// stdout reader to end.
	Ended() (quit bool)
	// Finish waits for the protocol's goroutines to end; the pool has
	// heard of the exit, stdout's read deadline is set.
	Finish()
}

// Proc is one agent process: its pipes and the base's goroutines (the
// stderr drain, the supervisor, the waiter). Protocols embed it. The
// waiter finishes last and releases the process's hold on the pool.
type Proc struct {
	*procs.Handle // kill, stop, and why

	Key string
	Log *slog.Logger

	cfg    *Config
	proto  Protocol
	exited func(quit bool) // tells the pool
	done   func()          // releases the pool's hold
	// idleLeft is how long p has before the idle stop (0: stop now).
	idleLeft func(idle time.Duration) time.Duration

	// Set by spawn before the goroutines start.
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File
	stderr *os.File

	wmu       sync.Mutex // serializes writes to stdin
	stdinOnce sync.Once

	mu         sync.Mutex
	pid        int
	started    time.Time
	stderrTail []string
	stopReason string

	metaStored bool // only touched by the Run holding the process

	stopCh     chan struct{} // closed by RequestStop
	stopOnce   sync.Once
	halt       chan struct{} // closed when the supervisor stops the process
	stderrDone chan struct{}
	supDone    chan struct{}
	exitCh     chan struct{} // the process has exited; ExitErr is set
	// ExitErr is cmd.Wait's error, set before Exited closes.
	ExitErr error

	errLines Limiter
}

func (r *Runner[P]) newProc(key string) *Proc {
	exited := make(chan struct{})
	p := &Proc{
		Handle:     procs.NewHandle(exited),
		Key:        key,
		Log:        r.Log.With("session", key),
		cfg:        &r.Cfg,
		stopCh:     make(chan struct{}),
		halt:       make(chan struct{}),
		stderrDone: make(chan struct{}),
		supDone:    make(chan struct{}),
		exitCh:     exited,
	}
	return p
}

// bind ties s's base to its protocol and to r's pool.
func bind[P Session](r *Runner[P], s P) P {
	p := s.Base()
	p.proto = s
	p.exited = func(quit bool) { r.Pool.Exited(s, quit) }
	p.idleLeft = func(idle time.Duration) time.Duration { return r.Pool.IdleCheck(s, idle) }
	p.done = r.Pool.Done
	return s
}

// Base returns p (for Session).
func (p *Proc) Base() *Proc { return p }

// Stdout is the agent's stdout, for the protocol's one reader. Reads end
// (os.ErrDeadlineExceeded) ExitDelay after the process exited.
func (p *Proc) Stdout() *os.File { return p.stdout }

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exitCh }

// Halting is closed when the supervisor starts stopping the process (a
// stop request or the idle stop).
func (p *Proc) Halting() <-chan struct{} { return p.halt }

// PID is the process id of the group leader, 0 before the start.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Started is when the process was started.
func (p *Proc) Started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// spawn starts the process in dir and its goroutines.
func (p *Proc) spawn(req agent.Request, dir string) error {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, name := range []string{"stdin", "stdout", "stderr"} {
		rd, wr, err := os.Pipe()
		if err != nil {
			closeAll()
			return fmt.Errorf("creating the %s pipe: %w", name, err)
		}
		files = append(files, rd, wr)
	}
	inR, inW, outR, outW, errR, errW := files[0], files[1], files[2], files[3], files[4], files[5]
	cfg := p.cfg
	cmd := cfg.command()
	cmd.Dir = dir
	cmd.Env = environ(cfg.Name, req, cfg.Env)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err := cfg.Procs.Start(cmd)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return err
	}
	p.cmd, p.stdin, p.stdout, p.stderr = cmd, inW, outR, errR
	pid := cmd.Process.Pid
	p.Log = p.Log.With("pid", pid)
	p.mu.Lock()
	p.pid = pid
	p.SetPid(pid)
	p.started = time.Now()
	p.mu.Unlock()
	if len(cfg.Args) > 0 {
		p.Log.Info("agent started", "command", cfg.Command, "args", cfg.Args, "dir", dir)
	} else {
		p.Log.Info("agent started", "command", cfg.Command, "dir", dir)
	}
	p.proto.Begin()
	go p.readStderr()
	go p.supervise()
	go p.wait()
	return nil
}

// wait reaps the process, kills what it left in its group, and once every
// goroutine of p has ended releases p's hold on the pool.
func (p *Proc) wait() {
	err := p.cmd.Wait()
	// Kill what the agent left in its group. The group id cannot be reused
	// while such processes live; if none do, this finds nothing.
	_ = procs.KillGroup(p.cmd.Process.Pid)
	p.cfg.Procs.Done(p.cmd.Process.Pid)
	p.ExitErr = err
	// Processes outside the group may still hold stdout or stderr open.
	deadline := time.Now().Add(ExitDelay)
	_ = p.stdout.SetReadDeadline(deadline)
	_ = p.stderr.SetReadDeadline(deadline)
	close(p.exitCh)
	p.Log.Info("agent exited", "status", ExitText(err), "reason", p.Reason())
	p.exited(p.proto.Ended())
	p.proto.Finish()
	<-p.stderrDone
	<-p.supDone
	p.closeStdin()
	p.stdout.Close()
	p.stderr.Close()
	p.done()
}

// readStderr drains stderr, logging lines (rate-limited) and keeping the
// last few for error replies. A long line is cut ("…").
func (p *Proc) readStderr() {
	defer close(p.stderrDone)
	br := bufio.NewReaderSize(p.stderr, stderrLineBytes)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			long := errors.Is(err, bufio.ErrBufferFull)
			s := strings.ToValidUTF8(strings.TrimSpace(string(line)), "?")
			for errors.Is(err, bufio.ErrBufferFull) { // skip the rest of a long line
				_, err = br.ReadSlice('\n')
			}
			if long {
				s += "…"
			}
			if s != "" {
				p.mu.Lock()
				p.stderrTail = append(p.stderrTail, Preview(s, 200))
				if len(p.stderrTail) > stderrTailLines {
					p.stderrTail = p.stderrTail[1:]
				}
				p.mu.Unlock()
				if p.errLines.Allow() {
					p.Log.Info("agent stderr", "line", s)
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// StderrNote quotes the agent's last stderr lines after Config.StderrNote,
// or is "".
func (p *Proc) StderrNote() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.stderrTail) == 0 {
		return ""
	}
	return p.cfg.StderrNote + strings.Join(p.stderrTail, " | ")
}

// supervise stops the process when idle and carries out stop requests.
func (p *Proc) supervise() {
	defer close(p.supDone)
	idle := p.cfg.IdleTimeout
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case <-p.exitCh:
			return
		case <-p.stopCh:
			p.shutdown()
			return
		case <-timer.C:
			if d := p.idleLeft(idle); d > 0 {
				timer.Reset(d)
				continue
			}
			p.Log.Info("stopping idle agent", "idle", idle)
			p.SetReason("agent was idle")
			p.shutdown()
			return
		}
	}
}

// RequestStop asks the supervisor to stop the process gracefully
// (pool.Member).
func (p *Proc) RequestStop(reason string) {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		p.stopReason = reason
		p.mu.Unlock()
		close(p.stopCh)
	})
}

// shutdown stops the process: interrupt a running turn, close stdin, wait
// StopGrace, SIGTERM the group, wait StopGrace, SIGKILL it. It returns
// once the process has exited.
func (p *Proc) shutdown() {
	close(p.halt)
	p.mu.Lock()
	reason := p.stopReason
	p.mu.Unlock()
	if reason != "" {
		p.SetReason(reason)
	}
	p.proto.Interrupt()
	p.closeStdin()
	p.StopGracefully(p.cfg.StopGrace)
}

// Dying reports whether the process has exited or is being stopped
// (pool.Member). It reads only channels and p's locks.
func (p *Proc) Dying() bool {
	select {
	case <-p.exitCh:
		return true
	case <-p.stopCh:
		return true
	default:
	}
	return p.Reason() != ""
}

// AwaitExit waits for the process to exit, killing it if it still runs
// after a while (it may have closed stdout only), and for its stderr to be
// read (for StderrNote; bounded by the read deadline set at exit).
func (p *Proc) AwaitExit() {
	p.AwaitExitFor(2*ExitDelay, "agent closed its stdout")
}

// AwaitExitFor is AwaitExit with its own wait and kill reason.
func (p *Proc) AwaitExitFor(d time.Duration, reason string) {
	p.Handle.AwaitExit(d, reason)
	<-p.stderrDone
}

func (p *Proc) closeStdin() {
	p.stdinOnce.Do(func() { p.stdin.Close() })
}

// Write writes b to the agent's stdin, within WriteTimeout; an agent that
// does not read its stdin for that long is killed. Writes are serialized.
func (p *Proc) Write(b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.stdin.SetWriteDeadline(time.Now().Add(p.cfg.WriteTimeout)); err != nil {
		return 0, err
	}
	n, err := p.stdin.Write(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		msg := fmt.Sprintf("agent stopped reading its stdin (a write timed out after %s)", p.cfg.WriteTimeout)
		p.Log.Warn(msg + "; killing it")
		p.Kill(msg)
	}
	return n, err
}

// StoreMeta keeps the agent's session id under key in the session's
// metadata, once per process (only the Run holding p calls it).
func (p *Proc) StoreMeta(ctx context.Context, req agent.Request, key, id string) {
	if req.UpdateMeta == nil || p.metaStored || id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := req.UpdateMeta(ctx, func(meta map[string]any) { meta[key] = id }); err != nil {
		p.Log.Warn("cannot keep the agent's session id in the session metadata", "error", err)
		return
	}
	p.metaStored = true
}

// Preview is s on one line, at most n runes ("…" marks a cut).
func Preview(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Limiter allows logBurst (50) log lines per logWindow (10 s); the zero
// value is ready.
type Limiter struct {
	mu    sync.Mutex
	start time.Time
	n     int
}

// Allow reports whether one more line may be logged now.
func (l *Limiter) Allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.start) >= logWindow {
		l.start, l.n = now, 0
	}
	l.n++
	return l.n <= logBurst
}
