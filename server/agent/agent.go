// Package agent runs the micro-agents that answer channel messages. A
// Runner takes one user message and returns one final reply, reporting
// progress on the way; the router calls it, never an adapter.
//
// Built in: Echo. The stdio protocols (Terminal Protocol v1, Nuum NDJSON,
// Term Challenge harness) are Runners too.
package agent

import (
	"context"
	"fmt"
	"time"
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
	Workspace  string
}

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

// Echo is the built-in agent: it answers "You said: <text>", after Delay.
type Echo struct {
	Delay time.Duration
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
	return Result{Text: EchoReply(req.Text), FinishReason: "stop"}
}

// EchoReply is the text Echo answers to text.
func EchoReply(text string) string { return fmt.Sprintf("You said: %s", text) }

// Close implements Runner.
func (Echo) Close() error { return nil }
