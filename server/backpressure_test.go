package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/config"
)

// answeredInOrder reads the acks of messages fmt(from..n-1) and the
// replies of fmt(0..n-1), each in order, and nothing else.
func (c *client) answeredInOrder(format string, from, n int) {
	c.t.Helper()
	acks, replies := from, 0
	for replies < n {
		switch f := c.read().(type) {
		case *link.Ack:
			if want := fmt.Sprintf(format, acks); f.MessageID != want || f.Duplicate {
				c.t.Fatalf("ack %+v, want a first ack of %s (in order)", f, want)
			}
			acks++
		case *link.Message:
			if want := fmt.Sprintf(format, replies); f.MessageID != want {
				c.t.Fatalf("reply to %s, want %s (in order)", f.MessageID, want)
			}
			replies++
		default:
			c.t.Fatalf("unexpected %s frame %+v (no busy frame is due)", f.FrameType(), f)
		}
	}
	if acks != n {
		c.t.Fatalf("%d acks for %d messages", acks, n)
	}
}

// runOneWaitOne sends message prefix-0, which runs (runner is gated),
// and prefix-1, which waits, and reads their acks.
func (c *client) runOneWaitOne(runner *countingRunner, prefix string) {
	c.t.Helper()
	c.send(&link.Message{MessageID: prefix + "-0", Text: "runs"})
	readAs[*link.Ack](c)
	<-runner.started
	c.send(&link.Message{MessageID: prefix + "-1", Text: "waits"})
	readAs[*link.Ack](c)
}

func (ts *testServer) waiters() int { return ts.rt.Admission.Waiters() }

func (ts *testServer) busyAnswers() uint64 { return ts.rt.Metrics.WS.Busy.Value("terminal-dev") }

func (ts *testServer) holds() uint64 { return ts.rt.Metrics.WS.Held.Value("terminal-dev") }

// A device that floods past maxWaitingPerSession while its runs are slow
// is not answered busy: its connection stops reading it until a place
// frees, and every message is accepted, in order, and answered.
func TestBackpressureFloodPastSessionBound(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts := startServer(t, func(c *config.Config) { setSessionBound(c, 3) }, runner)
	c := dial(t, ts.ws, nil)
	c.connect("flood")
	const n = 12
	var frames [][]byte
	for i := range n {
		frames = append(frames, maskedFrame(websocket.TextMessage, link.MustEncode(&link.Message{MessageID: fmt.Sprintf("f-%02d", i), Text: "hi"})))
	}
	c.writeRaw(frames...)
	// f-00 runs, f-01..f-03 wait, f-04 is held: the rest stay unread.
	for i := range 4 {
		if a := readAs[*link.Ack](c); a.MessageID != fmt.Sprintf("f-%02d", i) {
			t.Fatalf("ack %d: %+v", i, a)
		}
	}
	waitFor(t, "the connection to hold f-04", func() bool { return ts.waiters() == 1 })
	close(runner.gate)
	c.answeredInOrder("f-%02d", 4, n)
	if b, h := ts.busyAnswers(), ts.holds(); b != 0 || h == 0 {
		t.Fatalf("busy answers %d, holds %d; want 0 and at least 1", b, h)
	}
	if w := ts.waiting(t); w != 0 {
		t.Fatalf("runs_waiting %d at the end, want 0", w)
	}
	c.alive()
}

// Held past half a heartbeat, a message is answered busy as before (the
// device resends it after a backoff), and the device is read again.
func TestBackpressureHoldRunsOutBusy(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts := startServer(t, func(c *config.Config) {
		setSessionBound(c, 1)
		shortHolds(c) // 1 s
	}, runner)
	c := dial(t, ts.ws, nil)
	c.connect("slow")
	c.runOneWaitOne(runner, "m")
	c.send(&link.Message{MessageID: "m-2", Text: "held, then refused"})
	c.send(&link.Ping{}) // read once the hold is over
	c.readBusy("m-2", "maxWaitingPerSession")
	readAs[*link.Pong](c)
	if b, h := ts.busyAnswers(), ts.holds(); b != 1 || h != 1 {
		t.Fatalf("busy answers %d, holds %d; want 1 and 1", b, h)
	}
	if w := ts.waiters(); w != 0 {
		t.Fatalf("%d waiters left after the hold ran out", w)
	}
	close(runner.gate)
	readAs[*link.Message](c)
	readAs[*link.Message](c)
}

// A connection that ends while it holds a message lets its wait go at
// once (not when the hold would run out): the place goes to the next
// waiter, and the held message was never acked (the device resends it).
func TestBackpressureClosingFreesWaiter(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts := startServer(t, func(c *config.Config) {
		c.MaxWaitingRuns = 1
		setHeartbeat(c, 600) // holds last 5 minutes: far longer than waitFor
	}, runner)
	a := dial(t, ts.ws, nil)
	a.connect("a")
	a.runOneWaitOne(runner, "a")
	b := dial(t, ts.ws, nil)
	b.connect("b")
	b.send(&link.Message{MessageID: "b-0", Text: "held"})
	waitFor(t, "b's connection to hold b-0", func() bool { return ts.waiters() == 1 })
	// A newer connection of b replaces the one holding b-0.
	b2 := dial(t, ts.ws, nil)
	b2.connect("b")
	for {
		_ = b.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, data, err := b.ws.ReadMessage()
		if err != nil {
			if !websocket.IsCloseError(err, 4001) {
				t.Fatalf("old connection: %v, want close 4001", err)
			}
			break
		}
		if f, _ := link.Decode(data); f != nil && f.FrameType() == "ack" {
			t.Fatalf("held message acked on the replaced connection: %s", data)
		}
	}
	waitFor(t, "the closed connection's wait to end", func() bool { return ts.waiters() == 0 })
	if n := ts.busyAnswers(); n != 0 {
		t.Fatalf("%d busy answers, want none", n)
	}
	// The place a-1 frees goes to b2's resend.
	b2.send(&link.Message{MessageID: "b-0", Text: "held"})
	waitFor(t, "b2 to hold b-0", func() bool { return ts.waiters() == 1 })
	close(runner.gate)
	readAs[*link.Message](a)
	readAs[*link.Message](a)
	if ack := readAs[*link.Ack](b2); ack.MessageID != "b-0" || ack.Duplicate {
		t.Fatalf("b2's ack %+v", ack)
	}
	readAs[*link.Message](b2)
}

// Devices held for a server-wide place are served as places free, none
// answered busy.
func TestBackpressureServerBoundManyDevices(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts := startServer(t, func(c *config.Config) { c.MaxWaitingRuns = 2 }, runner)
	a := dial(t, ts.ws, nil)
	a.connect("a")
	a.send(&link.Message{MessageID: "a-0", Text: "runs"})
	readAs[*link.Ack](a)
	<-runner.started
	for i := 1; i <= 2; i++ {
		a.send(&link.Message{MessageID: fmt.Sprintf("a-%d", i), Text: "waits"})
		readAs[*link.Ack](a)
	}
	var devs []*client
	for i := range 5 {
		d := dial(t, ts.ws, nil)
		d.connect(fmt.Sprintf("d%d", i))
		for j := range 3 {
			d.send(&link.Message{MessageID: fmt.Sprintf("d%d-%d", i, j), Text: "hi"})
		}
		devs = append(devs, d)
	}
	waitFor(t, "five devices held", func() bool { return ts.waiters() == 5 })
	close(runner.gate)
	for i, d := range devs {
		d.answeredInOrder(fmt.Sprintf("d%d-", i)+"%d", 0, 3)
	}
	if n := ts.busyAnswers(); n != 0 {
		t.Fatalf("%d busy answers, want none", n)
	}
}
