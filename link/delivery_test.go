package link_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"termlink/link"
)

// A final answer stays in the outbox until the caller confirms it: not
// resent while it waits (a reconnect in between), not delivered twice,
// and it holds its place in the window, so a caller that does not confirm
// stops the sending instead of piling up replies.
func TestClientAnswerWaitsForDelivered(t *testing.T) {
	runner := newCountingRunner(0)
	ts := newTestServer(t, runner, nil)
	const window = 3
	cfg := link.ClientConfig{URL: ts.url(), Window: window}
	fastRetry(&cfg)
	d := startDevice(t, cfg, false)
	var ids []string
	for i := range window + 2 {
		ids = append(ids, d.send(fmt.Sprintf("unconfirmed %d", i)))
	}
	d.waitReplies(ids[:window], 10*time.Second)
	// Nothing confirmed: the window is full of answers, no more goes out.
	ts.restart() // and a reconnect does not resend the answered ones
	d.waitState(link.StateConnected, time.Now(), 10*time.Second)
	d.Send(context.Background(), "sync") // a round trip after the reconnect
	time.Sleep(200 * time.Millisecond)
	st := d.Stats()
	if st.Sent != window || st.Resent != 0 || st.Unconfirmed != window || st.Pending != window+3 {
		t.Fatalf("stats %+v: want %d sent, none resent, %d unconfirmed, %d in the outbox", st, window, window, window+3)
	}
	if err := d.Delivered(ids[window]); !errors.Is(err, link.ErrNotAnswered) {
		t.Fatalf("Delivered of an unanswered message: %v", err)
	}
	for _, id := range ids[:window] {
		if err := d.Delivered(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Delivered(ids[0]); !errors.Is(err, link.ErrNotAnswered) {
		t.Fatalf("second Delivered: %v", err)
	}
	d.waitReplies(ids, 10*time.Second)
	d.mu.Lock()
	for _, id := range ids {
		if n := len(d.replies[id]); n != 1 {
			t.Errorf("message %s: %d replies delivered", id, n)
		}
	}
	d.mu.Unlock()
	if dups, _ := runner.duplicatedRuns(); dups != 0 {
		t.Errorf("%d duplicated runs", dups)
	}
}

// A client closed while an answer waits for confirmation keeps the
// message; the next client on the state dir resends it and gets the
// answer (from the server's dedupe cache, not a second run), once.
func TestClientUnconfirmedAnswerResentAfterRestart(t *testing.T) {
	runner := newCountingRunner(0)
	ts := newTestServer(t, runner, nil)
	state := t.TempDir()
	cfg := link.ClientConfig{URL: ts.url(), StateDir: state}
	fastRetry(&cfg)
	d := startDevice(t, cfg, false)
	id := d.send("answer me again")
	d.waitReplies([]string{id}, 10*time.Second)
	d.Close() // waits for Run to return

	d2 := newDevice(t, cfg)
	d2.waitReplies([]string{id}, 10*time.Second)
	d2.waitFor("empty outbox", 10*time.Second, func() bool { return d2.Status().Pending == 0 })
	d2.checkExactlyOnce(map[string]string{id: "answer me again"})
	if n := runner.runsOf(id); n != 1 {
		t.Fatalf("the agent ran the message %d times", n)
	}
	if st := d2.Stats(); st.Resent != 0 || st.Sent != 1 {
		t.Errorf("stats of the second client %+v: want the one message sent once", st)
	}
}

// Thousands of progress frames while the caller does not read: the
// client's event queue stays within its bound (progress coalesced per
// message, latest wins), and the caller gets the latest text, then the
// reply.
func TestClientProgressFloodBounded(t *testing.T) {
	fs := newFakeServer(t)
	c, err := link.NewClient(link.ClientConfig{URL: fs.url(), PeerID: "flood", Outbox: link.NewMemoryOutbox(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(context.Background()) }()
	defer func() { c.Close(); <-runErr }()
	id, err := c.Send(context.Background(), "flood me")
	if err != nil {
		t.Fatal(err)
	}
	conn := fs.accept(t)
	conn.expectConnect(t)
	conn.write(t, &link.Connected{ChannelID: "terminal-dev", SessionID: "s"})
	if m := conn.readMessage(t); m.MessageID != id {
		t.Fatalf("message %+v", m)
	}
	conn.write(t, &link.Ack{MessageID: id, SessionID: "s", Accepted: true})
	const lines = 5000
	for i := range lines {
		conn.write(t, &link.Progress{MessageID: id, Text: fmt.Sprintf("line %d", i)})
	}
	conn.write(t, &link.Progress{MessageID: "not-mine", Text: "ignored"})
	// The pong proves the client handled every frame before it.
	conn.write(t, &link.Ping{})
	conn.readUntilPong(t)
	st := c.Stats()
	bound := 3*link.DefaultWindow + 17
	t.Logf("after %d progress frames unread: %d events queued (at most %d at once, bound %d), %d coalesced or dropped",
		lines, st.QueuedEvents, st.MaxQueuedEvents, bound, st.DroppedEvents)
	if st.MaxQueuedEvents > bound || st.QueuedEvents > 8 {
		t.Fatalf("event queue grew to %d (now %d), bound %d", st.MaxQueuedEvents, st.QueuedEvents, bound)
	}
	// The caller reads now: one progress event, the latest text.
	var progress []string
	for e := range c.Events() {
		if e.Kind == link.EventProgress {
			progress = append(progress, e.Text)
		}
		if st := c.Stats(); st.QueuedEvents == 0 && len(progress) > 0 {
			break
		}
	}
	if len(progress) != 1 || progress[0] != fmt.Sprintf("line %d", lines-1) {
		t.Fatalf("the caller got %d progress events %q, want only the latest", len(progress), progress[:min(3, len(progress))])
	}
	conn.write(t, &link.Message{Role: link.RoleAssistant, MessageID: id, RunID: "r", Text: "done", FinishReason: link.FinishStop})
	for e := range c.Events() {
		switch e.Kind {
		case link.EventProgress:
			t.Fatalf("more progress after the flood was read: %q", e.Text)
		case link.EventReply:
			if err := c.Delivered(id); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no reply")
}

// busyServer is a WebSocket peer that refuses each message with an error
// frame of code busy (no ack) n times, then answers it.
func TestClientResendsAfterBusy(t *testing.T) {
	fs := newFakeServer(t)
	const busyTimes = 4
	cfg := link.ClientConfig{URL: fs.url(), Outbox: link.NewMemoryOutbox(), RetryInitial: 40 * time.Millisecond, RetryMax: 2 * time.Second}
	d := newDevice(t, cfg)
	id := d.send("when you can")
	conn := fs.accept(t)
	conn.expectConnect(t)
	conn.write(t, &link.Connected{ChannelID: "terminal-dev", SessionID: "s"})
	var at []time.Time
	for i := 0; ; i++ {
		m := conn.readMessage(t)
		at = append(at, time.Now())
		if m.MessageID != id {
			t.Fatalf("message %+v, want %s again", m, id)
		}
		if i == busyTimes {
			conn.write(t, &link.Ack{MessageID: id, SessionID: "s", Accepted: true})
			conn.write(t, &link.Message{Role: link.RoleAssistant, MessageID: id, RunID: "r", Text: "finally", FinishReason: link.FinishStop})
			break
		}
		conn.write(t, &link.Error{Error: "session queue is full", MessageID: id, Code: link.CodeBusy})
	}
	d.waitReplies([]string{id}, 10*time.Second)
	d.waitFor("empty outbox", 10*time.Second, func() bool { return d.Status().Pending == 0 })
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]))
	}
	st := d.Stats()
	t.Logf("busy %d times: resent after %v; stats %+v", busyTimes, roundAll(gaps), st)
	if st.Sessions != 1 || st.Dials != 1 {
		t.Errorf("busy tore the connection down: %d dials, %d sessions", st.Dials, st.Sessions)
	}
	if st.Busy != busyTimes || st.Resent != busyTimes || st.Replies != 1 {
		t.Errorf("stats %+v: want %d busy answers, %d resends, 1 reply", st, busyTimes, busyTimes)
	}
	// Wait i is RetryInitial doubled i times, ±50% (DefaultRetryJitter):
	// never shorter than half of that. (Only lower bounds: a busy machine
	// makes waits longer, never shorter.) The fourth one's floor is above
	// the first one's ceiling, so a backoff that does not grow fails.
	for i, g := range gaps {
		if floor := cfg.RetryInitial << i / 2; g < floor {
			t.Errorf("resend %d came %v after the busy answer, before its backoff (>= %v): %v", i+1, g, floor, roundAll(gaps))
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.errs) != 0 {
		t.Errorf("busy reached the caller as errors: %v", d.errs)
	}
	if !slices.Equal(d.order, []string{id}) || d.replies[id][0].Text != "finally" {
		t.Errorf("replies %v", d.order)
	}
}

// A busy answer holds back the messages behind the refused one too, and
// they all go again in outbox order once the backoff has passed.
func TestClientBusyKeepsOrder(t *testing.T) {
	fs := newFakeServer(t)
	cfg := link.ClientConfig{URL: fs.url(), Outbox: link.NewMemoryOutbox(), Window: 1, RetryInitial: 30 * time.Millisecond, RetryMax: time.Second}
	d := newDevice(t, cfg)
	var ids []string
	for i := range 3 {
		ids = append(ids, d.send(fmt.Sprintf("m%d", i)))
	}
	conn := fs.accept(t)
	conn.expectConnect(t)
	conn.write(t, &link.Connected{ChannelID: "terminal-dev", SessionID: "s"})
	var got []string
	busy := true
	for len(got) < len(ids) {
		m := conn.readMessage(t)
		if busy && m.MessageID == ids[1] {
			busy = false
			conn.write(t, &link.Error{Error: "rate", MessageID: m.MessageID, Code: link.CodeBusy})
			continue
		}
		got = append(got, m.MessageID)
		conn.write(t, &link.Ack{MessageID: m.MessageID, SessionID: "s", Accepted: true})
		conn.write(t, &link.Message{Role: link.RoleAssistant, MessageID: m.MessageID, Text: "ok " + m.Text, FinishReason: link.FinishStop})
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("answered in order %v, want %v", got, ids)
	}
	d.waitReplies(ids, 10*time.Second)
	if st := d.Stats(); st.Sessions != 1 || !strings.Contains(fmt.Sprint(d.order), ids[2]) {
		t.Errorf("stats %+v order %v", st, d.order)
	}
}
