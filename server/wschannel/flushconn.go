package wschannel

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// errStalled is matched (errors.Is) by the error of a write that made no
// progress within the write timeout: the peer stopped reading.
var errStalled = errors.New("write made no progress")

// corkLimit is how many bytes a corked connection gathers before it writes
// them out; frames larger than this are written as they come.
const corkLimit = 64 << 10

// corkStart is a cork buffer's first size: most batches are a few frames
// of a few hundred bytes, so a full corkLimit per batch would make most of
// the server's allocation (and GC) for nothing. A buffer grows as needed;
// only buffers up to corkKeep go back to the pool.
const (
	corkStart = 4 << 10
	corkKeep  = 16 << 10
)

var corkPool = sync.Pool{New: func() any { b := make([]byte, 0, corkStart); return &b }}

// flushConn is the net.Conn under a device's WebSocket. It owns the write
// deadlines: a write fails only when the peer accepts no byte of it for
// stall (a slow reader that keeps taking data is never cut off), and
// gorilla's own SetWriteDeadline calls are ignored. Between cork and
// flush, writes are gathered in a pooled buffer, so a batch of frames
// costs one write system call instead of one per frame; an idle
// connection holds no buffer.
type flushConn struct {
	net.Conn
	stall time.Duration

	mu    sync.Mutex
	cork  *[]byte // non-nil between cork and flush
	wrote int64   // bytes the peer has accepted
}

func newFlushConn(c net.Conn, stall time.Duration) *flushConn {
	return &flushConn{Conn: c, stall: stall}
}

// SetWriteDeadline is a no-op: flushConn sets its own deadline per write.
func (c *flushConn) SetWriteDeadline(time.Time) error { return nil }

// SetDeadline sets the read deadline only (see SetWriteDeadline).
func (c *flushConn) SetDeadline(t time.Time) error { return c.Conn.SetReadDeadline(t) }

func (c *flushConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cork != nil {
		if len(*c.cork)+len(p) <= corkLimit {
			*c.cork = append(*c.cork, p...)
			return len(p), nil
		}
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		c.cork = corkPool.Get().(*[]byte)
		if len(p) <= corkLimit {
			*c.cork = append(*c.cork, p...)
			return len(p), nil
		}
	}
	return c.writeLocked(p)
}

// writeLocked writes p, giving the peer stall to accept each next piece.
func (c *flushConn) writeLocked(p []byte) (int, error) {
	done := 0
	for {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.stall))
		n, err := c.Conn.Write(p[done:])
		done += n
		c.wrote += int64(n)
		var ne net.Error
		switch {
		case err == nil:
			return done, nil
		case errors.As(err, &ne) && ne.Timeout() && n > 0:
			continue // progress: another stall period
		case errors.As(err, &ne) && ne.Timeout():
			return done, fmt.Errorf("%w for %s (%d bytes unsent)", errStalled, c.stall, len(p)-done)
		default:
			return done, err
		}
	}
}

// Cork starts gathering writes.
func (c *flushConn) Cork() {
	c.mu.Lock()
	if c.cork == nil {
		c.cork = corkPool.Get().(*[]byte)
	}
	c.mu.Unlock()
}

// Flush writes what was gathered since Cork and stops gathering.
func (c *flushConn) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flushLocked()
}

func (c *flushConn) flushLocked() error {
	if c.cork == nil {
		return nil
	}
	b := c.cork
	c.cork = nil
	_, err := c.writeLocked(*b)
	if cap(*b) <= corkKeep {
		*b = (*b)[:0]
		corkPool.Put(b)
	}
	return err
}
