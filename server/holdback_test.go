package server

import (
	"testing"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
)

// A session's messages are taken in the order the device sent them, in
// either mode: the rule is the runtime's, above the store of record
// (package record/holdback). Each mode's server has
// maxWaitingPerSession 1. The local one counts the messages not started
// yet (fill: the one that waits while the first runs) and holds a
// refused message for 1 s (half its heartbeat) before it answers busy;
// the cluster's edge counts those not answered yet and answers at once.
var holdBackModes = []struct {
	name  string
	fill  []string
	start func(t *testing.T, runner *countingRunner) *testServer
}{
	{"local", []string{"A2"}, func(t *testing.T, runner *countingRunner) *testServer {
		return startServer(t, func(c *config.Config) { setSessionBound(c, 1); shortHolds(c) }, runner)
	}},
	{"cluster", nil, func(t *testing.T, runner *countingRunner) *testServer {
		ts, _ := startClusterServer(t, runner, func(c *config.Config) { setSessionBound(c, 1) }, nil)
		return ts
	}},
}

// expectHeldBack reads the busy refusal of later, sent while first is
// refused and not accepted yet.
func (c *client) expectHeldBack(later, first string) {
	c.t.Helper()
	e := c.expectError("message "+first+" of this session is not accepted yet; messages are taken in order: resend "+first+" first", link.CodeBusy)
	if e.MessageID != later {
		c.t.Fatalf("held-back refusal for %q, want it for %s: %+v", e.MessageID, later, e)
	}
}

// isAnswered sees id's reply: a reply frame, or the ack of a resend that
// carries it.
func isAnswered(id string) func(link.Frame) bool {
	return func(f link.Frame) bool {
		if a, ok := f.(*link.Ack); ok {
			return a.MessageID == id && a.Reply != nil
		}
		return isReply(id)(f)
	}
}

// fillSession takes the session's one place: A runs, and what the mode
// counts as waiting beside it is accepted.
func fillSession(t *testing.T, c *client, runner *countingRunner, fill []string) {
	t.Helper()
	c.send(&link.Message{MessageID: "A", Text: "a"})
	c.until(isAck("A"))
	if id := <-runner.started; id != "A" {
		t.Fatalf("run of %s, want A", id)
	}
	for _, id := range fill {
		c.send(&link.Message{MessageID: id, Text: id})
		c.until(isAck(id))
	}
}

// answerFirst answers A: a place frees (in local mode once the filler
// starts).
func answerFirst(t *testing.T, c *client, runner *countingRunner, fill []string) {
	t.Helper()
	runner.gate <- struct{}{}
	c.until(isReply("A"))
	for _, id := range fill {
		if got := <-runner.started; got != id {
			t.Fatalf("run of %s, want %s", got, id)
		}
	}
}

// The local twin of TestClusterEdgeBusyRefusalHoldsLaterMessages: the
// single server took C, sent in the device's window while B was refused,
// once A's answer freed a place, and C ran before B.
func TestLocalBusyRefusalHoldsLaterMessages(t *testing.T) {
	t.Parallel()
	mode := holdBackModes[0]
	runner := newCountingRunner(true)
	ts := mode.start(t, runner)
	c := dial(t, ts.ws, nil)
	c.connect("dev-busy")
	fillSession(t, c, runner, mode.fill)
	c.send(&link.Message{MessageID: "B", Text: "b"}) // no place: held, then busy
	c.readBusy("B", "maxWaitingPerSession")
	answerFirst(t, c, runner, mode.fill)             // a place is free
	c.send(&link.Message{MessageID: "C", Text: "c"}) // sent in the device's window, before B came again
	c.expectHeldBack("C", "B")
	c.send(&link.Message{MessageID: "A", Text: "a"}) // a resend of A, taken before B, overtakes nothing
	if a := readAs[*link.Ack](c); a.MessageID != "A" || !a.Duplicate || a.Reply == nil {
		t.Fatalf("resend of A while B is refused: %+v, want a duplicate with its reply", a)
	}
	close(runner.gate)
	c.send(&link.Message{MessageID: "B", Text: "b"})
	c.until(isReply("B"))
	c.send(&link.Message{MessageID: "C", Text: "c"})
	c.until(isReply("C"))
	order := []string{<-runner.started, <-runner.started}
	if order[0] != "B" || order[1] != "C" {
		t.Errorf("runs after A and A2 in the order %v, want [B C]", order)
	}
	if n := ts.rt.HeldBack.Len(); n != 0 {
		t.Errorf("%d sessions held back once B was taken, want 0", n)
	}
}

// In both modes: a message sent after a refused one is refused, naming
// it; once the refused one is resent and accepted the later one is
// taken; and a device's disconnect clears the hold (it resends what is
// unanswered, in order, wherever it connects again).
func TestBusyRefusalHoldsLaterMessagesUntilDisconnect(t *testing.T) {
	t.Parallel()
	for _, mode := range holdBackModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			runner := newCountingRunner(true)
			ts := mode.start(t, runner)
			c := dial(t, ts.ws, nil)
			c.connect("dev-hold")
			fillSession(t, c, runner, mode.fill)
			c.send(&link.Message{MessageID: "B", Text: "b"})
			c.expectError("maxWaitingPerSession", link.CodeBusy)
			answerFirst(t, c, runner, mode.fill) // a place is free
			c.send(&link.Message{MessageID: "C", Text: "c"})
			c.expectHeldBack("C", "B")
			c.send(&link.Message{MessageID: "D", Text: "d"})
			c.expectHeldBack("D", "B")

			// B resent and accepted (it takes the place): the later ones
			// go to the bound again.
			c.send(&link.Message{MessageID: "B", Text: "b"})
			c.until(isAck("B"))
			c.send(&link.Message{MessageID: "C", Text: "c"})
			c.expectError("maxWaitingPerSession", link.CodeBusy)
			c.send(&link.Message{MessageID: "D", Text: "d"})
			c.expectHeldBack("D", "C")
			if n := ts.rt.HeldBack.Len(); n != 1 {
				t.Fatalf("%d sessions held back, want 1", n)
			}

			// The device leaves with C refused: the hold goes with it.
			if err := c.ws.Close(); err != nil {
				t.Fatal(err)
			}
			ts.waitEvent(t, events.TerminalDisconnected, "")
			if n := ts.rt.HeldBack.Len(); n != 0 {
				t.Fatalf("%d sessions held back after the device disconnected, want 0", n)
			}
			close(runner.gate) // the runs go on; a reply to the device gone comes when it resends
			c = dial(t, ts.ws, nil)
			c.connect("dev-hold")
			c.send(&link.Message{MessageID: "B", Text: "b"})
			c.until(isAnswered("B"))
			c.send(&link.Message{MessageID: "D", Text: "d"}) // D before C: nothing holds it back now
			c.until(isAnswered("D"))
			c.send(&link.Message{MessageID: "C", Text: "c"})
			c.until(isAnswered("C"))
		})
	}
}
