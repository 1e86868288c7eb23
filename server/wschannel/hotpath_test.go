package wschannel

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/internal/warm"
	"termlink/link"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/record"
	"termlink/server/throttle"
)

// wireConn is the server's side of a device's socket as the test sees
// it: every Write (one system call on a real socket) is recorded, and
// one may be held until the test lets it go.
type wireConn struct {
	net.Conn
	mu      sync.Mutex
	writes  [][]byte
	gate    chan struct{} // non-nil: the next write waits for it to close
	blocked chan struct{} // closed when a write waits at the gate
}

func (w *wireConn) Write(p []byte) (int, error) {
	w.mu.Lock()
	gate, blocked := w.gate, w.blocked
	w.gate, w.blocked = nil, nil
	w.mu.Unlock()
	if gate != nil {
		close(blocked)
		<-gate
	}
	w.mu.Lock()
	w.writes = append(w.writes, bytes.Clone(p))
	w.mu.Unlock()
	return w.Conn.Write(p)
}

// holdNext makes the next write wait until release is called; blocked
// is closed once one waits.
func (w *wireConn) holdNext() (blocked <-chan struct{}, release func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate, w.blocked = make(chan struct{}), make(chan struct{})
	gate := w.gate
	return w.blocked, func() { close(gate) }
}

// since returns the writes from the nth on.
func (w *wireConn) since(n int) [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]byte(nil), w.writes[n:]...)
}

func (w *wireConn) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

// wireWriter hands ServeUpgrade a hijacked connection wrapped in a
// wireConn.
type wireWriter struct {
	http.ResponseWriter
	wire chan *wireConn
}

func (w wireWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := w.ResponseWriter.(http.Hijacker).Hijack()
	if err != nil {
		return nil, nil, err
	}
	wc := &wireConn{Conn: nc}
	w.wire <- wc
	return wc, brw, nil
}

// hotAccepter acks each message and then, as a fast agent whose reply is
// ready when the ack is due, hands the adapter the reply at once (reply
// false: no reply, ever). With busy set, the first accept is refused by
// a full bound that can be waited out (room).
type hotAccepter struct {
	a     func() *terminalAdapter
	reply bool
	mu    sync.Mutex
	calls int
	room  *testRoom
}

func (h *hotAccepter) AcceptInbound(_ context.Context, in bus.Inbound, ack func(record.Accepted)) error {
	h.mu.Lock()
	h.calls++
	first, room := h.calls == 1, h.room
	h.mu.Unlock()
	if first && room != nil {
		return room
	}
	ack(record.Accepted{RunID: "run-" + in.MessageID})
	if h.reply {
		h.a().Send(final(in.PeerID, in.MessageID, "reply to "+in.MessageID))
	}
	return nil
}

func (h *hotAccepter) accepts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// testRoom is a busy refusal that can be waited out (RoomWaiter): ready
// is closed by the test.
type testRoom struct {
	ready chan struct{}
	mu    sync.Mutex
	done  int
}

func (r *testRoom) Error() string { return record.ErrBusy.Error() + ": session has 1 message waiting" }
func (r *testRoom) Unwrap() error { return record.ErrBusy }
func (r *testRoom) WaitRoom() (<-chan struct{}, func()) {
	return r.ready, func() { r.mu.Lock(); r.done++; r.mu.Unlock() }
}

// newWireRig serves an adapter on h whose connections' sockets the test
// sees (wireConn); dial returns the device and its wire once connected.
//
// Without wrap, the connection's socket is the TCP one (polled where
// there is a poller) and dial's wire is nil.
func newWireRig(t *testing.T, h *hotAccepter, wrap bool) (a *terminalAdapter, dial func(peer string) (*device, *wireConn)) {
	t.Helper()
	gate := throttle.New(slog.New(slog.NewTextHandler(io.Discard, nil)), throttle.Options{Burst: 100, Every: time.Hour})
	t.Cleanup(gate.Close)
	d := &deps{}
	cfg := config.Default().Channels[config.DefaultChannelID]
	a = newTerminalAdapter("terminal-dev", cfg, Deps{
		Accept: h, Records: records{d}, Presence: records{d}, Registry: devices{d}, Notices: mailboxes{}, Events: events.NewLog(100), Outside: gate,
		SessionKey: func(ch, acct, peer, thread string) string { return strings.Join([]string{ch, acct, peer, thread}, "/") },
		Metrics:    testMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, Options{})
	h.a = func() *terminalAdapter { return a }
	wires := make(chan *wireConn, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wrap {
			w = wireWriter{ResponseWriter: w, wire: wires}
		}
		a.ServeUpgrade(w, r, 100)
	}))
	t.Cleanup(func() { a.Close(); hs.Close() })
	sa := &streamAdapter{terminalAdapter: a, t: t, url: "ws" + strings.TrimPrefix(hs.URL, "http")}
	return a, func(peer string) (*device, *wireConn) {
		t.Helper()
		dev := sa.dial(peer)
		if !wrap {
			return dev, nil
		}
		return dev, <-wires
	}
}

// conn returns peer's connection.
func peerConn(a *terminalAdapter, peer string) *wsConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peers[peer]
}

// A reply that is ready by the time its message's ack is written (a fast
// agent at load: the writer is still busy with the batch before) leaves
// with the ack in one write: one corked batch, one system call, the ack
// first.
func TestAckAndReadyReplyShareAWrite(t *testing.T) {
	h := &hotAccepter{reply: true}
	a, dial := newWireRig(t, h, true)
	dev, wire := dial("dev")
	c := peerConn(a, "dev")

	// The writer is busy: an earlier reply waits at the socket. (Not a
	// pong: the reader writes that itself when no writer runs, and would
	// then wait at the socket instead of reading m1.)
	blocked, release := wire.holdNext()
	a.Send(final("dev", "m0", "an earlier reply"))
	<-blocked
	dev.send(&link.Message{MessageID: "m1", Text: "hello"})
	testwait.Until(t, "the ack and the reply queued", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.q != nil && len(c.q.frames) == 1 && len(c.q.replies) == 1
	})
	n := wire.count()
	release()
	if f := dev.read(); !isReply(f, "m0") {
		t.Fatalf("first frame %#v, want m0's reply", f)
	}
	if f := dev.read(); !isAck(f, "m1") {
		t.Fatalf("second frame %#v, want m1's ack", f)
	}
	if f := dev.read(); !isReply(f, "m1") {
		t.Fatalf("third frame %#v, want m1's reply", f)
	}
	w := wire.since(n)
	if len(w) != 2 { // m0's reply, then the ack's and the reply's
		t.Fatalf("%d writes after m0's reply was let go, want its own and one more: %q", len(w), w)
	}
	if !bytes.Contains(w[1], []byte(`"type":"ack"`)) || !bytes.Contains(w[1], []byte("reply to m1")) {
		t.Fatalf("the batch after m0's reply wrote %q, want the ack and the reply in one write", w[1])
	}
}

// A lone ack, with no reply ever coming, is written at once: the writer
// never waits for a reply to join it.
func TestLoneAckNotHeldForAReply(t *testing.T) {
	h := &hotAccepter{}
	a, dial := newWireRig(t, h, true)
	dev, wire := dial("dev")
	ackAlone(t, dev, wire, "m1")
	c := peerConn(a, "dev")
	testwait.Until(t, "the writer done", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.writing && c.q == nil
	})
}

// A held message (refused by a full bound that can be waited out) is
// offered again only once the admission says there is room (its ready
// channel), not on another wake: a reply written to the device meanwhile
// and a ping the device sends do not retry it. Polled (the readiness
// loop) and on a goroutine of its own.
func TestHeldMessageRetriedOnlyWithRoom(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		t.Run(map[bool]string{false: "polled", true: "own goroutine"}[wrap], func(t *testing.T) {
			room := &testRoom{ready: make(chan struct{})}
			h := &hotAccepter{room: room}
			a, dial := newWireRig(t, h, wrap)
			dev, _ := dial("dev")
			dev.send(&link.Message{MessageID: "m1", Text: "hello"})
			testwait.Until(t, "m1 held", func() bool { return a.m.Held.Value("terminal-dev") == 1 })
			// Wakes that are not room: the device pings, a reply goes out.
			if err := dev.ws.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(10*time.Second)); err != nil {
				t.Fatal(err)
			}
			a.Send(final("dev", "m0", "an earlier reply"))
			if f := dev.read(); !isReply(f, "m0") {
				t.Fatalf("got %#v, want m0's reply while m1 is held", f)
			}
			if n := h.accepts(); n != 1 {
				t.Fatalf("m1 offered %d times before there was room, want once", n)
			}
			close(room.ready)
			if f := dev.read(); !isAck(f, "m1") {
				t.Fatalf("got %#v, want m1's ack once there is room", f)
			}
			testwait.Until(t, "m1's place given back", func() bool { // after the ack is queued
				room.mu.Lock()
				defer room.mu.Unlock()
				return room.done > 0
			})
			room.mu.Lock()
			done := room.done
			room.mu.Unlock()
			if n := h.accepts(); n != 2 || done != 1 {
				t.Fatalf("m1 offered %d times, its place given back %d times; want twice and once", n, done)
			}
			if b := a.m.Busy.Value("terminal-dev"); b != 0 {
				t.Fatalf("%d busy answers, want none", b)
			}
		})
	}
}

func isAck(f link.Frame, id string) bool {
	a, ok := f.(*link.Ack)
	return ok && a.MessageID == id
}

func isReply(f link.Frame, id string) bool {
	m, ok := f.(*link.Message)
	return ok && m.MessageID == id && m.IsReply()
}

// With no writer running, the reader writes the frames it queues itself
// (the connected frame, a message's ack, a pong): no writer worker is
// woken for them, and the ack goes out in one write before the reader
// reads on. A reply (queued by a run, not the reader) still goes through
// a writer worker; after each, the connection holds no writer and no
// queue.
func TestReaderWritesItsFramesWhenTheWriterIsIdle(t *testing.T) {
	h := &hotAccepter{}
	a, dial := newWireRig(t, h, true)
	var runs atomic.Int64
	a.writers = warm.New(maxIdleWriters, workerIdle, func(c *wsConn) { runs.Add(1); c.writePump() })
	dev, wire := dial("dev")
	c := peerConn(a, "dev")
	idle := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.writing && c.q == nil
	}
	testwait.Until(t, "the writer done after connected", idle)
	if n := runs.Load(); n != 0 {
		t.Fatalf("%d writer workers woken for the connected frame, want none", n)
	}
	ackAlone(t, dev, wire, "m1")
	testwait.Until(t, "the writer done after the ack", idle)
	if n := runs.Load(); n != 0 {
		t.Fatalf("%d writer workers woken for an ack, want none", n)
	}
	a.Send(final("dev", "m1", "the reply"))
	if f := dev.read(); !isReply(f, "m1") {
		t.Fatalf("got %#v, want m1's reply", f)
	}
	testwait.Until(t, "the writer done after the reply", idle)
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d writer workers woken for a reply, want one", n)
	}
}

// ackAlone sends message id and reads its ack, which must have been
// written alone, in one write.
func ackAlone(t *testing.T, dev *device, wire *wireConn, id string) {
	t.Helper()
	n := wire.count()
	dev.send(&link.Message{MessageID: id, Text: "hello"})
	if f := dev.read(); !isAck(f, id) {
		t.Fatalf("got %#v, want %s's ack", f, id)
	}
	if w := wire.since(n); len(w) != 1 || !bytes.Contains(w[0], []byte(`"type":"ack"`)) {
		t.Fatalf("writes %q, want the ack alone in one", w)
	}
}
