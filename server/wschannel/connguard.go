package wschannel

import (
	"container/list"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"termlink/server/fdbudget"
)

// ConnGuard admits a TCP connection only while the process's descriptor
// budget (fdbudget.Sockets) has room for it, so that the listener can
// always accept and session files, agents and the write-ahead log always
// find a descriptor: /healthz, the API and new devices stay reachable
// however many idle or slow HTTP connections a client piles up, and a
// message is never refused for "too many open files".
//
// It wraps the listener (every accepted connection holds one descriptor
// of the budget until it is closed) and follows http.Server's ConnState:
// connections that are not in a request — still sending the request line
// and headers of their first request (StateNew, which covers a TLS
// handshake too), or idle between requests (StateIdle, which covers the
// headers of the next one) — are kept in the order they became so. When
// the budget has no room for an accepted connection, the one of them
// waiting the longest is closed to make room: an HTTP client reopens a
// keep-alive connection it finds closed, and a client that takes seconds
// over its headers is the one to go rather than a newcomer; a request in
// progress or a WebSocket (hijacked) is never closed. When none is in
// that state — every connection is a device or a request in progress —
// the new connection gets a plain HTTP 503 and is closed (its descriptor
// is one of fdbudget.Base's).
//
// Shedding is chosen over a shorter header deadline once the budget is
// short: connections reopened as soon as they are cut refill every
// descriptor a deadline frees, whatever its length, and a newcomer would
// still find none; shedding frees one exactly when a newcomer needs it,
// and the newcomer, being the newest, is the last to be shed.
//
// It also paces the first burst of work of each connection (the
// handshake gate): from the first bytes it reads (a TLS ClientHello, or a
// plain request) to its first write (the server's TLS flight, after the
// key exchange and the certificate's signature: most of the CPU a new
// device costs) or its first request, at most HandshakeSlots connections
// at once, the most recent first. Without it a reconnect storm (every
// device of a restarted server dialling within a second or two) runs
// thousands of handshakes interleaved, each at a thousandth of the CPU:
// all finish together, late, and past the 10 s handshake deadline none
// does, so every device retries and the storm starts again (issue 41:
// 10,000 devices over TLS on 2 cores, 90 s to half of them). Paced,
// handshakes finish at the rate the CPU allows, in order; newest first,
// so that /healthz and fresh attempts are answered while the oldest
// waiters, closest to their deadline, give up without costing a
// handshake (the read deadline bounds the wait). The gate never waits for
// the peer: a slot is taken once the bytes are in and given back at the
// first write, so a client that stalls holds none.
type ConnGuard struct {
	fds  *fdbudget.Pool
	gate *handshakeGate

	mu    sync.Mutex
	open  int
	idle  *list.List // of *guardedConn not in a request (new or idle), longest first
	shed  int64      // connections not in a request closed to make room
	refus int64      // connections refused with 503
}

// HandshakeSlots is how many connections may be in their first burst of
// work at once (ConnGuard's handshake gate): twice the CPUs Go uses, at
// least 4 — the burst is CPU and a write, never a wait for the peer.
func HandshakeSlots() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// NewConnGuard guards connections with fds, the budget's Sockets pool.
func NewConnGuard(fds *fdbudget.Pool) *ConnGuard {
	return &ConnGuard{fds: fds, idle: list.New(), gate: newHandshakeGate(HandshakeSlots())}
}

// Gate states of a guardedConn.
const (
	gateBefore int32 = iota // nothing read yet
	gateHeld                // holding a handshake slot
	gateDone                // slot given back (or never needed): no more gating
)

// guardedConn is a counted connection; Close uncounts it once.
type guardedConn struct {
	net.Conn
	g      *ConnGuard
	once   sync.Once
	elem   *list.Element // in g.idle while not in a request; guarded by g.mu
	closed bool          // Close has uncounted it; guarded by g.mu

	gate         atomic.Int32  // gateBefore, gateHeld, gateDone
	readDeadline atomic.Int64  // unix ns of the read deadline; 0: none
	done         chan struct{} // closed by Close: a wait for a slot ends
}

// Read reads; the first bytes a connection reads wait for a handshake
// slot (newest first) before they are handed on, up to the read
// deadline. A wait past it fails the read with os.ErrDeadlineExceeded
// (the bytes are dropped with the connection, which is then useless).
func (c *guardedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.gate.Load() == gateBefore {
		if werr := c.g.gate.acquire(c.done, c.readDeadline.Load()); werr != nil {
			c.gate.Store(gateDone)
			return 0, werr
		}
		if !c.gate.CompareAndSwap(gateBefore, gateHeld) {
			c.g.gate.release() // Close or ConnState ended the burst meanwhile
		}
	}
	return n, err
}

// Write writes; the first write ends the connection's first burst.
func (c *guardedConn) Write(b []byte) (int, error) {
	c.endBurst()
	return c.Conn.Write(b)
}

// endBurst gives back the handshake slot if c holds one, and ends c's
// gating either way.
func (c *guardedConn) endBurst() {
	if c.gate.Load() == gateDone {
		return
	}
	if c.gate.Swap(gateDone) == gateHeld {
		c.g.gate.release()
	}
}

func (c *guardedConn) SetReadDeadline(t time.Time) error {
	c.noteDeadline(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *guardedConn) SetDeadline(t time.Time) error {
	c.noteDeadline(t)
	return c.Conn.SetDeadline(t)
}

func (c *guardedConn) noteDeadline(t time.Time) {
	if t.IsZero() {
		c.readDeadline.Store(0)
	} else {
		c.readDeadline.Store(t.UnixNano())
	}
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		close(c.done)
		c.endBurst()
		c.g.mu.Lock()
		c.g.open--
		c.closed = true
		if c.elem != nil {
			c.g.idle.Remove(c.elem)
			c.elem = nil
		}
		c.g.mu.Unlock()
		c.g.fds.Release(1)
	})
	return err
}

// Listener wraps ln so that every accepted connection is counted.
func (g *ConnGuard) Listener(ln net.Listener) net.Listener {
	return &guardedListener{Listener: ln, g: g}
}

type guardedListener struct {
	net.Listener
	g *ConnGuard
}

// busyResponse answers a connection that finds the server at its limit.
var busyResponse = func() []byte {
	const body = "server at its connection limit (file descriptors): try again later\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		"Connection: close\r\nRetry-After: 5\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if gc := l.g.admit(c); gc != nil {
			return gc, nil
		}
		// Answer without blocking the accept loop for long.
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write(busyResponse)
		_ = c.Close()
	}
}

// admit counts c if the budget has a descriptor for it, closing the
// connection out of a request the longest (new or idle) to make room if
// needed; nil: refused.
func (g *ConnGuard) admit(c net.Conn) *guardedConn {
	for {
		if g.fds.TryAcquire(1) {
			gc := &guardedConn{Conn: c, g: g, done: make(chan struct{})}
			g.mu.Lock()
			g.open++
			g.mu.Unlock()
			return gc
		}
		g.mu.Lock()
		var victim *guardedConn
		if front := g.idle.Front(); front != nil {
			victim = front.Value.(*guardedConn)
			g.idle.Remove(front)
			victim.elem = nil
			g.shed++
		} else {
			g.refus++
		}
		g.mu.Unlock()
		if victim == nil {
			return nil
		}
		_ = victim.Close() // gives its descriptor back: try again
	}
}

// ConnState is http.Server's hook: it tracks which connections are not
// in a request, new (headers or a TLS handshake under way) or idle.
func (g *ConnGuard) ConnState(c net.Conn, state http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	gc, ok := c.(*guardedConn)
	if !ok {
		return
	}
	if state != http.StateNew {
		gc.endBurst() // a request read (plain HTTP), hijacked or closed
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.elem != nil {
		g.idle.Remove(gc.elem)
		gc.elem = nil
	}
	if (state == http.StateNew || state == http.StateIdle) && !gc.closed {
		gc.elem = g.idle.PushBack(gc)
	}
}

// handshakeGate hands out a fixed number of slots; waiters are served
// newest first.
type handshakeGate struct {
	mu      sync.Mutex
	free    int
	waiters []chan struct{} // a stack: the last is served first
}

func newHandshakeGate(slots int) *handshakeGate { return &handshakeGate{free: slots} }

// acquire takes a slot, waiting (newest first) until one is free, done
// is closed (errClosedWhileWaiting) or the deadline (unix ns; 0: none)
// passes (os.ErrDeadlineExceeded).
func (h *handshakeGate) acquire(done <-chan struct{}, deadline int64) error {
	h.mu.Lock()
	if h.free > 0 {
		h.free--
		h.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	h.waiters = append(h.waiters, ch)
	h.mu.Unlock()

	var expired <-chan time.Time
	if deadline != 0 {
		t := time.NewTimer(time.Until(time.Unix(0, deadline)))
		defer t.Stop()
		expired = t.C
	}
	var err error
	select {
	case <-ch:
		return nil
	case <-done:
		err = net.ErrClosed
	case <-expired:
		err = os.ErrDeadlineExceeded
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.waiters, ch); i >= 0 {
		h.waiters = slices.Delete(h.waiters, i, i+1)
		return err
	}
	// Granted as it gave up: pass the slot on.
	h.releaseLocked()
	return err
}

func (h *handshakeGate) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releaseLocked()
}

func (h *handshakeGate) releaseLocked() {
	if n := len(h.waiters); n > 0 {
		ch := h.waiters[n-1]
		h.waiters[n-1] = nil
		h.waiters = h.waiters[:n-1]
		close(ch)
		return
	}
	h.free++
}

// stats: slots free and connections waiting.
func (h *handshakeGate) stats() (free, waiting int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.free, len(h.waiters)
}

// stats reports open connections, those not in a request (new or idle),
// and the counts of such connections shed and connections refused since
// start.
func (g *ConnGuard) stats() (open, idle int, shed, refused int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.idle.Len(), g.shed, g.refus
}
