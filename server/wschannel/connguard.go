package wschannel

import (
	"container/list"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"sync"
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
type ConnGuard struct {
	fds *fdbudget.Pool

	mu    sync.Mutex
	open  int
	idle  *list.List // of *guardedConn not in a request (new or idle), longest first
	shed  int64      // connections not in a request closed to make room
	refus int64      // connections refused with 503
}

// NewConnGuard guards connections with fds, the budget's Sockets pool.
func NewConnGuard(fds *fdbudget.Pool) *ConnGuard {
	return &ConnGuard{fds: fds, idle: list.New()}
}

// guardedConn is a counted connection; Close uncounts it once. It lives
// as long as its device's WebSocket: 48 bytes (closed under g.mu, not a
// sync.Once of its own).
type guardedConn struct {
	net.Conn
	g      *ConnGuard
	elem   *list.Element // in g.idle while not in a request; guarded by g.mu
	closed bool          // Close has uncounted it; guarded by g.mu
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.g.mu.Lock()
	if c.closed {
		c.g.mu.Unlock()
		return err
	}
	c.g.open--
	c.closed = true
	if c.elem != nil {
		c.g.idle.Remove(c.elem)
		c.elem = nil
	}
	c.g.mu.Unlock()
	c.g.fds.Release(1)
	return err
}

// adopt takes over gc's count (into c, a zero guardedConn inside the
// connection's own struct), so that a device's WebSocket keeps no
// wrapper object of its own: after the hijack nothing but the WebSocket
// holds gc (net/http forgets a hijacked connection, and the guard's
// list holds only connections not in a request). gc is left counted
// as closed: its Close would uncount nothing. False (nothing done) if
// gc is closed or listed.
func (c *guardedConn) adopt(gc *guardedConn) bool {
	g := gc.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.closed || gc.elem != nil {
		return false
	}
	c.Conn, c.g = gc.Conn, g
	gc.closed = true
	return true
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
			gc := &guardedConn{Conn: c, g: g}
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

// stats reports open connections, those not in a request (new or idle),
// and the counts of such connections shed and connections refused since
// start.
func (g *ConnGuard) stats() (open, idle int, shed, refused int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.idle.Len(), g.shed, g.refus
}
