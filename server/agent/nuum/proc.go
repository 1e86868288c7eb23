package nuum

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/procs"
)

// Limits of what is logged from an agent.
const (
	stderrLineBytes = 1 << 10 // longer stderr lines are skipped (their length is logged)
	stderrTailLines = 3       // last stderr lines quoted in error replies
	logBurst        = 50      // log lines per process per logWindow, stderr and bad stdout each
	logWindow       = 10 * time.Second
)

// proc is one agent process. Its goroutines: the stdout reader (the only
// reader of stdout), the stderr drain, the waiter (cmd.Wait, then cleanup)
// and the supervisor (heartbeats, idle stop, stop requests). The waiter
// finishes last and releases the process's hold on Runner.wg.
type proc struct {
	r   *Runner
	key string
	log *slog.Logger

	// Set by spawn before the goroutines start.
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File
	stderr *os.File

	// Guarded by r.mu.
	pid      int
	busy     bool // a Run holds the process
	stopping bool // the runner stopped it: its exit is no crash
	started  time.Time
	lastUsed time.Time

	wmu       sync.Mutex // serializes writes to stdin
	stdinOnce sync.Once

	mu         sync.Mutex
	turn       *turn // the turn in progress
	inited     bool
	sessionID  string
	staleUntil time.Time // a result before then may be that of an abandoned turn
	awaiting   bool      // a user message was written and no result has come since
	answering  bool      // the agent sent frames of the turn since the message
	reason     string    // why the runner killed or stopped the process; first wins
	stderrTail []string
	stopReason string

	metaStored bool // only touched by the Run holding the process

	ackSeen  atomic.Bool   // the agent has answered a heartbeat
	ackCh    chan struct{} // heartbeat_ack arrived (buffered 1)
	initDone chan struct{} // closed on the first system/init
	stopCh   chan struct{} // closed by requestStop
	stopOnce sync.Once

	readerDone chan struct{} // stdout reader ended (EOF or error)
	stderrDone chan struct{}
	supDone    chan struct{}
	exited     chan struct{} // the process has exited; exitErr is set
	exitErr    error

	badLines  limiter
	errLines  limiter
	exitDelay time.Duration // how long stdout may stay open after the process exited
}

func newProc(r *Runner, key string) *proc {
	return &proc{
		r:          r,
		key:        key,
		log:        r.log.With("session", key),
		ackCh:      make(chan struct{}, 1),
		initDone:   make(chan struct{}),
		stopCh:     make(chan struct{}),
		readerDone: make(chan struct{}),
		stderrDone: make(chan struct{}),
		supDone:    make(chan struct{}),
		exited:     make(chan struct{}),
		exitDelay:  time.Second,
	}
}

// spawn starts the process and its goroutines.
func (p *proc) spawn(req agent.Request) error {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return fmt.Errorf("creating the stdin pipe: %w", err)
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return fmt.Errorf("creating the stdout pipe: %w", err)
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return fmt.Errorf("creating the stderr pipe: %w", err)
	}
	cmd := procs.Command(p.r.opt.Shell, p.r.command)
	cmd.Dir = req.Workspace
	cmd.Env = append(os.Environ(),
		"TERMLINK_AGENT="+p.r.name,
		"TERMLINK_SESSION_KEY="+req.SessionKey,
		"TERMLINK_CHANNEL_ID="+req.ChannelID,
	)
	cmd.Env = append(cmd.Env, p.r.opt.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err = p.r.opt.Procs.Start(cmd)
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
	p.log = p.log.With("pid", pid)
	p.r.mu.Lock()
	p.pid = pid
	p.started = time.Now()
	p.lastUsed = p.started
	p.r.mu.Unlock()
	p.log.Info("agent started", "command", p.r.command, "dir", req.Workspace)
	go p.readStdout()
	go p.readStderr()
	go p.supervise()
	go p.wait()
	return nil
}

// wait reaps the process, kills what it left in its group, and once every
// goroutine of p has ended releases p's hold on the runner.
func (p *proc) wait() {
	err := p.cmd.Wait()
	// Kill what the agent left in its group. The group id cannot be reused
	// while such processes live; if none do, this finds nothing.
	_ = procs.KillGroup(p.cmd.Process.Pid)
	p.r.opt.Procs.Done(p.cmd.Process.Pid)
	p.exitErr = err
	// Processes outside the group may still hold stdout or stderr open.
	deadline := time.Now().Add(p.exitDelay)
	_ = p.stdout.SetReadDeadline(deadline)
	_ = p.stderr.SetReadDeadline(deadline)
	close(p.exited)
	p.log.Info("agent exited", "status", exitText(err), "reason", p.killReason())
	<-p.readerDone // every frame is dispatched: p.awaiting is final
	p.r.exited(p)
	<-p.stderrDone
	<-p.supDone
	p.closeStdin()
	p.stdout.Close()
	p.stderr.Close()
	p.r.wg.Done()
}

// readStdout is the one reader of the agent's stdout.
func (p *proc) readStdout() {
	defer close(p.readerDone)
	lr := newLineReader(p.stdout, p.r.opt.MaxLineBytes)
	for {
		line, skipped, err := lr.next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, os.ErrClosed) {
				p.log.Warn("reading the agent's stdout", "error", err)
			}
			return
		}
		if skipped > 0 {
			if p.badLines.allow() {
				p.log.Warn("agent wrote an over-long stdout line; skipped", "bytes", skipped, "max", p.r.opt.MaxLineBytes)
			}
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		f, err := parseFrame(line)
		if err != nil {
			if p.badLines.allow() {
				p.log.Warn("agent wrote a stdout line that is not a protocol frame; skipped", "error", err, "line", preview(string(line), 120))
			}
			continue
		}
		p.dispatch(f)
	}
}

// dispatch handles a frame on the reader goroutine: heartbeat acks and init
// here, the rest goes to the turn in progress.
func (p *proc) dispatch(f frame) {
	k := f.kind()
	switch k {
	case kindHeartbeatAck:
		p.ackSeen.Store(true)
		select {
		case p.ackCh <- struct{}{}:
		default:
		}
		return
	case kindInit:
		p.mu.Lock()
		first := !p.inited
		p.inited = true
		if f.SessionID != "" {
			p.sessionID = f.SessionID
		}
		p.mu.Unlock()
		if first {
			p.log.Info("agent ready", "session_id", f.SessionID)
			close(p.initDone)
		}
		return
	}
	p.mu.Lock()
	if k == kindResult {
		p.awaiting = false
	}
	p.answering = true
	t := p.turn
	if t == nil {
		stale := k == kindResult && time.Now().Before(p.staleUntil)
		if stale {
			p.staleUntil = time.Time{}
		}
		push := k == kindAssistant && !p.awaiting && !time.Now().Before(p.staleUntil)
		p.mu.Unlock()
		if push {
			p.push(f)
		}
		if k == kindResult && !stale {
			p.log.Info("agent sent a result outside a turn; ignored", "subtype", f.Subtype)
		}
		return
	}
	p.mu.Unlock()
	select {
	case t.frames <- f:
	case <-t.done:
	}
}

// readStderr drains stderr, logging lines (rate-limited) and keeping the
// last few for error replies.
func (p *proc) readStderr() {
	defer close(p.stderrDone)
	lr := newLineReader(p.stderr, stderrLineBytes)
	for {
		line, skipped, err := lr.next()
		if err != nil {
			return
		}
		var s string
		if skipped > 0 {
			s = fmt.Sprintf("(%d-byte line)", skipped)
		} else {
			s = strings.ToValidUTF8(strings.TrimSpace(string(line)), "?")
			if s == "" {
				continue
			}
		}
		p.mu.Lock()
		p.stderrTail = append(p.stderrTail, preview(s, 200))
		if len(p.stderrTail) > stderrTailLines {
			p.stderrTail = p.stderrTail[1:]
		}
		p.mu.Unlock()
		if p.errLines.allow() {
			p.log.Info("agent stderr", "line", s)
		}
	}
}

// stderrNote is "; stderr: ..." quoting the agent's last stderr lines, or "".
func (p *proc) stderrNote() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.stderrTail) == 0 {
		return ""
	}
	return "; stderr: " + strings.Join(p.stderrTail, " | ")
}

// supervise sends heartbeats, kills a process that stops answering them or
// keeps running with stdout closed, stops it when idle, and carries out
// stop requests.
func (p *proc) supervise() {
	defer close(p.supDone)
	r := p.r
	var (
		tick      <-chan time.Time
		eof       <-chan time.Time
		pending   bool
		initDone  = p.initDone
		reader    = p.readerDone
		ackTimer  = time.NewTimer(time.Hour)
		idleTimer = time.NewTimer(r.idleTimeout)
	)
	ackTimer.Stop()
	defer ackTimer.Stop()
	defer idleTimer.Stop()
	for {
		select {
		case <-p.exited:
			return
		case <-p.stopCh:
			p.shutdown()
			return
		case <-initDone:
			initDone = nil
			ticker := time.NewTicker(r.hbInterval)
			defer ticker.Stop()
			tick = ticker.C
		case <-tick:
			if pending {
				continue
			}
			if p.write(controlFrame{Type: "control", Action: "heartbeat"}) != nil {
				continue // the process is dying or was killed for not reading
			}
			pending = true
			ackTimer.Reset(r.hbTimeout)
		case <-p.ackCh:
			pending = false
			ackTimer.Stop()
		case <-ackTimer.C:
			if !pending {
				continue
			}
			pending = false
			if r.opt.HeartbeatAckOptional && !p.ackSeen.Load() {
				continue
			}
			p.log.Warn("agent did not answer a heartbeat; killing it", "timeout", r.hbTimeout)
			p.kill("agent stopped answering heartbeats")
		case <-idleTimer.C:
			if d := r.idleCheck(p); d > 0 {
				idleTimer.Reset(d)
				continue
			}
			p.log.Info("stopping idle agent", "idle", r.idleTimeout)
			p.setReason("agent was idle")
			p.shutdown()
			return
		case <-reader:
			reader = nil
			eof = time.After(p.exitDelay)
		case <-eof:
			p.log.Warn("agent closed its stdout but keeps running; killing it")
			p.kill("agent closed its stdout")
		}
	}
}

// requestStop asks the supervisor to stop the process gracefully.
func (p *proc) requestStop(reason string) {
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
func (p *proc) shutdown() {
	p.mu.Lock()
	inTurn := p.turn != nil
	reason := p.stopReason
	p.mu.Unlock()
	if reason != "" {
		p.setReason(reason)
	}
	if inTurn {
		_ = p.write(controlFrame{Type: "control", Action: "interrupt"})
	}
	p.closeStdin()
	grace := p.r.opt.StopGrace
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return
	case <-t.C:
	}
	p.signalGroup(false)
	t.Reset(grace)
	select {
	case <-p.exited:
		return
	case <-t.C:
	}
	p.kill("agent did not exit when stopped")
	<-p.exited
}

// kill kills the process group at once, recording why.
func (p *proc) kill(reason string) {
	p.setReason(reason)
	p.signalGroup(true)
}

// signalGroup sends SIGKILL (or SIGTERM) to the process group, unless the
// process has been reaped: its id may then belong to someone else.
func (p *proc) signalGroup(kill bool) {
	select {
	case <-p.exited:
		return
	default:
	}
	if kill {
		_ = procs.KillGroup(p.cmd.Process.Pid)
	} else {
		_ = procs.TerminateGroup(p.cmd.Process.Pid)
	}
}

func (p *proc) setReason(reason string) {
	p.mu.Lock()
	if p.reason == "" {
		p.reason = reason
	}
	p.mu.Unlock()
}

func (p *proc) killReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reason
}

// dying reports whether the process has exited or is being killed. Callers
// hold r.mu or not; it reads only channels and p.mu.
func (p *proc) dying() bool {
	select {
	case <-p.exited:
		return true
	case <-p.stopCh:
		return true
	default:
	}
	return p.killReason() != ""
}

// awaitExit waits for the process to exit, killing it if it still runs
// after a while (it may have closed stdout only), and for its stderr to be
// read (for stderrNote; bounded by the read deadline set at exit).
func (p *proc) awaitExit() {
	t := time.NewTimer(2 * p.exitDelay)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.kill("agent closed its stdout")
		<-p.exited
	}
	<-p.stderrDone
}

func (p *proc) closeStdin() {
	p.stdinOnce.Do(func() { p.stdin.Close() })
}

// write sends one frame to the agent, within WriteTimeout; an agent that
// does not read its stdin for that long is killed.
func (p *proc) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding a frame for the agent: %w", err)
	}
	b = append(b, '\n')
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.stdin.SetWriteDeadline(time.Now().Add(p.r.opt.WriteTimeout)); err != nil {
		return fmt.Errorf("writing to the agent's stdin: %w", err)
	}
	if _, err := p.stdin.Write(b); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			msg := fmt.Sprintf("agent stopped reading its stdin (a write timed out after %s)", p.r.opt.WriteTimeout)
			p.log.Warn(msg + "; killing it")
			p.kill(msg)
		}
		return fmt.Errorf("writing to the agent's stdin: %w", err)
	}
	return nil
}

// inject writes req's text to the agent if a turn is open for injection.
func (p *proc) inject(req agent.Request) bool {
	p.mu.Lock()
	t := p.turn
	if t == nil || !t.open {
		p.mu.Unlock()
		return false
	}
	t.injected++
	p.awaiting = true
	p.mu.Unlock()
	if err := p.write(userFrame(req.Text)); err != nil {
		p.log.Warn("cannot inject a message into the running turn", "message_id", req.MessageID, "error", err)
		p.mu.Lock()
		t.injected--
		p.mu.Unlock()
		return false
	}
	p.log.Info("message injected into the running turn", "message_id", req.MessageID)
	return true
}

// storeMeta keeps the agent's session id in the session's metadata, once
// per process.
func (p *proc) storeMeta(ctx context.Context, req agent.Request) {
	if req.UpdateMeta == nil || p.metaStored {
		return
	}
	p.mu.Lock()
	id := p.sessionID
	p.mu.Unlock()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := req.UpdateMeta(ctx, func(meta map[string]any) { meta[MetaSessionID] = id }); err != nil {
		p.log.Warn("cannot keep the agent's session id in the session metadata", "error", err)
		return
	}
	p.metaStored = true
}

// Frames written to the agent.
type (
	controlFrame struct {
		Type   string `json:"type"`
		Action string `json:"action"`
	}
	userMessage struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	userMessageFrame struct {
		Type    string      `json:"type"`
		Message userMessage `json:"message"`
	}
)

func userFrame(text string) userMessageFrame {
	return userMessageFrame{Type: "user", Message: userMessage{Role: "user", Content: text}}
}

// limiter allows logBurst events per logWindow.
type limiter struct {
	mu         sync.Mutex
	start      time.Time
	n          int
	suppressed int
}

func (l *limiter) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.start) >= logWindow {
		l.start, l.n, l.suppressed = now, 0, 0
	}
	l.n++
	if l.n > logBurst {
		l.suppressed++
		return false
	}
	return true
}
