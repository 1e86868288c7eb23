package acp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"termlink/server/agent"
	"termlink/server/agent/procs"
	"termlink/server/agent/terminal"
)

// Limits of what is kept from an agent's stderr.
const (
	stderrLineBytes = 1 << 10 // longer stderr lines are cut
	stderrTailLines = 3       // last stderr lines quoted in error replies
	stderrLogBurst  = 50      // stderr lines logged per process
)

// proc is one agent process and its ACP connection. Its goroutines: the
// SDK's (reading stdout, dispatching notifications and requests), the
// stderr drain, the waiter (cmd.Wait, then cleanup) and the supervisor
// (idle stop, stop requests). The waiter finishes last and releases the
// process's hold on Runner.wg.
type proc struct {
	*procs.Handle // kill, stop, and why

	r   *Runner
	key string
	log *slog.Logger

	// Set by spawn and handshake, before any turn.
	cmd       *exec.Cmd
	stdin     *os.File
	stdout    *os.File
	stderr    *os.File
	conn      *sdk.ClientSideConnection
	sdkLog    *logGate // the SDK's logger, closed once p is done
	sessionID sdk.SessionId

	wmu       sync.Mutex
	stdinOnce sync.Once

	mu         sync.Mutex
	pid        int
	turn       *turn // the prompt in progress
	stderrTail []string
	stopReason string

	metaStored bool // only touched by the Run holding the process

	stopCh     chan struct{}
	stopOnce   sync.Once
	stderrDone chan struct{}
	supDone    chan struct{}
	exited     chan struct{} // the process has exited; exitErr is set
	exitErr    error
}

func newProc(r *Runner, key string) *proc {
	exited := make(chan struct{})
	return &proc{
		Handle:     procs.NewHandle(exited),
		r:          r,
		key:        key,
		log:        r.log.With("session", key),
		stopCh:     make(chan struct{}),
		stderrDone: make(chan struct{}),
		supDone:    make(chan struct{}),
		exited:     exited,
	}
}

// spawn starts the process, its connection and its goroutines.
func (p *proc) spawn(req agent.Request, cwd string) error {
	r := p.r
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for range 3 {
		rd, wr, err := os.Pipe()
		if err != nil {
			closeAll()
			return fmt.Errorf("creating a pipe: %w", err)
		}
		files = append(files, rd, wr)
	}
	inR, inW, outR, outW, errR, errW := files[0], files[1], files[2], files[3], files[4], files[5]
	var cmd *exec.Cmd
	if len(r.cfg.Args) > 0 {
		cmd = procs.Exec(r.cfg.Command, r.cfg.Args...)
	} else if words, ok := terminal.PlainWords(r.cfg.Command); ok {
		cmd = procs.Exec(words[0], words[1:]...) // no shell for plain words
	} else {
		cmd = procs.Command(r.opt.Shell, r.cfg.Command)
	}
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(),
		"TERMLINK_AGENT="+r.name,
		"TERMLINK_SESSION_KEY="+req.SessionKey,
		"TERMLINK_CHANNEL_ID="+req.ChannelID,
	)
	cmd.Env = append(cmd.Env, r.env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err := r.opt.Procs.Start(cmd)
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
	p.mu.Lock()
	p.pid = pid
	p.SetPid(pid)
	p.mu.Unlock()
	// The SDK's receive goroutine starts in NewClientSideConnection and
	// reads the logger unlocked when the agent's output ends; SetLogger
	// is unlocked too. It reads nothing until the logger is set (an
	// agent that exits at once raced here).
	out := &heldReader{r: outR, open: make(chan struct{})}
	p.conn = sdk.NewClientSideConnection(client{p}, stdinWriter{p}, out)
	p.sdkLog = &logGate{}
	p.conn.SetLogger(slog.New(gatedHandler{p.log.With("component", "acp-sdk").Handler(), p.sdkLog}))
	close(out.open)
	p.log.Info("agent started", "command", r.cfg.Command, "args", r.cfg.Args, "dir", cwd)
	go p.readStderr()
	go p.supervise()
	go p.wait()
	return nil
}

// handshake sends initialize and session/new, within startTimeout.
func (p *proc) handshake(ctx context.Context, cwd string) (agent.Result, bool) {
	ctx, cancel := context.WithTimeout(ctx, p.r.startTimeout)
	defer cancel()
	fail := func(step string, err error) (agent.Result, bool) {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return cancelledResult(), false
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errorResult(fmt.Sprintf("The agent did not answer %s within %s; check that agents.%s.acp.command starts an ACP agent.%s",
				step, p.r.startTimeout, p.r.name, p.stderrNote())), false
		}
		return p.errorReply(step, err), false
	}
	init, err := p.conn.Initialize(ctx, sdk.InitializeRequest{
		ProtocolVersion: sdk.ProtocolVersionNumber,
		// No file system and no terminal: termlink is a text screen.
		ClientCapabilities: sdk.ClientCapabilities{Fs: sdk.FileSystemCapabilities{ReadTextFile: false, WriteTextFile: false}, Terminal: false},
		ClientInfo:         &sdk.Implementation{Name: "termlink", Version: "1"},
	})
	if err != nil {
		return fail("initialize", err)
	}
	if init.ProtocolVersion != sdk.ProtocolVersionNumber {
		return errorResult(fmt.Sprintf("Use an agent that speaks ACP version %d: this one answered version %d.",
			sdk.ProtocolVersionNumber, init.ProtocolVersion)), false
	}
	sess, err := p.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: cwd, McpServers: []sdk.McpServer{}})
	if err != nil {
		return fail("session/new", err)
	}
	p.sessionID = sess.SessionId
	p.log.Info("agent ready", "acp_session", sess.SessionId, "protocol", init.ProtocolVersion)
	return agent.Result{}, true
}

// errorReply turns a failed ACP request into an error reply whose first
// line says what to do.
func (p *proc) errorReply(step string, err error) agent.Result {
	var re *sdk.RequestError
	if errors.As(err, &re) && !p.disconnected(re) {
		detail := preview(requestErrorText(re), 300)
		if re.Code == -32000 || strings.Contains(strings.ToLower(re.Message), "auth") {
			return errorResult(fmt.Sprintf("Sign the agent in or give it its API key (agents.%s.acp.env in the server config), then send the message again.\n%s: %s%s",
				p.r.name, step, detail, p.stderrNote()))
		}
		return errorResult(fmt.Sprintf("The agent answered %s with an error; send the message again, or check the agent's setup.\n%s%s", step, detail, p.stderrNote()))
	}
	// No answer: the connection ended, i.e. the process exited.
	p.awaitExit()
	what := fmt.Sprintf("the agent exited during %s (%s)", step, exitText(p.exitErr))
	if reason := p.Reason(); reason != "" {
		what = fmt.Sprintf("the agent was stopped during %s: %s", step, reason)
	}
	if step != "session/prompt" {
		return errorResult(fmt.Sprintf("Check agents.%s.acp.command in the server config: %s.%s", p.r.name, what, p.stderrNote()))
	}
	return errorResult(fmt.Sprintf("The agent stopped; send the message again to start a new one.\n%s.%s", capitalize(what), p.stderrNote()))
}

// disconnected reports whether re is the SDK's "no answer: the peer went
// away", not an error the agent sent.
func (p *proc) disconnected(re *sdk.RequestError) bool {
	if re.Code == -32603 {
		// The request could not be written: the agent's stdin is closed
		// because the agent has exited (it may exit before initialize).
		if t := requestErrorText(re); strings.Contains(t, "broken pipe") || strings.Contains(t, "file already closed") {
			return true
		}
	}
	select {
	case <-p.conn.Done():
	default:
		return false
	}
	d, ok := re.Data.(map[string]any)
	return ok && re.Code == -32603 && d["error"] == "peer disconnected before response"
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// requestErrorText is a JSON-RPC error's message and data.
func requestErrorText(re *sdk.RequestError) string {
	s := re.Message
	if re.Data != nil {
		switch d := re.Data.(type) {
		case string:
			s += ": " + d
		case map[string]any:
			for _, k := range []string{"details", "message", "error"} {
				if v, ok := d[k].(string); ok && v != "" {
					return s + ": " + v
				}
			}
			s += fmt.Sprintf(": %v", d)
		default:
			s += fmt.Sprintf(": %v", d)
		}
	}
	return s
}

// wait reaps the process, kills what it left in its group, and once every
// goroutine of p has ended releases p's hold on the runner.
func (p *proc) wait() {
	err := p.cmd.Wait()
	_ = procs.KillGroup(p.cmd.Process.Pid)
	p.r.opt.Procs.Done(p.cmd.Process.Pid)
	p.exitErr = err
	// Processes outside the group may still hold stdout or stderr open.
	deadline := time.Now().Add(time.Second)
	_ = p.stdout.SetReadDeadline(deadline)
	_ = p.stderr.SetReadDeadline(deadline)
	close(p.exited)
	p.log.Info("agent exited", "status", exitText(err), "reason", p.Reason())
	p.r.pool.Exited(p, false)
	<-p.conn.Done() // the SDK's reader has ended (EOF, or the deadline)
	<-p.stderrDone
	<-p.supDone
	p.closeStdin()
	p.stdout.Close()
	p.stderr.Close()
	p.sdkLog.close()
	p.r.pool.Done()
}

// logGate silences the SDK's logger once a process is done: the SDK's
// reader goroutine logs "connection closed" after its Done channel has
// closed, so it may still write while (or after) the runner that owns the
// log goes away. close waits for a write in progress; later ones are
// dropped.
type logGate struct {
	mu     sync.RWMutex
	closed bool
}

func (g *logGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

type gatedHandler struct {
	h slog.Handler
	g *logGate
}

func (h gatedHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h gatedHandler) Handle(ctx context.Context, r slog.Record) error {
	h.g.mu.RLock()
	defer h.g.mu.RUnlock()
	if h.g.closed {
		return nil
	}
	return h.h.Handle(ctx, r)
}

func (h gatedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return gatedHandler{h.h.WithAttrs(as), h.g}
}

func (h gatedHandler) WithGroup(name string) slog.Handler {
	return gatedHandler{h.h.WithGroup(name), h.g}
}

// readStderr drains stderr, logging lines (a bounded number) and keeping
// the last few for error replies.
func (p *proc) readStderr() {
	defer close(p.stderrDone)
	br := bufio.NewReaderSize(p.stderr, stderrLineBytes)
	logged := 0
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
				p.stderrTail = append(p.stderrTail, preview(s, 200))
				if len(p.stderrTail) > stderrTailLines {
					p.stderrTail = p.stderrTail[1:]
				}
				p.mu.Unlock()
				if logged < stderrLogBurst {
					logged++
					p.log.Info("agent stderr", "line", s)
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// stderrNote is "\nstderr: ..." quoting the agent's last stderr lines.
func (p *proc) stderrNote() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.stderrTail) == 0 {
		return ""
	}
	return "\nstderr: " + strings.Join(p.stderrTail, " | ")
}

// supervise stops the process when idle and carries out stop requests.
func (p *proc) supervise() {
	defer close(p.supDone)
	idle := time.NewTimer(p.r.idleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-p.exited:
			return
		case <-p.stopCh:
			p.shutdown()
			return
		case <-idle.C:
			if d := p.r.pool.IdleCheck(p, p.r.idleTimeout); d > 0 {
				idle.Reset(d)
				continue
			}
			p.log.Info("stopping idle agent", "idle", p.r.idleTimeout)
			p.SetReason("agent was idle")
			p.shutdown()
			return
		}
	}
}

// RequestStop asks the supervisor to stop the process (pool.Member).
func (p *proc) RequestStop(reason string) {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		p.stopReason = reason
		p.mu.Unlock()
		close(p.stopCh)
	})
}

// shutdown stops the process: cancel a running prompt, close stdin, wait
// StopGrace, SIGTERM the group, wait StopGrace, SIGKILL it.
func (p *proc) shutdown() {
	p.mu.Lock()
	t := p.turn
	reason := p.stopReason
	p.mu.Unlock()
	if reason != "" {
		p.SetReason(reason)
	}
	if t != nil {
		t.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), p.r.opt.WriteTimeout)
		_ = p.conn.Cancel(ctx, sdk.CancelNotification{SessionId: p.sessionID})
		cancel()
	}
	p.closeStdin()
	p.StopGracefully(p.r.opt.StopGrace)
}

// Dying reports whether the process has exited or is being stopped
// (pool.Member).
func (p *proc) Dying() bool {
	select {
	case <-p.exited:
		return true
	case <-p.stopCh:
		return true
	default:
	}
	return p.Reason() != ""
}

// awaitExit waits for the process to exit (killing it if it lingers) and
// for its stderr to be read.
func (p *proc) awaitExit() {
	p.AwaitExit(2*time.Second, "agent closed its stdout but kept running")
	<-p.stderrDone
}

func (p *proc) closeStdin() {
	p.stdinOnce.Do(func() { p.stdin.Close() })
}

// stdinWriter is the SDK's writer: every write has a deadline, and an
// agent that does not read its stdin for WriteTimeout is killed.
type stdinWriter struct{ p *proc }

func (w stdinWriter) Write(b []byte) (int, error) {
	p := w.p
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.stdin.SetWriteDeadline(time.Now().Add(p.r.opt.WriteTimeout)); err != nil {
		return 0, fmt.Errorf("writing to the agent's stdin: %w", err)
	}
	n, err := p.stdin.Write(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		msg := fmt.Sprintf("agent stopped reading its stdin (a write timed out after %s)", p.r.opt.WriteTimeout)
		p.log.Warn(msg + "; killing it")
		p.Kill(msg)
	}
	return n, err
}

// storeMeta keeps the agent's ACP session id in the session's metadata,
// once per process.
func (p *proc) storeMeta(ctx context.Context, req agent.Request) {
	if req.UpdateMeta == nil || p.metaStored || p.sessionID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	id := string(p.sessionID)
	if err := req.UpdateMeta(ctx, func(meta map[string]any) { meta[MetaSessionID] = id }); err != nil {
		p.log.Warn("cannot keep the agent's session id in the session metadata", "error", err)
		return
	}
	p.metaStored = true
}

// exitText names how a process ended, from cmd.Wait's error.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// heldReader reads r once open is closed.
type heldReader struct {
	r    io.Reader
	open chan struct{}
}

func (h *heldReader) Read(b []byte) (int, error) {
	<-h.open
	return h.r.Read(b)
}
