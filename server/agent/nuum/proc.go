package nuum

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/stdio"
)

// proc is one agent process (package stdio) and its Nuum state. Its
// goroutines beyond the base's: the stdout reader (the only reader of
// stdout) and the watch (heartbeats, stdout closed).
type proc struct {
	*stdio.Proc

	r *Runner

	mu         sync.Mutex
	turn       *turn // the turn in progress
	inited     bool
	sessionID  string
	staleUntil time.Time // a result before then may be that of an abandoned turn
	awaiting   bool      // a user message was written and no result has come since
	answering  bool      // the agent sent frames of the turn since the message

	ackSeen  atomic.Bool   // the agent has answered a heartbeat
	ackCh    chan struct{} // heartbeat_ack arrived (buffered 1)
	initDone chan struct{} // closed on the first system/init

	readerDone chan struct{} // stdout reader ended (EOF or error)
	watchDone  chan struct{}

	badLines stdio.Limiter
}

func newProc(r *Runner, base *stdio.Proc) *proc {
	return &proc{
		Proc:       base,
		r:          r,
		ackCh:      make(chan struct{}, 1),
		initDone:   make(chan struct{}),
		readerDone: make(chan struct{}),
		watchDone:  make(chan struct{}),
	}
}

// Begin starts the stdout reader and the watch (stdio.Protocol).
func (p *proc) Begin() {
	go p.readStdout()
	go p.watch()
}

// Ended waits for every frame to be dispatched (p.awaiting is final) and
// reports whether the agent quit on its own (stdio.Protocol): an agent may
// end itself (exit status 0) after answering, or before taking up a
// message just written (Run then retries it once); any other exit the
// runner did not ask for is a crash and delays the next start.
func (p *proc) Ended() bool {
	<-p.readerDone
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ExitErr == nil && p.inited && (!p.awaiting || !p.answering)
}

// Finish waits for the watch (stdio.Protocol).
func (p *proc) Finish() { <-p.watchDone }

// Interrupt writes an interrupt when a turn runs (stdio.Protocol).
func (p *proc) Interrupt() {
	p.mu.Lock()
	inTurn := p.turn != nil
	p.mu.Unlock()
	if inTurn {
		_ = p.write(controlFrame{Type: "control", Action: "interrupt"})
	}
}

// readStdout is the one reader of the agent's stdout.
func (p *proc) readStdout() {
	defer close(p.readerDone)
	lr := newLineReader(p.Stdout(), p.r.opt.MaxLineBytes)
	for {
		line, skipped, err := lr.next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, os.ErrClosed) {
				p.Log.Warn("reading the agent's stdout", "error", err)
			}
			return
		}
		if skipped > 0 {
			if p.badLines.Allow() {
				p.Log.Warn("agent wrote an over-long stdout line; skipped", "bytes", skipped, "max", p.r.opt.MaxLineBytes)
			}
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		f, err := parseFrame(line)
		if err != nil {
			if p.badLines.Allow() {
				p.Log.Warn("agent wrote a stdout line that is not a protocol frame; skipped", "error", err, "line", preview(string(line), 120))
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
			p.Log.Info("agent ready", "session_id", f.SessionID)
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
			p.Log.Info("agent sent a result outside a turn; ignored", "subtype", f.Subtype)
		}
		return
	}
	p.mu.Unlock()
	select {
	case t.frames <- f:
	case <-t.done:
	}
}

// watch sends heartbeats and kills a process that stops answering them or
// keeps running with stdout closed, until the process exits or is being
// stopped.
func (p *proc) watch() {
	defer close(p.watchDone)
	r := p.r
	var (
		tick     <-chan time.Time
		eof      <-chan time.Time
		pending  bool
		initDone = p.initDone
		reader   = p.readerDone
		ackTimer = time.NewTimer(time.Hour)
	)
	ackTimer.Stop()
	defer ackTimer.Stop()
	for {
		select {
		case <-p.Exited():
			return
		case <-p.Halting():
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
			p.Log.Warn("agent did not answer a heartbeat; killing it", "timeout", r.hbTimeout)
			p.Kill("agent stopped answering heartbeats")
		case <-reader:
			reader = nil
			eof = time.After(stdio.ExitDelay)
		case <-eof:
			p.Log.Warn("agent closed its stdout but keeps running; killing it")
			p.Kill("agent closed its stdout")
		}
	}
}

// write sends one frame to the agent, within WriteTimeout; an agent that
// does not read its stdin for that long is killed.
func (p *proc) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding a frame for the agent: %w", err)
	}
	b = append(b, '\n')
	if _, err := p.Write(b); err != nil {
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
	if err := p.write(userFrame(req)); err != nil {
		p.Log.Warn("cannot inject a message into the running turn", "message_id", req.MessageID, "error", err)
		p.mu.Lock()
		t.injected--
		p.mu.Unlock()
		return false
	}
	p.Log.Info("message injected into the running turn", "message_id", req.MessageID)
	return true
}

// Frames written to the agent.
type (
	controlFrame struct {
		Type   string `json:"type"`
		Action string `json:"action"`
	}
	userMessage struct {
		Role    string `json:"role"`
		Content any    `json:"content"` // a string, or []textBlock when the message has media
	}
	textBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	userMessageFrame struct {
		Type    string      `json:"type"`
		Message userMessage `json:"message"`
	}
)

// userFrame is the user message of req: its text as the content string,
// or, when the message has media, the spec's content blocks: a text block
// with the text, then one text block per file naming its absolute path
// (the spec's blocks are text, tool_use and tool_result; the agent reads
// the file itself, as a terminal agent does with its envelope's media).
func userFrame(req agent.Request) userMessageFrame {
	if len(req.Media) == 0 {
		return userMessageFrame{Type: "user", Message: userMessage{Role: "user", Content: req.Text}}
	}
	blocks := make([]textBlock, 0, 1+len(req.Media))
	if req.Text != "" {
		blocks = append(blocks, textBlock{Type: "text", Text: req.Text})
	}
	for _, m := range req.Media {
		blocks = append(blocks, textBlock{Type: "text", Text: "Attached file: " + m})
	}
	return userMessageFrame{Type: "user", Message: userMessage{Role: "user", Content: blocks}}
}
