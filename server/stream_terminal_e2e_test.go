package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/config"
)

// A real Terminal v1 agent (echoagent) streams through a real server:
// its delta frames become the device's deltas while it runs. The agent
// waits on two files the test creates: after "before " until the device
// has shown it, after "after" until the device has that too; then it
// exits and the final message, equal to the deltas' concatenation,
// follows.

// streamGates are the two files /stream-wait waits for.
func streamGates(t *testing.T) (first, second string, open func(string)) {
	dir := t.TempDir()
	return filepath.Join(dir, "first"), filepath.Join(dir, "second"), func(p string) {
		t.Helper()
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTerminalAgentStreamsToARawDevice(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withTerminalAgent(config.TerminalAgent{Command: echoAgent(t)}), nil)
	first, second, open := streamGates(t)
	c := dial(t, ts.ws, nil)
	c.connect("dev", link.CapText, link.CapStream)
	c.send(&link.Message{MessageID: "m1", Text: "/stream-wait " + first + " " + second})
	readAs[*link.Ack](c)

	var d deltas
	d.until(c, "m1", "before") // the agent waits: this came before its end (its trailing space waits for more text)
	open(first)
	d.until(c, "m1", "before after")
	open(second)
	m := d.final(c, "m1")
	if m.Text != "before after" || m.Text != d.text.String() || m.FinishReason != link.FinishStop {
		t.Fatalf("final %+v, deltas %q (%d)", m, d.text.String(), d.count)
	}
	c.quiet()

	// A device without "stream" gets the same reply and no delta.
	plain := dial(t, ts.ws, nil)
	plain.connect("spec-dev", link.CapText)
	plain.send(&link.Message{MessageID: "p1", Text: "/stream 5 10"})
	readAs[*link.Ack](plain)
	if m := readAs[*link.Message](plain); m.Text != "w1 w2 w3 w4 w5" {
		t.Fatalf("reply %+v", m)
	}
	plain.quiet()
}

// The same through a real link.Client with Stream set: EventDelta
// carries all the text so far, before the final EventReply, whose text
// equals it.
func TestTerminalAgentStreamsToALinkClient(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withTerminalAgent(config.TerminalAgent{Command: echoAgent(t)}), nil)
	first, second, open := streamGates(t)
	cl, err := link.NewClient(link.ClientConfig{URL: ts.ws, PeerID: "dev", Outbox: link.NewMemoryOutbox(), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- cl.Run(ctx) }()
	defer func() {
		cl.Close()
		<-runDone
	}()
	id, err := cl.Send(ctx, "/stream-wait "+first+" "+second)
	if err != nil {
		t.Fatal(err)
	}
	// next returns the next delta or reply of id.
	next := func() link.Event {
		t.Helper()
		for {
			select {
			case e := <-cl.Events():
				if (e.Kind == link.EventDelta || e.Kind == link.EventReply) && e.MessageID == id {
					return e
				}
				if e.Kind == link.EventError {
					t.Fatalf("error event %+v", e)
				}
			case <-ctx.Done():
				t.Fatal("no delta or reply")
			}
		}
	}
	var last string
	for _, want := range []string{"before", "before after"} {
		for last != want {
			e := next()
			if e.Kind != link.EventDelta {
				t.Fatalf("got %v (%+v) while waiting for the streamed %q", e.Kind, e.Reply, want)
			}
			last = e.Text
		}
		if want == "before" {
			open(first)
		} else {
			open(second)
		}
	}
	e := next()
	if e.Kind != link.EventReply || e.Reply.Text != last || e.Reply.FinishReason != link.FinishStop {
		t.Fatalf("got %v %+v after the stream %q, want the final reply with its text", e.Kind, e.Reply, last)
	}
	if err := cl.Delivered(id); err != nil {
		t.Fatal(err)
	}
	if st := cl.Stats(); st.Deltas < 2 || st.DeltasIgnored != 0 {
		t.Fatalf("client stats: %d deltas, %d ignored", st.Deltas, st.DeltasIgnored)
	}
}
