package nuum

import (
	"context"
	"fmt"
	"strings"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/stdio"
)

// Lengths of previews in events and error replies, in runes.
const (
	eventPreviewRunes = 120
	errorDetailRunes  = 500
	progressRunes     = 200 // an assistant step shown as progress
)

// turn is one Run's exchange with the agent. frames and done link it to
// the stdout reader; the fields under "p.mu" link it to Inject; the rest
// belongs to the Run goroutine.
type turn struct {
	frames chan frame
	done   chan struct{} // closed when the turn no longer takes frames

	// Guarded by p.mu.
	open     bool // Inject may add messages
	injected int  // messages injected
	absorbed int  // of those, confirmed (system/injected) or answered by a follow-up result

	texts     []string
	step      string            // the latest assistant text, shown as progress once another step follows
	tools     map[string]string // tool name by tool_use id
	reported  map[string]bool   // tool_use ids whose result was reported
	thinking  bool              // "thinking" progress sent
	seen      bool              // a frame of this turn arrived
	results   int
	last      frame // the last result
	lastError string

	// Streaming to req.Stream (nil: nothing is streamed): the assistant
	// text blocks as they arrive, joined as the reply joins the steps
	// ("\n"); with Claude's partial messages, each text block's deltas
	// ahead of the assistant frame that then carries the block whole
	// (and is not streamed again).
	stream   func(chunk string)
	partial  *partialBlock   // the text block whose deltas arrive now
	partials []*partialBlock // blocks streamed from deltas, awaiting their assistant frame
	streamed bool            // some text was streamed
	diverged bool            // an assistant frame did not continue what was streamed: no more streaming
}

// partialBlock is a text block streamed from stream_event deltas.
type partialBlock struct {
	index int
	text  strings.Builder
	shown bool // streamed: it has more than white space
}

// runTurn sends req's text as a user message and collects the agent's
// answer until its result. retry reports that the process ended by itself
// (exit status 0) without taking up the message: it may be sent to a new
// process.
func (p *proc) runTurn(ctx context.Context, req agent.Request, progress agent.Progress) (res agent.Result, retry bool) {
	t := &turn{frames: make(chan frame, 64), done: make(chan struct{}), tools: map[string]string{}, reported: map[string]bool{},
		stream: req.Stream}
	p.mu.Lock()
	p.turn = t
	p.awaiting, p.answering = true, false
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		t.open = false
		if p.turn == t {
			p.turn = nil
		}
		p.mu.Unlock()
		close(t.done)
	}()
	if err := p.write(userFrame(req)); err != nil {
		// The agent is exiting or closed its stdin: either way it is done.
		if !p.Dying() {
			timer := time.NewTimer(stdio.ExitDelay)
			select {
			case <-p.Exited():
			case <-timer.C:
				p.Kill("cannot send the message to the agent: " + err.Error())
			}
			timer.Stop()
		}
		return p.diedResult(ctx, t)
	}
	p.mu.Lock()
	t.open = true
	p.mu.Unlock()

	var (
		ctxDone     = ctx.Done()
		cancelled   bool
		timedOut    bool             // cancelled by the turn timeout, not the device
		turnC       <-chan time.Time // the turn timeout
		interruptC  <-chan time.Time // InterruptWait after the interrupt
		graceC      <-chan time.Time // InterruptedGrace after system/interrupted
		graceTimer  *time.Timer
		followC     <-chan time.Time // FollowUpWait after a result, while injections are pending
		followTimer *time.Timer
	)
	stop := func(tm *time.Timer) {
		if tm != nil {
			tm.Stop()
		}
	}
	defer func() { stop(graceTimer); stop(followTimer) }()
	if d := p.r.turnTimeout; d > 0 {
		tt := time.NewTimer(d)
		defer tt.Stop()
		turnC = tt.C
		// A turn ended by its timeout says so, whichever way it ended.
		defer func() {
			if timedOut && res.FinishReason == finishCancelled {
				res = timeoutResult(d)
			}
		}()
	}
	interrupt := func() {
		ctxDone, turnC, cancelled = nil, nil, true
		p.Log.Info("interrupting the turn", "message_id", req.MessageID, "timeout", timedOut)
		_ = p.write(controlFrame{Type: "control", Action: "interrupt"})
		interruptC = time.After(p.r.opt.InterruptWait)
	}

	handle := func(f frame) (agent.Result, bool) {
		if followTimer != nil && f.kind() != kindResult {
			followTimer.Stop() // the agent is answering the injected messages
			followTimer, followC = nil, nil
		}
		switch f.kind() {
		case kindInterrupted:
			if graceTimer == nil {
				graceTimer = time.NewTimer(p.r.opt.InterruptedGrace)
				graceC = graceTimer.C
			}
		case kindResult:
			if !t.seen && p.takeStale() {
				p.Log.Info("ignored the result of an earlier, abandoned turn", "subtype", f.Subtype)
				return agent.Result{}, false
			}
			t.seen = true
			p.r.Pool.Answered(p.Key)
			stop(graceTimer)
			graceTimer, graceC = nil, nil
			t.last = f
			p.mu.Lock()
			if t.results > 0 {
				t.absorbed++ // a follow-up turn answered an injected message
			}
			t.results++
			pending := t.injected - t.absorbed
			if pending <= 0 {
				t.open = false
			}
			p.mu.Unlock()
			if pending <= 0 || cancelled {
				return t.answer(cancelled), true
			}
			stop(followTimer)
			followTimer = time.NewTimer(p.r.opt.FollowUpWait)
			followC = followTimer.C
		default:
			p.handleFrame(t, f, req, progress)
		}
		return agent.Result{}, false
	}

	for {
		select {
		case f := <-t.frames:
			if res, done := handle(f); done {
				return res, false
			}
		case <-p.readerDone:
			for {
				select {
				case f := <-t.frames:
					if res, done := handle(f); done {
						return res, false
					}
					continue
				default:
				}
				break
			}
			if cancelled {
				p.AwaitExit()
				return cancelledResult(), false
			}
			return p.diedResult(ctx, t)
		case <-ctxDone:
			interrupt()
		case <-turnC:
			timedOut = true
			interrupt()
		case <-interruptC:
			msg := fmt.Sprintf("agent did not end the turn within %s of an interrupt", p.r.opt.InterruptWait)
			p.Log.Warn(msg + "; killing it")
			p.r.Pool.MarkStopping(p)
			p.Kill(msg)
			return cancelledResult(), false
		case <-graceC:
			// system/interrupted without a result: the turn is over.
			// Its result may still come; the next turn ignores a result
			// that arrives soon and before anything else of its own.
			p.mu.Lock()
			p.staleUntil = time.Now().Add(p.r.opt.InterruptWait)
			p.mu.Unlock()
			return cancelledResult(), false
		case <-followC:
			p.Log.Info("no answer to injected messages after the result; ending the turn", "wait", p.r.opt.FollowUpWait)
			return t.answer(cancelled), false
		}
	}
}

// handleFrame handles a frame of the turn other than result and
// interrupted.
func (p *proc) handleFrame(t *turn, f frame, req agent.Request, progress agent.Progress) {
	switch f.kind() {
	case kindTurnAccepted:
		t.seen = true
		if !t.thinking {
			t.thinking = true
			progress("thinking")
		}
	case kindStreamEvent:
		t.seen = true
		p.streamEvent(t, f)
	case kindAssistant:
		t.seen = true
		t.closePartial()
		for _, b := range f.content() {
			switch b.Type {
			case "text":
				step := strings.TrimSpace(b.Text)
				if step != "" {
					t.texts = append(t.texts, b.Text)
					t.stepDone(progress)
					t.step = step
				}
				p.streamStep(t, b.Text, step != "")
			case "tool_use":
				name := b.Name
				if name == "" {
					name = "a tool"
				}
				if b.ID != "" {
					t.tools[b.ID] = b.Name
				}
				t.stepDone(progress)
				progress("using " + name)
			}
		}
	case kindUser:
		for _, b := range f.content() {
			if b.Type == "tool_result" {
				t.seen = true
				p.toolResult(t, b, req)
			}
		}
	case kindToolResult:
		if b, ok := f.toolResult(); ok {
			t.seen = true
			p.toolResult(t, b, req)
		}
	case kindInjected:
		n := f.integer("message_count")
		if n < 1 {
			n = 1
		}
		p.mu.Lock()
		t.absorbed = min(t.absorbed+n, t.injected)
		p.mu.Unlock()
	case kindError:
		t.lastError = f.errorDetail()
		if req.Event != nil && t.lastError != "" {
			req.Event("agent_error", preview(t.lastError, eventPreviewRunes))
		}
	}
}

// streamEvent streams the text deltas of a partial message (Claude
// Code's stream_event frames). A subagent's events (parent_tool_use_id
// set) and other deltas (tool input, thinking) are not the reply's text.
func (p *proc) streamEvent(t *turn, f frame) {
	if t.stream == nil {
		return
	}
	e, ok := f.streamEvent()
	if !ok || e.Nested {
		return
	}
	switch e.Type {
	case "message_start", "content_block_stop":
		t.closePartial()
	case "content_block_start":
		t.closePartial()
		if e.BlockType == "text" {
			t.partial = &partialBlock{index: e.Index}
			t.partialText(e.Text)
		}
	case "content_block_delta":
		if e.DeltaType != "text_delta" {
			return
		}
		if t.partial == nil || t.partial.index != e.Index {
			t.closePartial()
			t.partial = &partialBlock{index: e.Index}
		}
		t.partialText(e.Text)
	}
}

// partialText adds s to the block being streamed: streamed at once once
// the block has more than white space (a blank block is no step).
func (t *turn) partialText(s string) {
	b := t.partial
	b.text.WriteString(s)
	switch {
	case t.diverged:
	case b.shown:
		t.emit(s)
	case strings.TrimSpace(b.text.String()) != "":
		b.shown = true
		t.emit(t.sep() + b.text.String())
	}
}

// closePartial ends the block being streamed: it waits for its assistant
// frame.
func (t *turn) closePartial() {
	if t.partial != nil {
		t.partials = append(t.partials, t.partial)
		t.partial = nil
	}
}

// streamStep streams an assistant text block (step: it is a step of the
// reply, not blank) unless its deltas were streamed already.
func (p *proc) streamStep(t *turn, text string, step bool) {
	if t.stream == nil {
		return
	}
	var b *partialBlock
	if len(t.partials) > 0 {
		b, t.partials = t.partials[0], t.partials[1:]
	}
	if t.diverged {
		return
	}
	shown := ""
	if b != nil && b.shown {
		shown = b.text.String()
	}
	switch {
	case !step && shown == "":
	case shown == "":
		t.emit(t.sep() + text)
	case step && strings.HasPrefix(text, shown):
		t.emit(text[len(shown):])
	default:
		t.diverged = true
		p.Log.Info("an assistant message does not continue the text streamed from its deltas; streaming stops, the reply replaces it",
			"streamed", preview(shown, eventPreviewRunes), "message", preview(text, eventPreviewRunes))
	}
}

// emit streams s.
func (t *turn) emit(s string) {
	if s != "" {
		t.stream(s)
		t.streamed = true
	}
}

// sep is what comes between two streamed steps: the reply's join.
func (t *turn) sep() string {
	if t.streamed {
		return "\n"
	}
	return ""
}

// stepDone shows the latest assistant text as progress: another step
// follows, so it is not the answer (each assistant frame is one model
// step; the last one is usually the result's text, and is not shown
// twice).
func (t *turn) stepDone(progress agent.Progress) {
	if t.step != "" {
		progress(preview(t.step, progressRunes))
		t.step = ""
	}
}

// toolResult reports a tool result once per tool_use id: Nuum may send it
// both as system/tool_result and as a user message.
func (p *proc) toolResult(t *turn, b block, req agent.Request) {
	if b.ToolUseID != "" {
		if t.reported[b.ToolUseID] {
			return
		}
		t.reported[b.ToolUseID] = true
	}
	if req.Event == nil {
		return
	}
	name := t.tools[b.ToolUseID]
	if name == "" {
		name = "tool"
	}
	detail := name + ": "
	if b.IsError {
		detail = name + " failed: "
	}
	req.Event("agent_tool_result", preview(detail+textOf(b.Content), eventPreviewRunes))
}

// takeStale reports whether a result arriving now, before any other frame
// of the turn, is likely that of the turn abandoned just before.
func (p *proc) takeStale() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.staleUntil) {
		p.staleUntil = time.Time{}
		return true
	}
	return false
}

// diedResult answers a turn whose process died, or asks for a retry when
// the agent ended by itself before showing any sign of the message.
func (p *proc) diedResult(ctx context.Context, t *turn) (agent.Result, bool) {
	p.AwaitExit()
	if ctx.Err() != nil {
		return cancelledResult(), false
	}
	reason := p.Reason()
	p.mu.Lock()
	injected := t.injected
	p.mu.Unlock()
	if p.ExitErr == nil && reason == "" && !t.seen && injected == 0 {
		p.Log.Info("agent exited (status 0) before taking up the message; sending it to a new process")
		return agent.Result{}, true
	}
	if reason != "" {
		return errorResult(reason + p.StderrNote()), false
	}
	return errorResult(fmt.Sprintf("agent exited during the turn (%s)%s", exitText(p.ExitErr), p.StderrNote())), false
}

// answer maps the turn's last result to the reply.
func (t *turn) answer(cancelled bool) agent.Result {
	if cancelled {
		return cancelledResult()
	}
	return mapResult(t.last, strings.Join(t.texts, "\n"), t.lastError)
}

// mapResult maps a result frame to a reply: success gives the result's
// "result" text, Nuum's final answer (each assistant frame is one model
// step, shown as progress on the way), or the assistant steps joined when
// the result has none; cancelled gives "cancelled", anything else (an
// error_* subtype, or is_error) an error naming what went wrong.
func mapResult(f frame, steps, lastError string) agent.Result {
	isError := f.boolean("is_error")
	switch {
	case f.Subtype == "cancelled":
		return cancelledResult()
	case (f.Subtype == "success" || f.Subtype == "") && !isError:
		text := f.str("result")
		if strings.TrimSpace(text) == "" {
			text = steps
		}
		return agent.Result{Text: text, FinishReason: finishStop}
	}
	var msg string
	switch f.Subtype {
	case "error_max_turns":
		msg = "agent stopped: it reached its maximum number of turns"
	case "error_during_execution":
		msg = "agent failed during execution"
	case "error", "success", "":
		msg = "agent error"
	default:
		msg = fmt.Sprintf("agent error (%s)", preview(f.Subtype, 40))
	}
	detail := f.errorDetail()
	if detail == "" {
		detail = lastError
	}
	if detail != "" {
		msg += ": " + preview(detail, errorDetailRunes)
	}
	return errorResult(msg)
}
