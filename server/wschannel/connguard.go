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
// however many idle keep-alive connections a client piles up, and a
// message is never refused for "too many open files".
//
// It wraps the listener (every accepted connection holds one descriptor
// of the budget until it is closed) and follows http.Server's ConnState:
// connections idle between requests are kept in least-recently-idle
// order. When the budget has no room for an accepted connection, the
// connection idle the longest is closed to make room (an HTTP client
// reopens a keep-alive connection it finds closed); when none is idle —
// every connection is a device or a request in progress — the new
// connection gets a plain HTTP 503 and is closed (its descriptor is one of
// fdbudget.Base's).
type ConnGuard struct {
	fds *fdbudget.Pool

	mu    sync.Mutex
	open  int
	idle  *list.List // of *guardedConn, longest idle first
	shed  int64      // idle connections closed to make room
	refus int64      // connections refused with 503
}

// NewConnGuard guards connections with fds, the budget's Sockets pool.
func NewConnGuard(fds *fdbudget.Pool) *ConnGuard {
	return &ConnGuard{fds: fds, idle: list.New()}
}

// guardedConn is a counted connection; Close uncounts it once.
type guardedConn struct {
	net.Conn
	g    *ConnGuard
	once sync.Once
	elem *list.Element // in g.idle while idle; guarded by g.mu
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.mu.Lock()
		c.g.open--
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
// connection idle the longest to make room if needed; nil: refused.
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

// ConnState is http.Server's hook: it tracks which connections are idle.
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
	if state == http.StateIdle {
		gc.elem = g.idle.PushBack(gc)
	}
}

// stats reports open connections, idle ones, and the counts of idle
// connections shed and connections refused since start.
func (g *ConnGuard) stats() (open, idle int, shed, refused int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.idle.Len(), g.shed, g.refus
}
