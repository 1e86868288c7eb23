package acp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sdk "github.com/coder/acp-go-sdk"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/config"
)

// Lengths of progress lines and previews, in runes.
const (
	progressRunes     = 120
	eventPreviewRunes = 120
)

// turn is one prompt. The SDK's goroutines (session/update in order, each
// permission request on its own) and Inject reach it under mu; the Run
// goroutine owns the rest.
type turn struct {
	p        *proc
	req      agent.Request
	progress agent.Progress

	cancelCh   chan struct{} // closed by cancel: open questions answer cancelled
	cancelOnce sync.Once
	askSlot    chan struct{} // one question on the device at a time

	mu        sync.Mutex
	reply     strings.Builder
	truncated bool
	tools     map[sdk.ToolCallId]string // titles by id
	thinking  bool
	question  *question // the question shown on the device, waiting for its answer
}

// question is a permission question open on the device.
type question struct {
	text    string
	answers chan string // buffered 1; Inject sends the device's answer
	taken   bool        // guarded by turn.mu: an answer was sent
}

func (p *proc) newTurn(req agent.Request, progress agent.Progress) *turn {
	return &turn{p: p, req: req, progress: progress, cancelCh: make(chan struct{}), askSlot: make(chan struct{}, 1),
		tools: map[sdk.ToolCallId]string{}}
}

func (t *turn) cancel() { t.cancelOnce.Do(func() { close(t.cancelCh) }) }

func (t *turn) cancelled() bool {
	select {
	case <-t.cancelCh:
		return true
	default:
		return false
	}
}

// prompt runs one session/prompt and maps its answer to the reply.
func (p *proc) prompt(ctx context.Context, req agent.Request, progress agent.Progress) agent.Result {
	t := p.newTurn(req, progress)
	p.mu.Lock()
	p.turn = t
	p.mu.Unlock()
	defer func() {
		t.cancel() // a question still open (the process died) answers cancelled
		p.mu.Lock()
		if p.turn == t {
			p.turn = nil
		}
		p.mu.Unlock()
	}()

	type answer struct {
		resp sdk.PromptResponse
		err  error
	}
	// The prompt's context is not ctx: a device cancel is session/cancel,
	// after which the agent still answers the prompt (stopReason
	// cancelled). pctx only ends the wait once the turn is given up.
	pctx, pcancel := context.WithCancel(context.Background())
	defer pcancel()
	done := make(chan answer, 1)
	go func() {
		resp, err := p.conn.Prompt(pctx, sdk.PromptRequest{SessionId: p.sessionID, Prompt: promptBlocks(req)})
		done <- answer{resp, err}
	}()

	var (
		ctxDone    = ctx.Done()
		interruptC <-chan time.Time
	)
	for {
		select {
		case a := <-done:
			if a.err != nil {
				if t.cancelled() && ctx.Err() != nil {
					return cancelledResult()
				}
				return p.errorReply("session/prompt", a.err)
			}
			p.r.Pool.Answered(p.Key)
			return t.result(a.resp.StopReason)
		case <-ctxDone:
			ctxDone = nil
			p.Log.Info("cancelling the prompt", "message_id", req.MessageID)
			t.cancel()
			cctx, cancel := context.WithTimeout(context.Background(), p.r.Cfg.WriteTimeout)
			if err := p.conn.Cancel(cctx, sdk.CancelNotification{SessionId: p.sessionID}); err != nil {
				p.Log.Warn("cannot send session/cancel", "error", err)
			}
			cancel()
			it := time.NewTimer(p.r.opt.InterruptWait)
			defer it.Stop()
			interruptC = it.C
		case <-interruptC:
			msg := fmt.Sprintf("agent did not answer the prompt within %s of session/cancel", p.r.opt.InterruptWait)
			p.Log.Warn(msg + "; killing it")
			p.r.Pool.MarkStopping(p)
			p.Kill(msg)
			return cancelledResult()
		case <-p.Exited():
			// The SDK fails the prompt once it has read everything the
			// agent wrote; wait for that (bounded by the read deadline).
			a := <-done
			if ctx.Err() != nil {
				return cancelledResult()
			}
			if a.err == nil {
				p.r.Pool.Answered(p.Key)
				return t.result(a.resp.StopReason)
			}
			return p.errorReply("session/prompt", a.err)
		}
	}
}

// promptBlocks is the prompt of req: its text, and each media file as a
// resource_link (text and resource links are what every agent takes).
func promptBlocks(req agent.Request) []sdk.ContentBlock {
	blocks := make([]sdk.ContentBlock, 0, 1+len(req.Media))
	if req.Text != "" || len(req.Media) == 0 {
		blocks = append(blocks, sdk.TextBlock(req.Text))
	}
	for _, m := range req.Media {
		u := (&url.URL{Scheme: "file", Path: m}).String()
		blocks = append(blocks, sdk.ResourceLinkBlock(filepath.Base(m), u))
	}
	return blocks
}

// result maps the prompt's stop reason and the accumulated chunks to the
// reply.
func (t *turn) result(stop sdk.StopReason) agent.Result {
	t.mu.Lock()
	text := t.reply.String()
	if t.truncated {
		text += "\n[reply cut: it was longer than the server keeps]"
	}
	t.mu.Unlock()
	switch stop {
	case sdk.StopReasonEndTurn:
		return agent.Result{Text: text, FinishReason: finishStop}
	case sdk.StopReasonCancelled:
		return agent.Result{Text: orDefault(text, "cancelled"), FinishReason: finishCancelled}
	case sdk.StopReasonMaxTokens:
		return agent.Result{Text: orDefault(text, "the agent reached its token limit"), FinishReason: finishLength}
	case sdk.StopReasonMaxTurnRequests:
		return agent.Result{Text: orDefault(text, "the agent reached its limit of model requests for one message"), FinishReason: finishMaxTurns}
	case sdk.StopReasonRefusal:
		return agent.Result{Text: orDefault(text, "the agent refused to answer"), FinishReason: finishRefusal}
	}
	t.p.Log.Warn("unknown stopReason; taken as end_turn", "stopReason", stop)
	return agent.Result{Text: text, FinishReason: finishStop}
}

func orDefault(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}

// update handles one session/update of the turn (on the SDK's
// notification goroutine, in order).
func (t *turn) update(u sdk.SessionUpdate) {
	switch {
	case u.AgentMessageChunk != nil:
		if c := u.AgentMessageChunk.Content; c.Text != nil {
			t.mu.Lock()
			kept := !t.truncated && t.reply.Len()+len(c.Text.Text) <= t.p.r.opt.MaxReplyBytes
			if kept {
				t.reply.WriteString(c.Text.Text)
			} else {
				t.truncated = true
			}
			t.mu.Unlock()
			// Streamed as it comes (updates arrive in order, on one
			// goroutine): what the device is shown is always the start
			// of the reply.
			if kept && t.req.Stream != nil {
				t.req.Stream(c.Text.Text)
			}
		}
	case u.AgentThoughtChunk != nil:
		t.mu.Lock()
		first := !t.thinking
		t.thinking = true
		t.mu.Unlock()
		if first {
			t.say("thinking")
		}
	case u.ToolCall != nil:
		tc := u.ToolCall
		t.mu.Lock()
		t.tools[tc.ToolCallId] = tc.Title
		t.mu.Unlock()
		t.say(toolLine(tc.Title, string(tc.Status)))
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		t.mu.Lock()
		title := t.tools[tc.ToolCallId]
		if tc.Title != nil && *tc.Title != "" {
			title = *tc.Title
			t.tools[tc.ToolCallId] = title
		}
		t.mu.Unlock()
		if tc.Status == nil {
			return // content or location only: nothing to show
		}
		t.say(toolLine(title, string(*tc.Status)))
		if *tc.Status == sdk.ToolCallStatusCompleted || *tc.Status == sdk.ToolCallStatusFailed {
			if t.req.Event != nil {
				t.req.Event("agent_tool_result", preview(orDefault(title, "tool")+": "+string(*tc.Status), eventPreviewRunes))
			}
		}
	case u.Plan != nil:
		t.say(planLine(u.Plan.Entries))
	default:
		t.p.Log.Debug("ignored a session/update kind termlink does not show", "kind", updateKind(u))
	}
}

// say shows a progress line; an open question is shown again after it, so
// that it stays what the device shows (progress is coalesced, latest
// wins).
func (t *turn) say(line string) {
	t.progress(line)
	t.mu.Lock()
	q := t.question
	t.mu.Unlock()
	if q != nil && line != q.text {
		t.progress(q.text)
	}
}

// toolLine is a tool call as a progress line: "tool: Reading files (done)".
func toolLine(title, status string) string {
	if title == "" {
		title = "a tool"
	}
	switch status {
	case "", string(sdk.ToolCallStatusPending):
		return preview("tool: "+title, progressRunes)
	case string(sdk.ToolCallStatusInProgress):
		return preview("tool: "+title+" (running)", progressRunes)
	case string(sdk.ToolCallStatusCompleted):
		return preview("tool: "+title+" (done)", progressRunes)
	case string(sdk.ToolCallStatusFailed):
		return preview("tool: "+title+" (failed)", progressRunes)
	}
	return preview("tool: "+title+" ("+status+")", progressRunes)
}

// planLine is a plan as a progress line: "plan 1/3: the step in progress".
func planLine(entries []sdk.PlanEntry) string {
	done := 0
	current := ""
	for _, e := range entries {
		switch e.Status {
		case sdk.PlanEntryStatusCompleted:
			done++
		case sdk.PlanEntryStatusInProgress:
			if current == "" {
				current = e.Content
			}
		}
	}
	if current == "" {
		for _, e := range entries {
			if e.Status == sdk.PlanEntryStatusPending {
				current = e.Content
				break
			}
		}
	}
	line := fmt.Sprintf("plan %d/%d done", done, len(entries))
	if current != "" {
		line += ": " + current
	}
	return preview(line, progressRunes)
}

// updateKind names an update for the log.
func updateKind(u sdk.SessionUpdate) string {
	switch {
	case u.UserMessageChunk != nil:
		return "user_message_chunk"
	case u.AvailableCommandsUpdate != nil:
		return "available_commands_update"
	case u.PlanUpdate != nil:
		return "plan_update"
	case u.PlanRemoved != nil:
		return "plan_removed"
	}
	return "other"
}

// permission answers a session/request_permission by the policy.
func (t *turn) permission(ctx context.Context, req sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
	title := "a tool call"
	if req.ToolCall.Title != nil && *req.ToolCall.Title != "" {
		title = *req.ToolCall.Title
	} else {
		t.mu.Lock()
		if s := t.tools[req.ToolCall.ToolCallId]; s != "" {
			title = s
		}
		t.mu.Unlock()
	}
	if t.cancelled() {
		return cancelledOutcome()
	}
	policy := t.p.r.cfg.Permission
	if policy == config.ACPPermissionAsk && !slices.Contains(t.req.Capabilities, "progress") {
		t.p.Log.Info("permission policy is ask, but the device did not ask for progress and cannot see the question; rejecting", "tool", title)
		policy = config.ACPPermissionReject
	}
	var resp sdk.RequestPermissionResponse
	switch policy {
	case config.ACPPermissionAllowOnce:
		resp = pick(req.Options, sdk.PermissionOptionKindAllowOnce)
		if resp.Outcome.Selected == nil {
			resp = rejectOutcome(req.Options)
		}
	case config.ACPPermissionAsk:
		resp = t.ask(ctx, title, req.Options)
	case config.ACPPermissionDevice:
		var asked bool
		resp, asked = t.askDevice(ctx, title, req.Options)
		if !asked {
			policy = t.p.r.cfg.PermissionFallback
			resp = t.fallback(req.Options)
		}
	default:
		resp = rejectOutcome(req.Options)
	}
	decision := "cancelled"
	if s := resp.Outcome.Selected; s != nil {
		decision = string(s.OptionId)
		for _, o := range req.Options {
			if o.OptionId == s.OptionId {
				decision = string(o.Kind)
			}
		}
	}
	t.p.Log.Info("permission request answered", "tool", title, "policy", policy, "decision", decision)
	if t.req.Event != nil {
		t.req.Event("agent_permission", preview(title+": "+decision, eventPreviewRunes))
	}
	if policy != config.ACPPermissionAsk && policy != config.ACPPermissionDevice {
		t.say(preview("permission "+strings.ReplaceAll(decision, "_", " ")+": "+title, progressRunes))
	}
	return resp
}

// ask shows the question on the device and waits for its answer (Inject),
// the ask timeout (reject), or a cancel (cancelled).
func (t *turn) ask(ctx context.Context, title string, options []sdk.PermissionOption) sdk.RequestPermissionResponse {
	select { // one question at a time
	case t.askSlot <- struct{}{}:
		defer func() { <-t.askSlot }()
	case <-t.cancelCh:
		return cancelledOutcome()
	case <-ctx.Done():
		return cancelledOutcome()
	}
	q := &question{text: questionText(title, options), answers: make(chan string, 1)}
	t.mu.Lock()
	t.question = q
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.question = nil
		t.mu.Unlock()
	}()
	t.progress(q.text)
	timer := time.NewTimer(t.p.r.askTimeout)
	defer timer.Stop()
	select {
	case text := <-q.answers:
		n, ok := parseAnswer(text, len(options))
		if !ok {
			t.progress(preview(fmt.Sprintf("%q is not 1-%d: rejected", strings.TrimSpace(text), len(options)), progressRunes))
			return rejectOutcome(options)
		}
		o := options[n-1]
		t.progress(preview(fmt.Sprintf("%d: %s", n, o.Name), progressRunes))
		return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeSelected(o.OptionId)}
	case <-timer.C:
		t.progress(fmt.Sprintf("no answer within %s: rejected", t.p.r.askTimeout))
		return rejectOutcome(options)
	case <-t.cancelCh:
		return cancelledOutcome()
	case <-ctx.Done():
		return cancelledOutcome()
	}
}

// fallback is the "device" policy's answer when the device is not asked
// or does not answer: permissionFallback.
func (t *turn) fallback(options []sdk.PermissionOption) sdk.RequestPermissionResponse {
	if t.p.r.cfg.PermissionFallback == config.ACPPermissionAllowOnce {
		if r := pick(options, sdk.PermissionOptionKindAllowOnce); r.Outcome.Selected != nil {
			return r
		}
	}
	return rejectOutcome(options)
}

// askDevice asks the device (policy "device") with the request's own
// options; asked false: it could not be asked (no "choice", options that
// do not fit a question), and the caller answers with the fallback.
func (t *turn) askDevice(ctx context.Context, title string, options []sdk.PermissionOption) (sdk.RequestPermissionResponse, bool) {
	if t.req.Ask == nil {
		t.p.Log.Info("permission policy is device, but the device did not list choice; answering with the fallback", "tool", title, "fallback", t.p.r.cfg.PermissionFallback)
		return sdk.RequestPermissionResponse{}, false
	}
	q, ok := deviceQuestion(title, options)
	if !ok {
		t.p.Log.Warn("permission request's options do not fit a device question; answering with the fallback", "tool", title, "options", len(options))
		return sdk.RequestPermissionResponse{}, false
	}
	q.Timeout = t.p.r.askTimeout
	qctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { // a device cancel of the turn closes the question too
		select {
		case <-t.cancelCh:
			stop()
		case <-qctx.Done():
		}
	}()
	id, err := t.req.Ask(qctx, q)
	switch {
	case err == nil:
		for _, o := range options {
			if string(o.OptionId) == id {
				return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeSelected(o.OptionId)}, true
			}
		}
		return t.fallback(options), true
	case errors.Is(err, agent.ErrQuestionCancelled) || t.cancelled() || ctx.Err() != nil:
		return cancelledOutcome(), true
	case errors.Is(err, agent.ErrQuestionTimeout):
		t.progress(fmt.Sprintf("no answer within %s: %s", t.p.r.askTimeout, strings.ReplaceAll(t.p.r.cfg.PermissionFallback, "_", " ")))
		return t.fallback(options), true
	default:
		t.p.Log.Warn("permission question not asked; answering with the fallback", "tool", title, "err", err)
		return t.fallback(options), true
	}
}

// deviceQuestion is a permission request as a question: its options'
// ids and names (a name cut to link.MaxOptionLabelBytes, control
// characters made spaces; none: the kind); false if they do not fit.
func deviceQuestion(title string, options []sdk.PermissionOption) (agent.Question, bool) {
	if len(options) < link.MinOptions || len(options) > link.MaxOptions {
		return agent.Question{}, false
	}
	q := agent.Question{Text: "Allow? " + cutBytes(title, link.MaxQuestionTextBytes-len("Allow? "))}
	seen := map[string]bool{}
	for _, o := range options {
		id := string(o.OptionId)
		if id == "" || len(id) > link.MaxOptionIDBytes || seen[id] {
			return agent.Question{}, false
		}
		seen[id] = true
		label := o.Name
		if strings.TrimSpace(label) == "" {
			label = strings.ReplaceAll(string(o.Kind), "_", " ")
		}
		label = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f {
				return ' '
			}
			return r
		}, label)
		label = cutBytes(label, link.MaxOptionLabelBytes)
		if label == "" {
			label = id
		}
		q.Options = append(q.Options, link.Option{ID: id, Label: label})
	}
	return q, true
}

// cutBytes cuts s to at most n bytes on a character boundary.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// answer hands text to the open question; false if none is open.
func (t *turn) answer(text string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.question
	if q == nil || q.taken || t.cancelled() {
		return false
	}
	q.taken = true
	q.answers <- text
	return true
}

// parseAnswer reads a device's answer to a question of n options: the
// number of an option, 1 to n, blanks around it allowed.
func parseAnswer(text string, n int) (int, bool) {
	i, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil || i < 1 || i > n {
		return 0, false
	}
	return i, true
}

// questionText is a permission question as one progress line:
// "Allow? Edit config.json: 1 Allow, 2 Skip (send the number)".
func questionText(title string, options []sdk.PermissionOption) string {
	var b strings.Builder
	b.WriteString("Allow? ")
	b.WriteString(preview(title, 60))
	b.WriteString(":")
	for i, o := range options {
		if i > 0 {
			b.WriteString(",")
		}
		name := o.Name
		if name == "" {
			name = strings.ReplaceAll(string(o.Kind), "_", " ")
		}
		fmt.Fprintf(&b, " %d %s", i+1, preview(name, 40))
	}
	b.WriteString(" (send the number)")
	return b.String()
}

// pick selects the first option of kind.
func pick(options []sdk.PermissionOption, kind sdk.PermissionOptionKind) sdk.RequestPermissionResponse {
	for _, o := range options {
		if o.Kind == kind {
			return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeSelected(o.OptionId)}
		}
	}
	return sdk.RequestPermissionResponse{}
}

// rejectOutcome selects a reject option (once before always); without
// one, the request is answered cancelled, the only other refusal ACP has.
func rejectOutcome(options []sdk.PermissionOption) sdk.RequestPermissionResponse {
	if r := pick(options, sdk.PermissionOptionKindRejectOnce); r.Outcome.Selected != nil {
		return r
	}
	if r := pick(options, sdk.PermissionOptionKindRejectAlways); r.Outcome.Selected != nil {
		return r
	}
	return cancelledOutcome()
}

func cancelledOutcome() sdk.RequestPermissionResponse {
	return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeCancelled()}
}

// client is termlink's side of the connection: session updates and
// permission requests go to the turn in progress; file system and
// terminal requests are refused (none is advertised).
type client struct{ p *proc }

var _ sdk.Client = client{}

func (c client) currentTurn(session sdk.SessionId) *turn {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if session != p.sessionID {
		return nil
	}
	return p.turn
}

func (c client) SessionUpdate(ctx context.Context, n sdk.SessionNotification) error {
	t := c.currentTurn(n.SessionId)
	if t == nil {
		c.p.Log.Debug("session/update outside a turn; ignored", "kind", updateKind(n.Update))
		return nil
	}
	t.update(n.Update)
	return nil
}

func (c client) RequestPermission(ctx context.Context, req sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	t := c.currentTurn(req.SessionId)
	if t == nil {
		c.p.Log.Warn("permission request outside a turn; rejected")
		return rejectOutcome(req.Options), nil
	}
	return t.permission(ctx, req), nil
}

var errNotOffered = errors.New("termlink advertises no file system and no terminal capability")

func (client) ReadTextFile(context.Context, sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	return sdk.ReadTextFileResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodFsReadTextFile)
}

func (client) WriteTextFile(context.Context, sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	return sdk.WriteTextFileResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodFsWriteTextFile)
}

func (client) CreateTerminal(context.Context, sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalCreate)
}

func (client) KillTerminal(context.Context, sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, errNotOffered
}

func (client) TerminalOutput(context.Context, sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, errNotOffered
}

func (client) ReleaseTerminal(context.Context, sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, errNotOffered
}

func (client) WaitForTerminalExit(context.Context, sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, errNotOffered
}
