//go:build linux

package readiness

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Conn is a TCP socket taken out of Go's own poller (Detach): the
// poller's Handle is all it has there. What the runtime keeps for a
// net.TCPConn — its netFD, its two addresses, its poll descriptor and
// that descriptor's timers — an idle connection no longer holds (with
// the rest of the branch that brought it, idle-rss.sh measured 4.2 KiB
// per idle plain connection at 10,000 before and 3.4 KiB after). It reads and writes the descriptor without blocking; a
// read or write that finds the socket not ready waits through the
// Handle (Wait: a parked goroutine, no system call) until its deadline,
// as a net.Conn's would. Errors are net's: a *net.OpError whose Err is
// os.ErrDeadlineExceeded (a timeout), net.ErrClosed, or the system
// call's; io.EOF at the end of the stream.
type Conn struct {
	h Handle // its descriptor's, in the poller

	// use counts the system calls on fd under way (enter and exit around
	// each), plus closedBit once Close began: Close waits for the count
	// to drain before it closes fd, so a read or write never reaches a
	// closed or reused descriptor number. Four bytes where a
	// sync.RWMutex and a flag took 32: the Conn fits 96 bytes, not 112
	// (TestConnSize); every idle connection holds one.
	use atomic.Int32

	rd, wd atomic.Int64 // read and write deadlines, UnixNano; 0: none
}

// closedBit is set in Conn.use by Close.
const closedBit = 1 << 30

// enter counts a system call on fd; false when the Conn is closed (no
// call may be made).
func (c *Conn) enter() bool {
	if c.use.Add(1)&closedBit != 0 {
		c.use.Add(-1)
		return false
	}
	return true
}

// exit ends what enter began.
func (c *Conn) exit() { c.use.Add(-1) }

// Detach moves tc's socket into p: it duplicates its descriptor,
// registers the duplicate with f (see Register), and closes tc (its
// descriptor, its place in Go's poller). On an error tc is untouched.
// Nothing may use tc meanwhile.
func Detach(tc *net.TCPConn, p *Poller, f Readable) (*Conn, error) {
	c := new(Conn)
	if err := DetachInto(c, tc, p, f); err != nil {
		return nil, err
	}
	return c, nil
}

// DetachInto is Detach into c, a zero Conn the caller holds (a field of
// its own per-connection struct: one object less per connection). c
// must not move or be used otherwise until Close.
func DetachInto(c *Conn, tc *net.TCPConn, p *Poller, f Readable) error {
	raw, err := tc.SyscallConn()
	if err != nil {
		return fmt.Errorf("readiness: detach: %w", err)
	}
	fd := -1
	var dupErr error
	if err := raw.Control(func(s uintptr) {
		fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return fmt.Errorf("readiness: detach: %w", err)
	}
	if dupErr != nil {
		return fmt.Errorf("readiness: detach: duplicate the socket's descriptor: %w", dupErr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fmt.Errorf("readiness: detach: %w", err)
	}
	if err := p.register(&c.h, fd, f); err != nil {
		unix.Close(fd)
		return err
	}
	_ = tc.Close() // the socket stays open through fd
	return nil
}

// Handle is the Conn's handle in its poller.
func (c *Conn) Handle() *Handle { return &c.h }

// fd is the socket's descriptor.
func (c *Conn) fd() int { return int(c.h.fd) }

func opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Err: err}
}

// deadline is d (UnixNano) as a time; zero for none.
func deadline(d int64) time.Time {
	if d == 0 {
		return time.Time{}
	}
	return time.Unix(0, d)
}

func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if d := c.rd.Load(); d != 0 && time.Now().UnixNano() >= d {
			return 0, opError("read", os.ErrDeadlineExceeded)
		}
		if !c.enter() {
			return 0, opError("read", net.ErrClosed)
		}
		n, err := syscall.Read(c.fd(), p) // syscall's, not unix's: the race detector's order of socket I/O (a write before any later read) is syscall's
		c.exit()
		switch {
		case err == nil && n > 0:
			return n, nil
		case err == nil:
			return 0, io.EOF
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if err := c.wait(false, c.rd.Load()); err != nil {
				return 0, opError("read", err)
			}
		default:
			return 0, opError("read", os.NewSyscallError("read", err))
		}
	}
}

func (c *Conn) Write(p []byte) (int, error) {
	if d := c.wd.Load(); d != 0 && time.Now().UnixNano() >= d {
		return 0, opError("write", os.ErrDeadlineExceeded)
	}
	done := 0
	for done < len(p) {
		if !c.enter() {
			return done, opError("write", net.ErrClosed)
		}
		n, err := syscall.Write(c.fd(), p[done:])
		c.exit()
		if n > 0 {
			done += n
		}
		switch {
		case err == nil || err == syscall.EINTR:
		case err == syscall.EAGAIN:
			if err := c.wait(true, c.wd.Load()); err != nil {
				return done, opError("write", err)
			}
		default:
			return done, opError("write", os.NewSyscallError("write", err))
		}
	}
	return done, nil
}

// wait waits for the socket through the handle, until deadline d.
func (c *Conn) wait(write bool, d int64) error {
	switch err := c.h.Wait(write, deadline(d)); {
	case err == nil:
		return nil
	case errors.Is(err, ErrTimeout):
		return os.ErrDeadlineExceeded
	case errors.Is(err, ErrRemoved):
		return net.ErrClosed
	default:
		return err
	}
}

// Close takes the socket out of the poller and closes it.
func (c *Conn) Close() error {
	for {
		u := c.use.Load()
		if u&closedBit != 0 {
			return opError("close", net.ErrClosed)
		}
		if c.use.CompareAndSwap(u, u|closedBit) {
			break
		}
	}
	c.h.Remove() // wakes a read or write waiting: it sees c closed
	// The calls under way are single non-blocking system calls: they end
	// at once.
	for c.use.Load() != closedBit {
		runtime.Gosched()
	}
	if err := unix.Close(c.fd()); err != nil {
		return opError("close", os.NewSyscallError("close", err))
	}
	return nil
}

// CloseWrite shuts down the writing side of the connection.
func (c *Conn) CloseWrite() error {
	if !c.enter() {
		return opError("close", net.ErrClosed)
	}
	defer c.exit()
	return unix.Shutdown(c.fd(), unix.SHUT_WR)
}

func (c *Conn) addr(get func(int) (unix.Sockaddr, error)) net.Addr {
	a := &net.TCPAddr{}
	if !c.enter() {
		return a
	}
	defer c.exit()
	switch sa, _ := get(c.fd()); sa := sa.(type) {
	case *unix.SockaddrInet4:
		a.IP, a.Port = net.IP(sa.Addr[:]).To16(), sa.Port
	case *unix.SockaddrInet6:
		a.IP, a.Port = net.IP(sa.Addr[:]), sa.Port
	}
	return a
}

// LocalAddr and RemoteAddr ask the system (an idle connection keeps no
// address).
func (c *Conn) LocalAddr() net.Addr  { return c.addr(unix.Getsockname) }
func (c *Conn) RemoteAddr() net.Addr { return c.addr(unix.Getpeername) }

func (c *Conn) SetDeadline(t time.Time) error {
	c.rd.Store(nanos(t))
	c.wd.Store(nanos(t))
	c.h.Wake()
	return nil
}

func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rd.Store(nanos(t))
	c.h.Wake()
	return nil
}

func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wd.Store(nanos(t))
	c.h.Wake()
	return nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if n := t.UnixNano(); n != 0 {
		return n
	}
	return 1
}
