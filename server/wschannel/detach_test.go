//go:build linux

package wschannel

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/events"
	"termlink/server/wschannel/readiness"
)

// heldTCPConn reports whether a *net.TCPConn (a netFD, its addresses and
// a runtime poll descriptor) is under nc's wrappers.
func heldTCPConn(nc net.Conn) bool {
	for {
		switch x := nc.(type) {
		case *flushConn:
			nc = x.Conn
		case *tls.Conn:
			nc = x.NetConn()
		case *stallConn:
			nc = x.Conn
		case *guardedConn:
			nc = x.Conn
		case *net.TCPConn:
			return true
		default:
			return false
		}
	}
}

// onlyConn is the adapter's one connection.
func onlyConn(t *testing.T, a *terminalAdapter) *wsConn {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.conns) != 1 {
		t.Fatalf("%d connections, want 1", len(a.conns))
	}
	for _, c := range a.conns {
		return c
	}
	return nil
}

// connected dials a device through r and has it connect as peer.
func connected(t *testing.T, r *pollRig, peer string) (*websocket.Conn, net.Conn) {
	t.Helper()
	ws, raw := r.dial()
	if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: peer})); err != nil {
		t.Fatal(err)
	}
	if _, ok := readFrame(t, ws).(*link.Connected); !ok {
		t.Fatal("connect not answered with connected")
	}
	return ws, raw
}

var shapes = []struct {
	name             string
	overTLS, guarded bool
}{
	{"plain", false, false},
	{"plain guarded", false, true},
	{"tls guarded", true, true},
}

// An idle connection's socket is out of Go's poller: no net.TCPConn is
// left under its wrappers (termserver's listeners, plain and TLS, and a
// bare one), and it still reads and writes.
func TestIdleConnHoldsNoNetFD(t *testing.T) {
	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) {
			r := newShapedRig(t, s.overTLS, s.guarded, nil)
			ws, _ := connected(t, r, "dev-fd")
			testwait.Until(t, "the connection waiting in the poller", func() bool { return polledArmed(r.a) })
			if c := onlyConn(t, r.a); heldTCPConn(&c.nc) {
				t.Fatal("an idle connection still holds a net.TCPConn (its netFD, addresses and poll descriptor)")
			}
			if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Message{MessageID: "m-1", Text: "hi"})); err != nil {
				t.Fatal(err)
			}
			if f, ok := readFrame(t, ws).(*link.Ack); !ok || f.MessageID != "m-1" {
				t.Fatalf("got %+v, want the ack of m-1", f)
			}
		})
	}
}

// parkedReader waits until c's reader is parked in the poller for the
// rest of what it reads.
func parkedReader(t *testing.T, c *wsConn) {
	t.Helper()
	testwait.Until(t, "the reader parked for the rest of the frame", func() bool { r, _ := c.ph.Waiting(); return r })
}

// A frame whose rest comes after the reader found the socket empty
// (EAGAIN) is read whole once it comes; a device that closes mid-frame
// ends its connection with the reason, and leaves the poller.
func TestDetachedReadMidFrame(t *testing.T) {
	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) {
			r := newShapedRig(t, s.overTLS, s.guarded, nil)
			ws, raw := connected(t, r, "dev-mid")
			testwait.Until(t, "the connection waiting in the poller", func() bool { return polledArmed(r.a) })
			c := onlyConn(t, r.a)
			b := clientFrame(&link.Message{MessageID: "m-1", Text: strings.Repeat("y", 700)})
			if _, err := raw.Write(b[:300]); err != nil {
				t.Fatal(err)
			}
			parkedReader(t, c)
			if _, err := raw.Write(b[300:]); err != nil {
				t.Fatal(err)
			}
			if f, ok := readFrame(t, ws).(*link.Ack); !ok || f.MessageID != "m-1" {
				t.Fatalf("got %+v, want the ack of m-1", f)
			}

			b = clientFrame(&link.Message{MessageID: "m-2", Text: strings.Repeat("y", 700)})
			if _, err := raw.Write(b[:300]); err != nil {
				t.Fatal(err)
			}
			parkedReader(t, c)
			raw.Close()
			var detail string
			testwait.Until(t, "the connection's end recorded", func() bool {
				for _, e := range r.ev.Recent(100) {
					if e.Event == events.TerminalDisconnected && e.PeerID == "dev-mid" {
						detail = e.Detail
						return true
					}
				}
				return false
			})
			if !strings.Contains(detail, "unexpected EOF") {
				t.Fatalf("a device that closed mid-frame: %q, want unexpected EOF", detail)
			}
			testwait.Until(t, "the socket out of the poller", func() bool { return r.a.poller.Len() == 0 })
		})
	}
}

// A device's flushConn over a detached socket keeps its meaning: a
// write to a peer that stopped reading finds the socket full (EAGAIN),
// waits its stall period for room and fails with errStalled and what
// was left unsent; a slow reader is served.
func TestDetachedFlushConnStall(t *testing.T) {
	const stall = time.Second
	payload := make([]byte, 4<<20)
	detach := func(t *testing.T) (client net.Conn, fc *flushConn) {
		p, err := readiness.NewPoller()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		client, server := tcpPair(t)
		rc, err := readiness.Detach(server, p, readiness.Func(func() {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rc.Close() })
		return client, newFlushConn(rc, stall)
	}
	t.Run("slow reader", func(t *testing.T) {
		client, fc := detach(t)
		done := make(chan error, 1)
		go func() { _, err := fc.Write(payload); done <- err }()
		readSlowly(t, client, len(payload))
		if err := <-done; err != nil {
			t.Fatalf("write to a slow reader: %v", err)
		}
	})
	t.Run("stopped reader", func(t *testing.T) {
		_, fc := detach(t)
		n, err := fc.Write(payload)
		want := fmt.Sprintf("write made no progress for %s (%d bytes unsent)", stall, len(payload)-n)
		if !errors.Is(err, errStalled) || err.Error() != want || n == 0 {
			t.Fatalf("write to a reader that stopped: %d bytes, %v; want %q", n, err, want)
		}
	})
}
