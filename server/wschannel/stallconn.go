package wschannel

import (
	"errors"
	"net"
	"sync"
	"time"
)

// StallListener hands out ln's connections as stallConns: under a TLS
// listener, a device's flushConn then keeps its meaning (termserver's
// TLS listener, package tlsconf).
func StallListener(ln net.Listener) net.Listener { return stallListener{ln} }

type stallListener struct{ net.Listener }

func (l stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c}, nil
}

// stallConn is the socket under a TLS connection. A write deadline set
// on it bounds a stall, not the whole write: each write (TLS writes a
// record at a time) and each time the peer accepts some bytes of it gets
// the same span again. flushConn gives a
// device's writes that meaning (a slow reader is never cut off, one that
// stopped is); over TLS it must live below the TLS layer, because a
// tls.Conn whose write timed out can never write again.
type stallConn struct {
	net.Conn
	mu   sync.Mutex
	span time.Duration // of the last write deadline; <= 0: none
}

func (c *stallConn) SetWriteDeadline(t time.Time) error {
	c.setSpan(t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *stallConn) SetDeadline(t time.Time) error {
	c.setSpan(t)
	return c.Conn.SetDeadline(t)
}

func (c *stallConn) setSpan(t time.Time) {
	c.mu.Lock()
	c.span = 0
	if !t.IsZero() {
		c.span = time.Until(t)
	}
	c.mu.Unlock()
}

func (c *stallConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	span := c.span
	c.mu.Unlock()
	done := 0
	for {
		if span > 0 {
			_ = c.Conn.SetWriteDeadline(time.Now().Add(span))
		}
		n, err := c.Conn.Write(p[done:])
		done += n
		var ne net.Error
		if err == nil || n == 0 || span <= 0 || !errors.As(err, &ne) || !ne.Timeout() {
			return done, err
		}
		// progress: another span
	}
}
