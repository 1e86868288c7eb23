package wschannel

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
)

// boxless reports whether every connection of a is idle and holds no
// box (no *websocket.Conn, no read buffer), and how many do.
func boxless(a *terminalAdapter) (all bool, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	all = len(a.conns) > 0
	for _, c := range a.conns {
		c.mu.Lock()
		if c.box == nil {
			n++
		} else {
			all = false
		}
		c.mu.Unlock()
	}
	return all, n
}

// An idle connection holds no gorilla Conn (352 bytes, its 96-byte lock
// channel, its handlers' closures) and no read buffer or bufio.Reader:
// it gives its box back when it waits in the poller, and a box serves
// whichever connection wakes. What differs between connections is kept
// across: the read limit (a device that listed diag may send larger
// frames), WebSocket pings answered with a pong and a close echoed, to
// the connection the frame came on.
func TestIdleConnHoldsNoBox(t *testing.T) {
	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) {
			r := newShapedRig(t, s.overTLS, s.guarded, nil)
			dial := func(peer string, caps ...string) *websocket.Conn {
				ws, _ := r.dial()
				if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: peer, Capabilities: caps})); err != nil {
					t.Fatal(err)
				}
				if _, ok := readFrame(t, ws).(*link.Connected); !ok {
					t.Fatal("connect not answered with connected")
				}
				return ws
			}
			diag, plain := dial("dev-diag", link.CapText, link.CapDiag), dial("dev-plain")
			idle := func() {
				t.Helper()
				testwait.Until(t, "both connections idle without a box", func() bool {
					all, n := boxless(r.a)
					return all && n == 2 && polledArmed(r.a)
				})
				if p := r.a.parked.Load(); p != 2 {
					t.Fatalf("parked counts %d connections, want 2", p)
				}
			}
			idle()

			// A WebSocket ping is answered on its own connection.
			for _, ws := range []*websocket.Conn{diag, plain} {
				ponged := make(chan string, 1)
				ws.SetPongHandler(func(data string) error { ponged <- data; return nil })
				if err := ws.WriteControl(websocket.PingMessage, []byte("are-you-there"), time.Now().Add(10*time.Second)); err != nil {
					t.Fatal(err)
				}
				if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Ping{})); err != nil {
					t.Fatal(err)
				}
				if _, ok := readFrame(t, ws).(*link.Pong); !ok {
					t.Fatal("ping not answered with pong")
				}
				select {
				case got := <-ponged:
					if got != "are-you-there" {
						t.Fatalf("pong carries %q, want the ping's data", got)
					}
				default:
					t.Fatal("the WebSocket ping was not answered before the pong frame that followed it")
				}
			}
			idle()

			// A frame over the plain read limit but within diag's: the
			// diag device's is read (and refused as too long a message),
			// the other's ends its connection (1009).
			text := strings.Repeat("x", int(link.ReadLimit(r.a.cfg.Config.MaxMessageChars))+100)
			big := link.MustEncode(&link.Message{MessageID: "m-big", Text: text})
			if err := diag.WriteMessage(websocket.TextMessage, big); err != nil {
				t.Fatal(err)
			}
			if f, ok := readFrame(t, diag).(*link.Error); !ok || f.MessageID != "m-big" || f.Code != link.CodeBadMessage {
				t.Fatalf("the diag device's large frame answered %+v, want a bad_message error for m-big", f)
			}
			if err := plain.WriteMessage(websocket.TextMessage, big); err != nil {
				t.Fatal(err)
			}
			if _, _, err := plain.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
				t.Fatalf("the plain device's large frame: %v, want a close with 1009", err)
			}
			testwait.Until(t, "the diag connection idle without a box", func() bool {
				all, n := boxless(r.a)
				return all && n == 1 && polledArmed(r.a)
			})

			// A close frame is echoed.
			if err := diag.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(10*time.Second)); err != nil {
				t.Fatal(err)
			}
			_, _, err := diag.ReadMessage()
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure {
				t.Fatalf("after its close frame the device read %v, want the echo of its close (1000)", err)
			}
		})
	}
}

// A box made for no connection is a device's Conn: it discards what its
// upgrade wrote, and holds no connection.
func TestNewBoxServesNoConnection(t *testing.T) {
	b := newBox()
	if b.ws == nil || b.nc != nil || b.owner != nil || b.br.Buffered() != 0 {
		t.Fatalf("a new box: ws %p, nc %p, owner %p, %d bytes buffered; want a Conn and nothing else", b.ws, b.nc, b.owner, b.br.Buffered())
	}
	if n, err := b.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a box without a connection read %d, %v; want an error", n, err)
	}
}

// sizeClassOf is the size class alloc's objects take: the class whose
// count of allocations grew by n while alloc ran n times.
func sizeClassOf(t *testing.T, n int, alloc func() any) uint32 {
	t.Helper()
	keep := make([]any, 0, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		keep = append(keep, alloc())
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	for i := range after.BySize {
		if after.BySize[i].Mallocs-before.BySize[i].Mallocs >= uint64(n) {
			return after.BySize[i].Size
		}
	}
	t.Fatal("no size class took the allocations")
	return 0
}

// A box's read buffer is not in the wsConns' size class: boxes come and
// go (a collection drops those the pool does not use), and their buffers
// would leave holes among the wsConns, each keeping its span's pages.
func TestBoxSizeClasses(t *testing.T) {
	buf := sizeClassOf(t, 1000, func() any { b := make([]byte, readBufferBytes); return &b[0] })
	conn := sizeClassOf(t, 1000, func() any { return new(wsConn) })
	if buf == conn {
		t.Fatalf("a box's %d-byte read buffer and a wsConn share the %d-byte size class", readBufferBytes, conn)
	}
	if readBufferBytes <= 256 {
		t.Fatalf("readBufferBytes %d: gorilla reads through a buffer only if it holds more than 256", readBufferBytes)
	}
}

// Without a poller a connection has a goroutine of its own (serve) and
// keeps its box: it reads, is answered and ends as a polled one.
func TestServeWithoutPoller(t *testing.T) {
	r := newPollRig(t, false, nil)
	r.a.mu.Lock()
	r.a.noPoll = true
	r.a.mu.Unlock()
	ws, _ := connected(t, r, "dev-served")
	c := onlyConn(t, r.a)
	if c.ph != nil || c.served == nil {
		t.Fatal("the connection is polled, want a goroutine of its own")
	}
	for i := range 3 {
		id := fmt.Sprintf("m-%d", i)
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Message{MessageID: id, Text: "hi"})); err != nil {
			t.Fatal(err)
		}
		if f, ok := readFrame(t, ws).(*link.Ack); !ok || f.MessageID != id {
			t.Fatalf("got %+v, want the ack of %s", f, id)
		}
	}
	c.mu.Lock()
	kept := c.box != nil
	c.mu.Unlock()
	if !kept {
		t.Fatal("a served connection gave its box back")
	}
	ws.Close()
	testwait.Until(t, "the served connection ended", func() bool {
		r.a.mu.Lock()
		defer r.a.mu.Unlock()
		return len(r.a.conns) == 0
	})
}
