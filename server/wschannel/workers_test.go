package wschannel

import (
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
)

// A connection that writes batch after batch (each reply is one)
// runs its writer on a warm worker each time, not on a goroutine started
// per batch; between batches the connection holds no writer.
func TestWritersAreWarm(t *testing.T) {
	ta := newStreamAdapter(t, Options{})
	a := ta.terminalAdapter
	ws := ta.dialRaw()
	roundTrip := func(f link.Frame) link.Frame {
		t.Helper()
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
			t.Fatal(err)
		}
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		g, err := link.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if _, ok := roundTrip(&link.Connect{PeerID: "dev-1"}).(*link.Connected); !ok {
		t.Fatal("no connected")
	}
	// Replies: a pong the reader writes itself when no writer runs.
	const n = 400
	for i := range n {
		id := "m-" + strconv.Itoa(i)
		a.Send(final("dev-1", id, "reply"))
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if f, err := link.Decode(data); err != nil || !isReply(f, id) {
			t.Fatalf("reply %d: got %s (%v)", i, data, err)
		}
	}
	if s := a.writers.Started(); s > 4 {
		t.Fatalf("%d writer workers started for %d batches written one after another, want a few reused", s, n+1)
	}
	a.mu.Lock()
	var c *wsConn
	for _, c = range a.conns {
	}
	a.mu.Unlock()
	// The last batch is read: its writer is returning or gone.
	for deadline := time.Now().Add(10 * time.Second); ; {
		c.mu.Lock()
		writing := c.writing
		c.mu.Unlock()
		if !writing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an idle connection still holds its writer")
		}
		time.Sleep(time.Millisecond)
	}
}

// Acks, errors and replies are encoded into pooled buffers that go back
// once written: encoding one costs no allocation in the steady state.
func TestEncodeFrameReusesBuffers(t *testing.T) {
	ack := &link.Ack{MessageID: "m-1", SessionID: "terminal-dev:local:dev", Accepted: true}
	for range 10 {
		f := encodeFrame(ack)
		f.recycle()
	}
	allocs := testing.AllocsPerRun(1000, func() {
		f := encodeFrame(ack)
		if string(f.data) != `{"type":"ack","message_id":"m-1","session_id":"terminal-dev:local:dev","accepted":true}` {
			t.Fatalf("encoded %s", f.data)
		}
		f.recycle()
	})
	if allocs >= 1 { // the race detector's pool drops some buffers: < 1, not 0
		t.Fatalf("%.2f allocations per encoded ack, want the pooled buffer reused", allocs)
	}
}
