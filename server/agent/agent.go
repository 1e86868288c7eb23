// Package agent runs the micro-agents that answer channel messages. A
// Runner takes one user message and returns one final reply, reporting
// progress on the way; the router calls it, never an adapter.
//
// Built in: Echo. The stdio protocols (Terminal Protocol v1, Nuum NDJSON,
// Term Challenge harness) are Runners too.
package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"termlink/link"
)

// Request is what a runner gets for one message.
type Request struct {
	ChannelID  string
	SessionKey string
	ChatID     string // peer id, plus ":thread" when threaded
	PeerID     string
	MessageID  string
	RunID      string
	Text       string
	Media      []string
	Workspace  string // absolute path of the server's workspace
	// Capabilities the device listed in connect ("progress", "cancel").
	Capabilities []string

	// UpdateMeta changes the session's metadata (the session log's first
	// line), e.g. to keep an agent's own session id. May be nil in tests.
	UpdateMeta func(ctx context.Context, update func(meta map[string]any)) error
	// Event records a channel event for this run (name like
	// "agent_tool_result", detail a short preview). May be nil.
	Event func(name, detail string)
	// Stream takes reply text as the agent writes it: each call appends
	// chunk to the text streamed so far (ACP agent_message_chunk, a
	// Terminal v1 delta frame, ...). Nil when the device did not ask for
	// "stream": a runner then only returns the Result. It never blocks;
	// the Result's Text stays the whole, authoritative reply.
	Stream func(chunk string)
	// Ask puts a question to the person at the device (the "choice"
	// extension: link.Question) and blocks until they answer (the
	// option's id), the question's timeout (ErrQuestionTimeout), or ctx
	// ends: the run cancelled or ended (ErrQuestionCancelled). Nil when
	// the device did not list "choice": a runner then keeps its
	// fallback. A question whose text or options are out of link's
	// bounds is refused with an error naming the field.
	Ask func(ctx context.Context, q Question) (optionID string, err error)
}

// Question is what a runner asks through Request.Ask.
type Question struct {
	Text    string
	Options []link.Option // 2 to link.MaxOptions, ids unique
	// Timeout is how long the question stays open (whole seconds, from 1 s
	// to link.MaxQuestionSeconds); 0 is DefaultQuestionTimeout.
	Timeout time.Duration
}

// DefaultQuestionTimeout is a question's timeout when the runner names
// none.
const DefaultQuestionTimeout = 5 * time.Minute

// Why Ask returned no option.
var (
	ErrQuestionTimeout   = errors.New("question not answered in time")
	ErrQuestionCancelled = errors.New("question closed: the run was cancelled or ended")
)

// Result is the final reply to a message.
type Result struct {
	Text         string
	FinishReason string // "stop", "error", "timeout", "cancelled"
	Media        []string
}

// Progress receives interim updates of a run (turn accepted, tool use,
// agent progress text). It must not block for long.
type Progress func(text string)

// Runner answers messages. Run must return when ctx ends, with
// FinishReason "cancelled" (or "timeout" when its own limit hit).
type Runner interface {
	Run(ctx context.Context, req Request, progress Progress) Result
	// Close stops whatever the runner keeps running between messages.
	Close() error
}

// Injector is a Runner whose session can take more messages while a turn
// runs (Nuum: the agent injects them into the turn in progress). The
// router offers each message that arrives for a busy session to Inject; if
// it returns true the message was handed to the running turn, is acked at
// once, and the running turn's Result answers it too.
type Injector interface {
	Inject(ctx context.Context, req Request) bool
}

// Echo is the built-in agent: it answers "You said: <text>", after Delay.
// With WordGap set it streams that reply (to a device that listed
// "stream": Request.Stream is set) word by word, one every WordGap, the
// way an LLM agent writes: the demo's and the benchmarks' streaming agent.
// A device without "stream" gets the reply whole, after the same time.
//
// "/ask TEXT" from a device that listed "choice" asks TEXT with the
// options yes and no (open for AskTimeout; 0: DefaultQuestionTimeout)
// and answers "You chose: <label>"; from any other device it is echoed.
type Echo struct {
	Delay      time.Duration
	WordGap    time.Duration
	AskTimeout time.Duration
}

// Run implements Runner.
func (e Echo) Run(ctx context.Context, req Request, progress Progress) Result {
	if e.Delay > 0 {
		if progress != nil {
			progress("thinking")
		}
		t := time.NewTimer(e.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return Result{Text: "cancelled", FinishReason: "cancelled"}
		}
	}
	if text, ok := strings.CutPrefix(req.Text, "/ask "); ok && req.Ask != nil && strings.TrimSpace(text) != "" {
		return echoAsk(ctx, req, strings.TrimSpace(text), e.AskTimeout)
	}
	reply := EchoReply(req.Text)
	if e.WordGap > 0 {
		return e.stream(ctx, req, reply)
	}
	return Result{Text: reply, FinishReason: "stop"}
}

// stream writes reply word by word (each word with the spaces before
// it), one every WordGap; a cancel ends it with what was written so far.
func (e Echo) stream(ctx context.Context, req Request, reply string) Result {
	t := time.NewTicker(e.WordGap)
	defer t.Stop()
	written := 0
	for written < len(reply) {
		if written > 0 {
			select {
			case <-t.C:
			case <-ctx.Done():
				return Result{Text: reply[:written], FinishReason: "cancelled"}
			}
		}
		end := nextWordEnd(reply, written)
		if req.Stream != nil {
			req.Stream(reply[written:end])
		}
		written = end
	}
	return Result{Text: reply, FinishReason: "stop"}
}

// echoAsk is Echo's "/ask TEXT" for a device that listed "choice": TEXT
// as a question with the options yes and no, answered "You chose: <label>".
func echoAsk(ctx context.Context, req Request, text string, timeout time.Duration) Result {
	options := []link.Option{{ID: "yes", Label: "yes"}, {ID: "no", Label: "no"}}
	id, err := req.Ask(ctx, Question{Text: text, Options: options, Timeout: timeout})
	switch {
	case errors.Is(err, ErrQuestionTimeout):
		return Result{Text: "No answer in time.", FinishReason: "stop"}
	case ctx.Err() != nil:
		return Result{Text: "cancelled", FinishReason: "cancelled"}
	case err != nil:
		return Result{Text: "Question not asked: " + err.Error(), FinishReason: "error"}
	}
	for _, o := range options {
		if o.ID == id {
			return Result{Text: "You chose: " + o.Label, FinishReason: "stop"}
		}
	}
	return Result{Text: "You chose: " + id, FinishReason: "stop"}
}

// nextWordEnd is where the word after the spaces at s[from:] ends.
func nextWordEnd(s string, from int) int {
	i := from
	for i < len(s) && s[i] == ' ' {
		i++
	}
	for i < len(s) && s[i] != ' ' {
		i++
	}
	return i
}

// EchoReply is the text Echo answers to text.
func EchoReply(text string) string { return fmt.Sprintf("You said: %s", text) }

// Close implements Runner.
func (Echo) Close() error { return nil }
