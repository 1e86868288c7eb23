package terminal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"termlink/server/agent"
	"termlink/server/agent/procs"
	"termlink/server/config"
)

// Defaults of Options.
const (
	DefaultMaxLineBytes   = 1 << 20
	DefaultMaxStderrBytes = 64 << 10
	DefaultKillGrace      = 200 * time.Millisecond
	DefaultShell          = "/bin/sh"
)

// Finish reasons of a Result (the link package's values).
const (
	finishStop      = "stop"
	finishError     = "error"
	finishTimeout   = "timeout"
	finishCancelled = "cancelled"
)

// Options tune a Runner beyond its config.
type Options struct {
	Logger *slog.Logger // default slog.Default(); log frames go here too
	// MaxLineBytes is the longest rich-mode stdout line (without its
	// newline); a longer one ends the run with an error. Default 1 MiB.
	MaxLineBytes int
	// MaxStderrBytes is how much of stderr is kept for the reply; the rest
	// is read and counted. Default 64 KiB.
	MaxStderrBytes int
	// KillGrace is how long processes the agent left behind may hold its
	// stdout or stderr open after it exited before its process group is
	// killed. Default 200ms.
	KillGrace time.Duration
	// Shell runs the command as Shell -c COMMAND when it has shell
	// syntax; a command of plain words is run without it. Default
	// "/bin/sh".
	Shell string
	// Procs records the agents' process groups for the reaping after a
	// crash; nil records nothing (agents still die with the server).
	Procs *procs.Registry

	hooks testHooks
	// Push takes the text of a rich-mode "notice" line (notice.go); nil
	// drops it.
	Push func(sessionKey, text string)
	// ProgressInterval is the least time between two progress updates
	// passed on: progress frames are coalesced (latest wins) before they
	// reach the bus. Default agent.DefaultProgressInterval (250ms).
	ProgressInterval time.Duration
}

// Runner runs a Terminal Protocol v1 agent, one process per message. It
// implements agent.Runner and is safe for concurrent use.
type Runner struct {
	name      string
	cfg       config.TerminalAgent
	opt       Options
	log       *slog.Logger
	timeout   time.Duration
	providers map[string]EnvelopeProvider // read-only after New
	argv      argvTemplate                // the command without a shell; nil: Shell -c

	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close
	runs    sync.WaitGroup
}

var _ agent.Runner = (*Runner)(nil)

// New returns the runner of the terminal agent called name. Zero values of
// cfg get the config package's defaults (timeout 120 s, protocol "plain",
// output 4 MiB); note that the zero PassMedia is false. It fails for an
// empty command, an unknown protocol or negative limits. cfg.Enabled is
// not checked: whether a channel may use the agent is the config's
// business.
func New(name string, cfg config.TerminalAgent, opt Options) (*Runner, error) {
	fail := func(format string, a ...any) (*Runner, error) {
		return nil, fmt.Errorf("terminal agent %q: %s", name, fmt.Sprintf(format, a...))
	}
	switch {
	case strings.TrimSpace(cfg.Command) == "":
		return fail("command is empty")
	case strings.ContainsRune(cfg.Command, 0):
		return fail("command contains a NUL byte")
	case cfg.Timeout < 0:
		return fail("timeout must not be negative, got %d", cfg.Timeout)
	case cfg.MaxOutputBytes < 0:
		return fail("maxOutputBytes must not be negative, got %d", cfg.MaxOutputBytes)
	case opt.MaxLineBytes < 0, opt.MaxStderrBytes < 0, opt.KillGrace < 0, opt.ProgressInterval < 0:
		return fail("options must not be negative")
	}
	switch cfg.Protocol {
	case "":
		cfg.Protocol = "plain"
	case "plain", "rich":
	default:
		return fail(`protocol must be "plain" or "rich", got %q`, cfg.Protocol)
	}
	for k, v := range cfg.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fail("invalid env variable %q", k)
		}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = config.DefaultTerminalTimeout
	}
	if cfg.MaxOutputBytes == 0 {
		cfg.MaxOutputBytes = config.DefaultMaxOutputBytes
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.MaxLineBytes == 0 {
		opt.MaxLineBytes = DefaultMaxLineBytes
	}
	if opt.MaxStderrBytes == 0 {
		opt.MaxStderrBytes = DefaultMaxStderrBytes
	}
	if opt.KillGrace == 0 {
		opt.KillGrace = DefaultKillGrace
	}
	if opt.Shell == "" {
		opt.Shell = DefaultShell
	}
	env := make(map[string]string, len(cfg.Env))
	for k, v := range cfg.Env {
		env[k] = v
	}
	cfg.Env = env
	timeout := time.Duration(math.MaxInt64)
	if int64(cfg.Timeout) < math.MaxInt64/int64(time.Second) {
		timeout = time.Duration(cfg.Timeout) * time.Second
	}
	argv, _ := splitCommand(cfg.Command)
	return &Runner{
		name: name, cfg: cfg, opt: opt, timeout: timeout, argv: argv,
		log:       opt.Logger.With("agent", name),
		providers: envelopeProviders(cfg.Providers),
		closing:   make(chan struct{}),
	}, nil
}

// Close kills the processes of the runs in flight and waits for those runs
// to return. Run after Close returns an error result.
func (r *Runner) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.closing)
	}
	r.mu.Unlock()
	r.runs.Wait()
	return nil
}

func (r *Runner) enter() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.runs.Add(1)
	return true
}

// Run runs the agent once for req. It returns when the agent process has
// exited and its output is read: at the latest, the timeout, ctx's end or
// Close, plus the kill grace. progress, which may be nil, gets the text of
// each progress frame as it arrives, on another goroutine, never after Run
// returned.
func (r *Runner) Run(ctx context.Context, req agent.Request, progress agent.Progress) agent.Result {
	if !r.enter() {
		return agent.Result{Text: fmt.Sprintf("agent %s is stopped", r.name), FinishReason: finishError}
	}
	defer r.runs.Done()
	if ctx.Err() != nil {
		return agent.Result{Text: "cancelled", FinishReason: finishCancelled}
	}
	log := r.log.With("session", req.SessionKey, "message_id", req.MessageID)
	if req.RunID != "" {
		log = log.With("run_id", req.RunID)
	}
	if req.Workspace == "" {
		return errorResult("agent %s: no workspace directory", r.name)
	}
	ws, err := filepath.Abs(req.Workspace)
	if err != nil {
		return errorResult("agent %s: workspace %q: %v", r.name, req.Workspace, err)
	}
	userDir := UserDataDir(ws, req.ChatID)
	if err := os.MkdirAll(userDir, 0o700); err != nil {
		log.Error("cannot create the user data directory", "dir", userDir, "err", err)
		return errorResult("agent %s: cannot create the user data directory: %v", r.name, err)
	}
	env := Envelope{
		Version: ProtocolVersion, Text: req.Text, Channel: req.ChannelID, ChatID: req.ChatID,
		SessionKey: req.SessionKey, Workspace: ws, UserDataDir: userDir, Providers: r.providers,
	}
	if r.cfg.PassMedia && len(req.Media) > 0 {
		env.Media = req.Media
	}
	payload, err := env.Marshal()
	if err != nil {
		return errorResult("agent %s: cannot encode the envelope: %v", r.name, err)
	}
	if progress != nil {
		// 10,000 progress lines must not cost 10,000 frames.
		c := agent.NewCoalescer(progress, r.opt.ProgressInterval)
		defer c.Stop()
		progress = c.Progress
	}
	s := &runState{r: r, log: log, req: req, progress: progress, workspace: ws, payload: payload,
		mediaSeen: map[string]bool{}, stream: streamText{out: req.Stream}}
	return s.run(ctx)
}

func errorResult(format string, a ...any) agent.Result {
	return agent.Result{Text: fmt.Sprintf(format, a...), FinishReason: finishError}
}

// How a run was ended by the runner rather than by the agent.
const (
	endTimeout   = "timeout"
	endCancelled = "cancelled"
	endClosed    = "closed"
)

// runState is one run. The output fields are written by the stdout and
// stderr readers and read after they finished.
type runState struct {
	r         *Runner
	log       *slog.Logger
	req       agent.Request
	progress  agent.Progress
	workspace string
	payload   []byte
	pid       int

	// stdout
	outBytes  int64
	messages  []string
	deltas    strings.Builder // the delta frames' texts
	stream    streamText
	plain     bytes.Buffer
	errs      []Frame
	media     []string
	mediaSeen map[string]bool
	failure   string // output limit hit

	// stderr
	stderr     []byte
	stderrMore int64

	// questions (an agent configured with "questions"): stdin stays open
	// for the answers, written after the envelope (enveloped).
	stdin     *os.File
	enveloped chan struct{}
	askCtx    context.Context
	askStop   context.CancelFunc
	asks      sync.WaitGroup
	stdinMu   sync.Mutex // one line at a time on stdin
	asking    bool       // a question is open (stdinMu)
}

func (s *runState) kill() {
	if err := procs.KillGroup(s.pid); err != nil {
		s.log.Warn("cannot kill the agent's process group", "pid", s.pid, "err", err)
	}
}

func (s *runState) run(ctx context.Context) agent.Result {
	r := s.r
	// The process's descriptors (its pipes too) come out of the server's
	// budget: wait for room before making the pipes.
	ticket, err := r.opt.Procs.Reserve(ctx)
	if err != nil {
		return errorResult("agent %s: %v", r.name, err)
	}
	defer ticket.Release()
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (rd, wr *os.File, err error) {
		rd, wr, err = os.Pipe()
		if err == nil {
			files = append(files, rd, wr)
		}
		return rd, wr, err
	}
	inR, inW, err1 := pipe()
	outR, outW, err2 := pipe()
	errR, errW, err3 := pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		closeAll()
		return errorResult("agent %s: cannot make pipes: %v", r.name, err)
	}
	cmd := r.command(s.req.Text)
	cmd.Dir = s.workspace
	cmd.Env = mergeEnv(os.Environ(), r.cfg.Env)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	start := time.Now()
	err = r.opt.Procs.StartReserved(ticket, cmd)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		closeAll()
		s.log.Error("cannot start the agent", "err", err)
		return errorResult("agent %s: cannot start %s: %v", r.name, r.opt.Shell, err)
	}
	s.pid = cmd.Process.Pid
	s.log.Debug("agent started", "pid", s.pid)

	s.stdin, s.enveloped = inW, make(chan struct{})
	s.askCtx, s.askStop = context.WithCancel(ctx)
	defer s.askStop()
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		s.writeStdin(inW)
	}()
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		defer outR.Close()
		if r.cfg.Protocol == "rich" {
			s.readRich(outR)
		} else {
			s.readPlain(outR)
		}
	}()
	go func() {
		defer readers.Done()
		defer errR.Close()
		s.readStderr(errR)
	}()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status is in cmd.ProcessState
		close(exited)
	}()

	timer := time.NewTimer(r.timeout)
	defer timer.Stop()
	ended := ""
	select {
	case <-exited:
	case <-timer.C:
		ended = endTimeout
	case <-ctx.Done():
		ended = endCancelled
	case <-r.closing:
		ended = endClosed
	}
	if ended != "" {
		s.log.Info("killing the agent", "reason", ended, "pid", s.pid)
		s.kill()
	}
	<-exited
	s.askStop() // the agent is gone: its open question closes

	// The agent has exited; what it left behind may still hold its output.
	drained := make(chan struct{})
	go func() {
		readers.Wait()
		close(drained)
	}()
	grace := time.NewTimer(r.opt.KillGrace)
	defer grace.Stop()
	select {
	case <-drained:
	case <-grace.C:
		s.r.opt.hooks.grace()
		s.log.Info("processes the agent left behind hold its output open; killing its process group", "pid", s.pid)
		s.kill()
		s.drainAfterKill(drained, grace, outR, errR)
	}
	s.askStop() // an open question closes with its run
	inW.Close() // unblocks a write the agent never read
	s.asks.Wait()
	<-stdinDone
	r.opt.Procs.Done(s.pid) // a detached process left in the group keeps the marker

	res := s.result(ended, cmd.ProcessState)
	s.log.Debug("agent finished", "pid", s.pid, "exit", cmd.ProcessState.String(),
		"finish_reason", res.FinishReason, "duration", time.Since(start))
	return res
}

// testHooks let a test see a run's steps; nil ones do nothing.
type testHooks struct {
	graceEnded   func() // each time a kill grace period ends
	readStart    func() // in the stdout reader, before its first read
	readsStopped func() // before the run closes the pipes it was reading
}

func (h testHooks) grace() {
	if h.graceEnded != nil {
		h.graceEnded()
	}
}

func (h testHooks) read() {
	if h.readStart != nil {
		h.readStart()
	}
}

// maxDrain bounds how long a run keeps reading output the agent wrote
// before it exited, once its process group is killed: a reader the
// machine is slow to schedule may need more than a grace period.
const maxDrain = 30 * time.Second

// drainAfterKill waits for the readers after the agent's process group
// was killed. Whatever still holds the output open is then outside the
// group; the pipes are closed (their reading stopped) only once a grace
// period passes with nothing left unread in them: bytes still in a pipe
// are the agent's output, and a slow reader takes them all (at most
// maxDrain).
func (s *runState) drainAfterKill(drained <-chan struct{}, grace *time.Timer, outR, errR *os.File) {
	deadline := time.Now().Add(maxDrain)
	for {
		grace.Reset(s.r.opt.KillGrace)
		select {
		case <-drained:
			return
		case <-grace.C:
			s.r.opt.hooks.grace()
		}
		if (unread(outR) > 0 || unread(errR) > 0) && time.Now().Before(deadline) {
			continue
		}
		// Held by a process outside the group: stop reading.
		s.log.Warn("a process outside the agent's group holds its output open; no longer reading it", "pid", s.pid)
		if s.r.opt.hooks.readsStopped != nil {
			s.r.opt.hooks.readsStopped()
		}
		outR.Close()
		errR.Close()
		<-drained
		return
	}
}

// unread returns how many bytes wait in the pipe f (FIONREAD, Linux's
// TIOCINQ); 0 when f is closed or cannot be asked. It does not take f
// out of the runtime's poller (f.Fd would).
func unread(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
	return n
}

// command returns the command that runs the agent for text: the
// program itself when the command has no shell syntax, else Shell -c
// with {message} quoted. Both run under the procs guard, which looks the
// program up as sh does.
func (r *Runner) command(text string) *exec.Cmd {
	if r.argv != nil {
		argv := r.argv.argv(text)
		return procs.Exec(argv[0], argv[1:]...)
	}
	return procs.Command(r.opt.Shell, ExpandCommand(r.cfg.Command, text))
}

// writeStdin writes the envelope and closes stdin. An agent that exits
// without reading it is fine.
func (s *runState) writeStdin(w *os.File) {
	s.stdinMu.Lock()
	_, err := w.Write(s.payload)
	s.stdinMu.Unlock()
	close(s.enveloped)
	if !s.r.cfg.Questions { // else stdin stays open for the answers until the run ends
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, os.ErrClosed) {
		s.log.Debug("writing the envelope to the agent's stdin", "err", err)
	}
}

// fail ends the run for an output limit.
func (s *runState) fail(msg string) {
	s.failure = msg
	s.log.Warn("agent output limit hit; killing the agent", "limit", msg, "pid", s.pid)
	s.kill()
}

func (s *runState) readRich(f *os.File) {
	s.r.opt.hooks.read()
	limit := int64(s.r.cfg.MaxOutputBytes)
	maxLine := s.r.opt.MaxLineBytes
	br := bufio.NewReaderSize(f, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			s.outBytes += int64(len(chunk))
			if s.outBytes > limit {
				s.fail("agent output over " + sizeString(limit))
				return
			}
			n := len(line) + len(chunk)
			if chunk[len(chunk)-1] == '\n' {
				n--
			}
			if n > maxLine {
				s.fail("agent output line longer than " + sizeString(int64(maxLine)))
				return
			}
			if len(line) == 0 && err == nil {
				s.handleLine(chunk) // a whole line in the reader's buffer
				continue
			}
			line = append(line, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if len(line) > 0 {
			s.handleLine(line)
			line = line[:0]
		}
		if err != nil {
			s.readDone("stdout", err)
			return
		}
	}
}

func (s *runState) readPlain(f *os.File) {
	s.r.opt.hooks.read()
	limit := int64(s.r.cfg.MaxOutputBytes)
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			s.outBytes += int64(n)
			if s.outBytes > limit {
				s.fail("agent output over " + sizeString(limit))
				return
			}
			s.plain.Write(buf[:n])
		}
		if err != nil {
			s.readDone("stdout", err)
			return
		}
	}
}

func (s *runState) readStderr(f *os.File) {
	keepMax := s.r.opt.MaxStderrBytes
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		keep := min(n, keepMax-len(s.stderr))
		s.stderr = append(s.stderr, buf[:keep]...)
		s.stderrMore += int64(n - keep)
		if err != nil {
			s.readDone("stderr", err)
			return
		}
	}
}

func (s *runState) readDone(what string, err error) {
	if err != io.EOF && !errors.Is(err, os.ErrClosed) {
		s.log.Warn("reading the agent's "+what, "err", err)
	}
}

// handleLine handles one rich-mode stdout line. It does not keep line.
func (s *runState) handleLine(line []byte) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	f, ok := ParseFrame(line)
	if !ok {
		s.plain.Write(line)
		s.plain.WriteByte('\n')
		return
	}
	switch f.Type {
	case FrameMessage:
		if t := strings.TrimSpace(f.Text); t != "" {
			s.messages = append(s.messages, f.Text)
		}
		for _, p := range f.Media {
			s.frameMedia(p)
		}
	case FrameProgress:
		if s.progress != nil && f.Text != "" {
			s.progress(f.Text)
		}
	case FrameError:
		s.errs = append(s.errs, f)
		s.log.Info("agent error frame", "text", f.Text, "code", f.Code)
		if s.req.Event != nil {
			s.req.Event("agent_error", preview(strings.TrimSpace(f.Code+" "+f.Text)))
		}
	case FrameLog:
		s.log.Log(context.Background(), logLevel(f.Level), "agent log", "text", f.Text)
	case FrameDelta:
		if f.Problem != "" {
			s.log.Warn("agent frame dropped: "+f.Problem, "line", preview(string(line)))
			if s.req.Event != nil {
				s.req.Event("agent_bad_frame", f.Problem)
			}
			return
		}
		s.deltas.WriteString(f.Text)
		s.stream.write(f.Text)
	case FrameNotice:
		s.pushNotice(line)
	case FrameQuestion:
		s.question(f, line) // question.go
	default:
		// A frame type of a later protocol (or "type": null): not text for
		// a screen. nanobot ignores it too.
		s.log.Info("agent frame of an unknown type dropped", "type", preview(f.Type), "line", preview(string(line)))
	}
}

// frameMedia adds a message frame's media path: relative paths are taken
// from the workspace (the agent's working directory); files that do not
// exist are left out.
func (s *runState) frameMedia(p string) {
	if p == "" {
		return
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.workspace, p)
	}
	p = filepath.Clean(p)
	if !isFile(p) {
		s.log.Warn("agent attached a file that does not exist; left out", "path", p)
		return
	}
	s.addMedia(p)
}

func (s *runState) addMedia(p string) {
	if !s.mediaSeen[p] {
		s.mediaSeen[p] = true
		s.media = append(s.media, p)
	}
}

func logLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "info":
		return slog.LevelInfo
	case "warning", "warn":
		return slog.LevelWarn
	case "error", "critical":
		return slog.LevelError
	}
	return slog.LevelDebug
}

// result composes the reply.
func (s *runState) result(ended string, ps *os.ProcessState) agent.Result {
	var parts []string
	add := func(t string) {
		if t = cleanText(t); t != "" {
			parts = append(parts, t)
		}
	}
	for _, m := range s.messages {
		add(m)
	}
	if len(s.messages) == 0 {
		// The deltas are the message; with message frames, those are the
		// whole reply and the deltas were a preview of it.
		add(s.deltas.String())
	}
	if s.failure == "" {
		plain := cleanText(s.plain.String())
		add(plain)
		for _, p := range DetectMedia(plain) {
			s.addMedia(p)
		}
	}
	for _, e := range s.errs {
		if strings.TrimSpace(e.Text) == "" {
			e.Text = "the agent reported an error"
			if e.Code != "" {
				e.Text += " (" + e.Code + ")"
			}
		}
		add(e.Text)
	}
	stderr := cleanText(string(s.stderr))
	finish := finishStop
	if len(s.errs) > 0 {
		finish = finishError
	}
	showExit := true
	switch ended {
	case endClosed:
		add("agent stopped: the server is shutting down")
		finish, showExit = finishCancelled, false
	case endCancelled:
		add("cancelled")
		finish, showExit = finishCancelled, false
	case endTimeout:
		add(fmt.Sprintf("agent timed out after %ds", s.r.cfg.Timeout))
		finish, showExit = finishTimeout, false
	default:
		quiet := s.outBytes == 0
		switch {
		case s.failure != "":
			add(s.failure)
			finish, showExit = finishError, false
		case quiet && ps.ExitCode() == 127:
			add("agent command not found: " + s.missingCommand(stderr))
		case quiet && ps.ExitCode() == 126:
			add("agent command cannot be executed: " + s.r.cfg.Command)
		}
	}
	text := strings.Join(parts, "\n\n")
	if stderr != "" {
		if s.stderrMore > 0 {
			stderr += fmt.Sprintf("\n[... %d more bytes of stderr not shown]", s.stderrMore)
		}
		text = paragraph(text, "STDERR: "+stderr)
	}
	if showExit && ps != nil {
		switch code := ps.ExitCode(); {
		case code > 0:
			text = paragraph(text, fmt.Sprintf("(exit code %d)", code))
			finish = finishError
		case code < 0:
			text = paragraph(text, "(agent ended by "+ps.String()+")")
			finish = finishError
		}
	}
	if text == "" && len(s.media) == 0 {
		text = "(no output)"
	}
	return agent.Result{Text: text, FinishReason: finish, Media: s.media}
}

// streamText passes the delta frames' texts on to Request.Stream (out;
// nil: nothing is streamed) so that what it passed stays a prefix of the
// deltas' text as the reply shows it (cleanText): newlines before the
// first other character are dropped, and trailing white space is held
// back until more text follows it.
type streamText struct {
	out     func(chunk string)
	started bool
	held    []byte // white space not passed on yet
}

func (w *streamText) write(chunk string) {
	if w.out == nil {
		return
	}
	if !w.started {
		chunk = strings.TrimLeft(chunk, "\r\n")
		if chunk == "" {
			return
		}
		w.started = true
	}
	body := strings.TrimRight(chunk, trailingSpace)
	if body == "" {
		w.held = append(w.held, chunk...)
		return
	}
	w.out(string(w.held) + body)
	w.held = append(w.held[:0], chunk[len(body):]...)
}

// trailingSpace is what cleanText trims from the end of a text.
const trailingSpace = " \t\r\n"

// missingCommand names the command the shell did not find, from its
// message ("sh: 1: foo: not found", "sh: foo: command not found"), or
// else the configured command.
func (s *runState) missingCommand(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		for _, suffix := range []string{": command not found", ": not found", ": No such file or directory"} {
			if rest, ok := strings.CutSuffix(line, suffix); ok {
				if i := strings.LastIndex(rest, ": "); i >= 0 {
					rest = rest[i+2:]
				}
				if rest != "" {
					return rest
				}
			}
		}
	}
	return s.r.cfg.Command
}

func paragraph(text, p string) string {
	if text == "" {
		return p
	}
	return text + "\n\n" + p
}

// cleanText makes agent output valid UTF-8 and trims blank lines and
// trailing white space.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.TrimRight(s, trailingSpace)
	return strings.TrimLeft(s, "\r\n")
}

func preview(s string) string {
	const limit = 120
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// sizeString writes n bytes as "N MiB", "N KiB" or "N bytes".
func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
