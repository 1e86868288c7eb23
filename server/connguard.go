package server

import (
	"container/list"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// connGuard keeps the number of open TCP connections below a limit set
// under the process's file descriptor limit, so that the listener can
// always accept: /healthz, the API and new devices stay reachable however
// many idle keep-alive connections a client piles up.
//
// It wraps the listener (every accepted connection is counted until it is
// closed) and follows http.Server's ConnState: connections idle between
// requests are kept in least-recently-idle order. When an accept takes the
// count over the limit, the connection idle the longest is closed to make
// room (an HTTP client reopens a keep-alive connection it finds closed);
// when none is idle — every connection is a device or a request in
// progress — the new connection gets a plain HTTP 503 and is closed.
type connGuard struct {
	limit int

	mu    sync.Mutex
	open  int
	idle  *list.List // of *guardedConn, longest idle first
	shed  int64      // idle connections closed to make room
	refus int64      // connections refused with 503
}

func newConnGuard(limit int) *connGuard {
	return &connGuard{limit: limit, idle: list.New()}
}

// fdConnLimit is the limit on open TCP connections: the soft
// RLIMIT_NOFILE less half of fdReserve. The WebSocket cap
// (maxConnections) leaves the whole fdReserve, so past it there is still
// room for plain HTTP requests, and below this limit there is always a
// descriptor for session files and agent pipes.
func fdConnLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 1024
	}
	if rl.Cur <= fdReserve(rl.Cur)/2+16 {
		return 16
	}
	return int(min(rl.Cur-fdReserve(rl.Cur)/2, 1<<30))
}

// guardedConn is a counted connection; Close uncounts it once.
type guardedConn struct {
	net.Conn
	g    *connGuard
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
	})
	return err
}

// Listener wraps ln so that every accepted connection is counted.
func (g *connGuard) Listener(ln net.Listener) net.Listener {
	return &guardedListener{Listener: ln, g: g}
}

type guardedListener struct {
	net.Listener
	g *connGuard
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
		g := l.g
		gc := &guardedConn{Conn: c, g: g}
		g.mu.Lock()
		g.open++
		var victim *guardedConn
		if g.open > g.limit {
			if front := g.idle.Front(); front != nil {
				victim = front.Value.(*guardedConn)
				g.idle.Remove(front)
				victim.elem = nil
				g.shed++
			}
		}
		refuse := g.open > g.limit && victim == nil
		if refuse {
			g.refus++
		}
		g.mu.Unlock()
		if victim != nil {
			_ = victim.Close()
		}
		if refuse {
			// Answer without blocking the accept loop for long.
			_ = gc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = gc.Write(busyResponse)
			_ = gc.Close()
			continue
		}
		return gc, nil
	}
}

// ConnState is http.Server's hook: it tracks which connections are idle.
func (g *connGuard) ConnState(c net.Conn, state http.ConnState) {
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
func (g *connGuard) stats() (open, idle int, shed, refused int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.idle.Len(), g.shed, g.refus
}
