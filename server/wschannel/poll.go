package wschannel

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"reflect"
	"syscall"
	"time"
	"unsafe"

	"termlink/server/wschannel/readiness"
)

// An idle connection holds no goroutine: where the system has a poller
// (package readiness: Linux's epoll), a connection with nothing to read
// is only registered there, and its deadline (idle, connect or close
// grace; setReadDeadline) is a timer on the adapter's one wheel, not a
// read deadline on its socket. When the socket has data, or its deadline
// passes, or the writer closes it, the poller, the wheel or the writer
// hands the connection to a stepper worker (pollRead), which reads with
// the connection's deadline as the socket's read deadline, steps while
// data is buffered (in gorilla's read buffer, or as plaintext inside a
// tls.Conn, which the socket's readiness does not show), then registers
// it again. A held message (awaitRoom) waits on a goroutine of its own
// while held, as before.
//
// Elsewhere (no poller), or for a socket whose descriptor cannot be had,
// a connection has its own goroutine (serve), as before.

// sweepTick is the wheel's precision: a connection is closed at most
// this long after its deadline.
const sweepTick = 100 * time.Millisecond

// readiness returns the adapter's poller and wheel, started at the first
// connection; nil when there is no poller or the adapter has stopped.
func (a *terminalAdapter) readiness() (*readiness.Poller, *readiness.Wheel) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped || a.noPoll {
		return nil, nil
	}
	if a.poller == nil {
		p, err := readiness.NewPoller()
		if err != nil {
			a.noPoll = true
			return nil, nil
		}
		a.poller, a.wheel = p, readiness.NewWheel(sweepTick)
	}
	return a.poller, a.wheel
}

// stopReadiness stops the poller and the wheel (Close, once every
// connection has ended).
func (a *terminalAdapter) stopReadiness() {
	a.mu.Lock()
	p, w := a.poller, a.wheel
	a.poller, a.wheel, a.noPoll = nil, nil, true
	a.mu.Unlock()
	if p != nil {
		p.Close()
		w.Stop()
	}
}

// pollInit registers c with the poller (before start): false means c
// gets a goroutine of its own (serve).
func (c *wsConn) pollInit() bool {
	p, w := c.a.readiness()
	if p == nil {
		return false
	}
	h, isTLS, ok := c.detachSocket(p)
	if !ok { // the socket stays in Go's poller too
		fd, tlsIn, ok := socketFD(c.nc.Conn)
		if !ok {
			return false
		}
		var err error
		if h, err = p.Register(fd, c); err != nil {
			return false
		}
		isTLS = tlsIn
	}
	c.ph, c.tlsIn, c.lookFirst = h, isTLS, true
	w.Init(&c.dl, c)
	return true
}

// detachSocket takes the connection's TCP socket out of Go's poller
// (readiness.Detach): the wrapper that holds it then holds a
// readiness.Conn, read and written through the poller, and an idle
// connection keeps no netFD, addresses or poll descriptor. It reports
// false where the socket cannot be detached (a tls.Conn holds it
// directly, a descriptor cannot be duplicated): the caller registers the
// socket as it is.
func (c *wsConn) detachSocket(p *readiness.Poller) (h *readiness.Handle, isTLS, ok bool) {
	slot, tcp, isTLS := socketSlot(&c.nc)
	if slot == nil {
		return nil, false, false
	}
	if err := readiness.DetachInto(&c.sock, tcp, p, c); err != nil {
		return nil, false, false
	}
	*slot = &c.sock
	if gc, ok := c.nc.Conn.(*guardedConn); ok && c.guard.adopt(gc) {
		c.nc.Conn = &c.guard // the guard's 48-byte wrapper goes
	}
	return c.sock.Handle(), isTLS, true
}

// socketSlot finds the *net.TCPConn under nc's wrappers and the field
// that holds it; a nil slot when there is none or a tls.Conn holds it
// (its field cannot be set). Nothing else may use the connection
// meanwhile (before the reader and the writer start).
func socketSlot(nc *flushConn) (slot *net.Conn, tcp *net.TCPConn, isTLS bool) {
	cur, slot := nc.Conn, &nc.Conn
	for {
		switch x := cur.(type) {
		case *tls.Conn:
			cur, slot, isTLS = x.NetConn(), nil, true
		case *stallConn:
			cur, slot = x.Conn, &x.Conn
		case *guardedConn:
			cur, slot = x.Conn, &x.Conn
		case *net.TCPConn:
			if slot == nil {
				return nil, nil, isTLS
			}
			return slot, x, isTLS
		default:
			return nil, nil, isTLS
		}
	}
}

// socketFD finds the socket's descriptor under nc's wrappers, and whether
// TLS is one of them.
func socketFD(nc net.Conn) (fd int, isTLS, ok bool) {
	for {
		switch x := nc.(type) {
		case *tls.Conn:
			nc, isTLS = x.NetConn(), true
		case *stallConn:
			nc = x.Conn
		case *guardedConn:
			nc = x.Conn
		case syscall.Conn:
			raw, err := x.SyscallConn()
			if err != nil {
				return 0, false, false
			}
			fd = -1
			if raw.Control(func(f uintptr) { fd = int(f) }) != nil || fd < 0 {
				return 0, false, false
			}
			return fd, isTLS, true
		default:
			return 0, false, false
		}
	}
}

// Readable is the poller's call (on its loop: it must not block).
func (c *wsConn) Readable() { c.a.steps.Run(c) }

// Expired is the wheel's call (on its goroutine: it must not
// block): a connection waiting in the poller past its deadline is
// stepped, and its read times out as the socket's would have.
func (c *wsConn) Expired() {
	if by := c.readBy.Load(); time.Now().UnixNano() < by { // moved meanwhile
		c.dl.Reset(time.Unix(0, by))
		return
	}
	if c.ph.Kick() {
		c.a.steps.Run(c)
	}
}

// setReadBy sets the deadline of the reader's next read.
func (c *wsConn) setReadBy(t time.Time) {
	if c.ph == nil {
		_ = c.nc.SetReadDeadline(t)
		return
	}
	c.readBy.Store(t.UnixNano())
	c.dl.Reset(t)
}

// pastDeadline is a read deadline in the past: a read returns at once.
var pastDeadline = time.Unix(1, 0)

// pollRead runs on a stepper worker: it steps the connection while it
// has data, then has it wait in the poller (or a held message wait on a
// goroutine of its own), until the connection ends. The reader holds a
// box (box.go) from here until it arms the poller.
func (c *wsConn) pollRead() {
	step := !c.lookFirst
	c.lookFirst = false
	c.mu.Lock()
	c.readerHolds = true
	c.bindLocked()
	c.mu.Unlock()
	br := &c.box.br
	var waitErr error // why waiting for data failed
	for {
		if step {
			if c.held == nil && br.Buffered() == 0 && waitErr == nil {
				// The socket's read deadline bounds this step's reads only.
				_ = c.nc.SetReadDeadline(time.Unix(0, c.readBy.Load()))
				_, waitErr = br.Peek(1)
			}
			if !c.step(waitErr) {
				c.pollEnd()
				return
			}
		}
		step = true
		if c.held != nil {
			go c.hold() // the box stays: the device's next frames may be buffered
			return
		}
		if br.Buffered() > 0 {
			continue
		}
		if waits, err := c.plaintextWaits(); waits {
			waitErr = err
			continue
		}
		_ = c.nc.SetReadDeadline(time.Time{}) // no runtime timer while idle
		releaseTLSInput(c.tlsConn())
		c.mu.Lock()
		c.readerHolds = false
		c.unbindLocked()
		c.mu.Unlock()
		if c.ph.Arm() {
			return // c is the poller's (or the wheel's, or the writer's) now
		}
		// Removed (the socket is closing) or refused: read now.
		c.mu.Lock()
		c.readerHolds = true
		c.bindLocked()
		c.mu.Unlock()
		br = &c.box.br
	}
}

// plaintextWaits reports whether a TLS connection holds decrypted or
// whole records the socket's readiness will not show, with a read that
// cannot wait (a past deadline; a timeout is not sticky for tls.Conn).
// A read error other than a timeout is returned for the next step.
func (c *wsConn) plaintextWaits() (bool, error) {
	if !c.tlsIn {
		return false, nil
	}
	_ = c.nc.SetReadDeadline(pastDeadline)
	_, err := c.box.br.Peek(1)
	var ne net.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ne) && ne.Timeout():
		return false, nil
	}
	return true, err
}

// tlsConn is the tls.Conn at the top of the connection's socket (nil:
// plain, or TLS below a wrapper).
func (c *wsConn) tlsConn() *tls.Conn {
	if !c.tlsIn {
		return nil
	}
	tc, _ := c.nc.Conn.(*tls.Conn)
	return tc
}

// hold waits for the held message's room on a goroutine of its own, then
// has the connection stepped (resumeHeld).
func (c *wsConn) hold() {
	c.awaitRoom()
	c.a.steps.Run(c)
}

// pollEnd is the end of a polled connection (serve's, for a goroutine).
func (c *wsConn) pollEnd() {
	c.dl.Stop()
	c.ph.Remove()
	c.a.m.WebSockets.Add("", -1)
	c.a.wg.Done()
}

// closeSocket closes the connection's socket, out of the poller first
// (its descriptor's number may be reused at once); a reader waiting in
// the poller is stepped to see it closed. Under TLS the socket is closed
// beneath the tls.Conn: no close_notify alert, a record and a write more
// per connection, which a restart's thousands of closes can spare (the
// WebSocket close frame, or its absence, is what ends the session).
func (c *wsConn) closeSocket() {
	kick := c.ph != nil && c.ph.Remove()
	if tc := c.tlsConn(); tc != nil {
		_ = tc.NetConn().Close()
	} else {
		c.nc.Close()
	}
	if kick {
		c.a.steps.Run(c)
	}
}

// A tls.Conn keeps the buffers it read its handshake into for as long as
// it lives: its raw input (about 2 KiB, grown for the ClientHello) and
// its handshake buffer (about 1.5 KiB), most of a TLS connection's cost
// beyond the plain one's. crypto/tls offers no way to let them go, so
// releaseTLSInput sets them to their zero values when they hold nothing
// (the reader's own state: only tls.Conn's Read path touches them, under
// its input lock, and the reader is the only one to call Read); the next
// read grows the raw input again. The fields are found by name and type
// once (tlsInput); on a Go whose tls.Conn does not have them so, nothing
// is released (TestTLSInputFieldsFound says so).
//
// A server's tls.Conn also keeps, once its handshake is done, what only
// two things use: the exporter secret in the closure behind
// ConnectionState().ExportKeyingMaterial (ekm), and the resumption
// secret, which a TCP server uses only to make the session tickets it
// sends during the handshake. termserver uses neither afterwards, so
// releaseTLSInput also puts noKeyingMaterial (which says so) in ekm's
// place and drops the resumption secret: about 200 bytes of a TLS
// connection's heap. Found the same way (tlsSecrets); key updates keep
// working (they use the traffic secrets, kept).
var tlsInput = func() (f struct {
	rawInput, input, hand uintptr
	ok                    bool
}) {
	t := reflect.TypeFor[tls.Conn]()
	buf, rd := reflect.TypeFor[bytes.Buffer](), reflect.TypeFor[bytes.Reader]()
	raw, ok1 := t.FieldByName("rawInput")
	in, ok2 := t.FieldByName("input")
	hand, ok3 := t.FieldByName("hand")
	if !ok1 || !ok2 || !ok3 || raw.Type != buf || in.Type != rd || hand.Type != buf ||
		len(raw.Index) != 1 || len(in.Index) != 1 || len(hand.Index) != 1 {
		return f
	}
	f.rawInput, f.input, f.hand, f.ok = raw.Offset, in.Offset, hand.Offset, true
	return f
}()

// ekmFunc is the type of tls.Conn's ekm field.
type ekmFunc = func(label string, context []byte, length int) ([]byte, error)

// errNoKeyingMaterial is what ExportKeyingMaterial says once
// releaseTLSInput has let the exporter secret go.
var errNoKeyingMaterial = errors.New("wschannel: termserver does not keep TLS keying material after the handshake")

// noKeyingMaterial takes ekm's place (one func value for every
// connection: nothing is allocated).
var noKeyingMaterial ekmFunc = func(string, []byte, int) ([]byte, error) { return nil, errNoKeyingMaterial }

var tlsSecrets = func() (f struct {
	ekm, resumption uintptr
	ok              bool
}) {
	t := reflect.TypeFor[tls.Conn]()
	ekm, ok1 := t.FieldByName("ekm")
	res, ok2 := t.FieldByName("resumptionSecret")
	if !ok1 || !ok2 || ekm.Type != reflect.TypeFor[ekmFunc]() || res.Type != reflect.TypeFor[[]byte]() ||
		len(ekm.Index) != 1 || len(res.Index) != 1 {
		return f
	}
	f.ekm, f.resumption, f.ok = ekm.Offset, res.Offset, true
	return f
}()

// releaseTLSInput lets go of tc's empty input buffers and its
// after-handshake secrets (see tlsInput); tc may be nil. Only the
// connection's reader calls it, between reads (the handshake is done:
// net/http completes it before the upgrade).
func releaseTLSInput(tc *tls.Conn) {
	if tc == nil {
		return
	}
	base := unsafe.Pointer(tc)
	if tlsSecrets.ok {
		ekm := (*ekmFunc)(unsafe.Add(base, tlsSecrets.ekm))
		if *ekm != nil {
			*ekm = noKeyingMaterial
		}
		*(*[]byte)(unsafe.Add(base, tlsSecrets.resumption)) = nil
	}
	if !tlsInput.ok {
		return
	}
	raw := (*bytes.Buffer)(unsafe.Add(base, tlsInput.rawInput))
	in := (*bytes.Reader)(unsafe.Add(base, tlsInput.input))
	hand := (*bytes.Buffer)(unsafe.Add(base, tlsInput.hand))
	if raw.Len() != 0 || in.Len() != 0 || hand.Len() != 0 {
		return
	}
	*raw = bytes.Buffer{}
	in.Reset(nil)
	*hand = bytes.Buffer{}
}
