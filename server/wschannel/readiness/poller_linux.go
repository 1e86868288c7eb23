//go:build linux

package readiness

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Poller watches sockets for data to read: one epoll instance, one
// goroutine (its loop) for all of them. A Handle's function runs on the
// loop's goroutine: it must not block (hand the work to a worker).
//
// The socket's descriptor may also be in the Go runtime's own epoll set:
// the two are independent. A Handle must be Removed before its socket is
// closed (the descriptor's number may be reused at once).
type Poller struct {
	epfd int
	wake int // eventfd: Close wakes the loop

	// ctl is held (read) around each epoll_ctl and (write) by Close
	// around closing epfd: a handle never touches a closed or reused
	// descriptor number.
	ctl     sync.RWMutex
	ctlDone bool // epfd is closed (ctl)

	// handles are the registered handles by id (an event's Fd): a slice
	// with a list of the free ids, not a map (8 bytes a socket, not about
	// 26; slot 0 is wakeID's). An id is used again once free; an event
	// for the handle that had it is stale by its arm generation (Pad):
	// each handle's generations start where the one registered before
	// started, plus genSpacing.
	mu      sync.Mutex
	handles []*Handle
	free    []uint32
	n       int    // registered
	genBase uint32 // the next handle's first generation
	closed  bool
	done    chan struct{}
}

// Handle is one socket in the Poller.
type Handle struct {
	p  *Poller
	id uint32
	fd int32
	f  Readable

	mu    sync.Mutex
	gen   uint32 // bumped by each Arm and Kick: an event of an older arm is stale
	armed bool   // an event or a Kick runs f once
	added bool   // fd is in the epoll set
	gone  bool   // removed: never armed again

	// A goroutine blocked in Wait (at most one reader and one writer):
	// closed when the socket is ready that way, or removed. Nil while
	// nobody waits, as for an idle socket.
	waitR, waitW chan struct{}
}

const wakeID = 0

// NewPoller starts a poller's loop; Close stops it.
func NewPoller() (*Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("readiness: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("readiness: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeID}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(wake)
		unix.Close(epfd)
		return nil, fmt.Errorf("readiness: epoll_ctl(eventfd): %w", err)
	}
	p := &Poller{epfd: epfd, wake: wake, handles: make([]*Handle, 1), done: make(chan struct{})}
	go p.loop()
	return p, nil
}

// ErrClosed is Register's error after Close.
var ErrClosed = errors.New("readiness: poller closed")

// Register makes a handle for socket descriptor fd; f.Readable runs (on
// the loop's goroutine) once per Arm when fd has data to read, has been
// hung up or has failed. fd is not watched before the first Arm.
func (p *Poller) Register(fd int, f Readable) (*Handle, error) {
	h := new(Handle)
	if err := p.register(h, fd, f); err != nil {
		return nil, err
	}
	return h, nil
}

// register is Register into h (a Conn's own).
func (p *Poller) register(h *Handle, fd int, f Readable) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	var id uint32
	if k := len(p.free); k > 0 {
		id, p.free = p.free[k-1], p.free[:k-1]
	} else {
		id = uint32(len(p.handles))
		p.handles = append(p.handles, nil)
	}
	h.p, h.id, h.fd, h.f, h.gen = p, id, int32(fd), f, p.genBase
	p.genBase += genSpacing
	p.handles[id] = h
	p.n++
	return nil
}

// genSpacing is how far apart the first arm generations of handles
// registered one after the other are: a stale event (of a handle
// removed while the loop held its event) matches the handle that took
// its id only if the two arm generations meet, which takes about a
// million arms of one of them and 4,096 registrations between them.
const genSpacing = 1 << 20

// Arm watches the socket until it is readable (then f runs once). It
// reports false if the handle was removed or epoll refused: the caller
// then reads (blocking) instead of waiting here.
func (h *Handle) Arm() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return false
	}
	h.gen++
	h.armed = true
	if h.ctlLocked() != nil {
		h.armed = false
		return false
	}
	return true
}

// ctlLocked watches the socket for what its owner waits for (h.mu
// held): readable while armed or a reader waits, writable while a writer
// waits, once (EPOLLONESHOT: the loop watches it again for what is still
// waited for after an event). Nothing waited for: nothing to do (after
// an event the socket is not watched).
func (h *Handle) ctlLocked() error {
	var events uint32
	if h.armed || h.waitR != nil {
		events |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if h.waitW != nil {
		events |= unix.EPOLLOUT
	}
	if events == 0 {
		return nil
	}
	op := unix.EPOLL_CTL_MOD
	if !h.added {
		op = unix.EPOLL_CTL_ADD
	}
	ev := unix.EpollEvent{Events: events | unix.EPOLLONESHOT, Fd: int32(h.id), Pad: int32(h.gen)}
	if err := h.p.epollCtl(op, int(h.fd), &ev); err != nil {
		return err
	}
	h.added = true
	return nil
}

// ErrRemoved is Wait's error once the handle is removed (its socket is
// being closed).
var ErrRemoved = errors.New("readiness: socket removed from the poller")

// ErrTimeout is Wait's error when its deadline passes first.
var ErrTimeout = errors.New("readiness: deadline passed")

// Wait blocks until the socket is writable (write) or readable, the
// deadline passes (ErrTimeout; zero: none) or the handle is removed
// (ErrRemoved). It is for a socket read or written without blocking,
// after its read or write found it not ready (EAGAIN): the goroutine
// parks on a channel, not in a system call. At most one goroutine
// waits each way at a time; waiting does not disturb Arm's (an idle
// socket's) single call of f. A wake-up may be spurious: the caller
// tries its read or write again.
func (h *Handle) Wait(write bool, deadline time.Time) error {
	var timer *time.Timer
	var expired <-chan time.Time
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return ErrTimeout
		}
		timer = time.NewTimer(d)
		defer timer.Stop()
		expired = timer.C
	}
	h.mu.Lock()
	if h.gone {
		h.mu.Unlock()
		return ErrRemoved
	}
	ch := make(chan struct{})
	slot := &h.waitR
	if write {
		slot = &h.waitW
	}
	*slot = ch
	if err := h.ctlLocked(); err != nil {
		*slot = nil
		h.mu.Unlock()
		return fmt.Errorf("readiness: watch the socket: %w", err)
	}
	h.mu.Unlock()
	select {
	case <-ch:
	case <-expired:
		h.mu.Lock()
		if *slot == ch {
			*slot = nil
		}
		h.mu.Unlock()
		return ErrTimeout
	}
	h.mu.Lock()
	gone := h.gone
	h.mu.Unlock()
	if gone {
		return ErrRemoved
	}
	return nil
}

// Waiting reports whether a goroutine is blocked in Wait to read, and
// one to write. It lets a test know a read or write is parked.
func (h *Handle) Waiting() (read, write bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waitR != nil, h.waitW != nil
}

// Wake wakes the goroutines blocked in Wait (their deadline moved: they
// look again).
func (h *Handle) Wake() {
	h.mu.Lock()
	h.wakeLocked(true, true)
	h.mu.Unlock()
}

func (h *Handle) wakeLocked(read, write bool) {
	if read && h.waitR != nil {
		close(h.waitR)
		h.waitR = nil
	}
	if write && h.waitW != nil {
		close(h.waitW)
		h.waitW = nil
	}
}

// fire wakes the waiters the event (events, of arm gen) is for, and
// claims an armed handle for a readable socket's event of its arm;
// whatever is still waited for is watched again.
func (h *Handle) fire(gen, events uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	const failed = unix.EPOLLHUP | unix.EPOLLERR
	in := events&(unix.EPOLLIN|unix.EPOLLRDHUP|failed) != 0
	out := events&(unix.EPOLLOUT|failed) != 0
	h.wakeLocked(in, out)
	run := in && h.armed && h.gen == gen
	if run {
		h.armed = false
	}
	if !h.gone {
		_ = h.ctlLocked() // an error: what waits times out, or is kicked
	}
	return run
}

// Kick claims an armed handle as an event would (its caller then runs
// what f would have): it reports false if it was not armed (f runs or
// has run, or the owner is reading). The socket's event, if one comes,
// is stale and ignored.
func (h *Handle) Kick() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.armed {
		return false
	}
	h.armed = false
	h.gen++
	return true
}

// epollCtl is epoll_ctl on an open poller.
func (p *Poller) epollCtl(op, fd int, ev *unix.EpollEvent) error {
	p.ctl.RLock()
	defer p.ctl.RUnlock()
	if p.ctlDone {
		return ErrClosed
	}
	return unix.EpollCtl(p.epfd, op, fd, ev)
}

// Armed reports whether the handle waits for its socket.
func (h *Handle) Armed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.armed
}

// IfArmed runs f if the handle is armed, with no event or Kick claiming
// it meanwhile (f must not call the handle); it reports whether f ran.
// It lets a test look at what an idle connection holds.
func (h *Handle) IfArmed(f func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.armed {
		f()
	}
	return h.armed
}

// Remove takes the socket out of the poller, before it is closed; it
// reports whether the handle was armed (then f will not run: the caller
// has the owner read, to see the socket closed). Idempotent.
func (h *Handle) Remove() (wasArmed bool) {
	h.mu.Lock()
	if h.gone {
		h.mu.Unlock()
		return false
	}
	wasArmed = h.armed
	h.gone, h.armed = true, false
	h.wakeLocked(true, true)
	if h.added {
		_ = h.p.epollCtl(unix.EPOLL_CTL_DEL, int(h.fd), nil)
	}
	h.mu.Unlock()
	p := h.p
	p.mu.Lock()
	if int(h.id) < len(p.handles) && p.handles[h.id] == h {
		p.handles[h.id] = nil
		p.free = append(p.free, h.id)
		p.n--
	}
	p.mu.Unlock()
	return wasArmed
}

// Len is how many handles are registered.
func (p *Poller) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *Poller) loop() {
	defer close(p.done)
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return // cannot happen with a valid epfd; Close still works
		}
		for _, ev := range events[:n] {
			id := uint32(ev.Fd)
			if id == wakeID {
				p.mu.Lock()
				closed := p.closed
				p.mu.Unlock()
				if closed {
					return
				}
				continue
			}
			var h *Handle
			p.mu.Lock()
			if int(id) < len(p.handles) {
				h = p.handles[id]
			}
			p.mu.Unlock()
			if h != nil && h.fire(uint32(ev.Pad), ev.Events) {
				h.f.Readable()
			}
		}
	}
}

// Close stops the loop and waits for it; handles still registered are
// let go (their sockets are their owners'). Idempotent.
func (p *Poller) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return
	}
	p.closed = true
	p.mu.Unlock()
	var one = [8]byte{1}
	_, _ = unix.Write(p.wake, one[:]) // little-endian 1; any nonzero value wakes it
	<-p.done
	p.ctl.Lock()
	p.ctlDone = true
	unix.Close(p.wake)
	unix.Close(p.epfd)
	p.ctl.Unlock()
}
