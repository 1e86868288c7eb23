package wschannel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// HandshakeGate lets at most n TLS handshakes at a time do the server's
// share of their work — the key exchange, the ticket or the signature,
// the first flight — in the order their ClientHellos were read, newest
// first once the oldest has waited lifoAfter (overload)
// (tls.Config.GetConfigForClient calls Enter; the turn is given back by
// the first write on the connection, which sends that flight, or by its
// close).
//
// Without it, a reconnect storm (thousands of devices back at once after
// a restart) runs every handshake at once: each gets a sliver of the
// CPU, all finish late together, and those whose device gave up meanwhile
// (its connect timeout, 10 s for link.Client) were work for nothing and
// come back for more. With it, handshakes finish at the same rate but
// in turn, so the first devices are served at once, not all of them
// late; and a handshake whose device closed the connection while it
// waited for its turn is dropped before any of its work is done.
//
// The slot covers the server's CPU only, never a wait for the client:
// the ClientHello has been read before Enter, and the slot is given back
// as the flight is written, before the client's answer is read.
type HandshakeGate struct {
	maxWait, lifoAfter time.Duration
	now                func() time.Time

	mu      sync.Mutex
	turns   int       // how many handshakes may do their work at once
	busy    int       // turns held
	waiters []*waiter // in arrival order, from head on (abandoned ones left in place)
	head    int

	waited  atomic.Int64 // handshakes that waited for a turn
	dropped atomic.Int64 // handshakes dropped: their device left while they waited
	timeout atomic.Int64 // handshakes dropped: no turn within maxWait
}

// waiter is a handshake waiting for a turn; ready is closed when it
// gets one. granted and abandoned are guarded by the gate's mu.
type waiter struct {
	ready     chan struct{}
	since     time.Time
	granted   bool
	abandoned bool
}

// lifoAfter: a gate whose oldest waiter has waited this long is
// overloaded, and gives the next turn to the newest waiter instead.
// Served in arrival order past that point, every handshake would be
// served late, after its device had given up (link.Client's connect
// timeout is 10 s), and the devices' new attempts would queue behind
// them again: a storm that never ends. Served newest first, most
// devices are served while they still wait, and the ones passed over
// give up and come back as the newest.
const lifoAfter = 2 * time.Second

// NewHandshakeGate admits n handshakes at a time (at least 1); one that
// finds no turn within maxWait fails (its device retries).
func NewHandshakeGate(n int, maxWait time.Duration) *HandshakeGate {
	return &HandshakeGate{turns: max(n, 1), maxWait: maxWait, lifoAfter: lifoAfter, now: time.Now}
}

// errDeviceLeft is a handshake dropped at its turn: the device had
// closed the connection (its own connect timeout) while it waited.
var errDeviceLeft = errors.New("the device closed the connection while its TLS handshake waited for a turn")

// heldSlots are the connections holding a turn, by their socket (the
// stallConn under the TLS connection): a package table, so that an idle
// connection carries no field for it. heldN lets every write that is not
// a handshake's skip the table.
var (
	heldN  atomic.Int32
	heldMu sync.Mutex
	held   = map[*stallConn]*HandshakeGate{}
)

// Enter waits for conn's turn (conn is tls.ClientHelloInfo.Conn, a
// connection of the listener tlsconf builds over StallListener). It
// returns an error — the handshake fails and the connection is closed —
// when ctx ends, when no turn came within maxWait, or when the device
// closed the connection while it waited. A connection not made by
// StallListener is not gated.
func (g *HandshakeGate) Enter(ctx context.Context, conn net.Conn) error {
	sc := stallOf(conn)
	if sc == nil || g == nil {
		return nil
	}
	waited, err := g.wait(ctx)
	if err != nil {
		return err
	}
	// Its turn came after a wait: is the device still there?
	if waited && peerClosed(sc.Conn) {
		g.release()
		g.dropped.Add(1)
		return errDeviceLeft
	}
	heldMu.Lock()
	held[sc] = g
	heldN.Add(1)
	heldMu.Unlock()
	return nil
}

// Stats: handshakes that waited for a turn, dropped because their device
// had left, and failed for want of a turn, since start.
func (g *HandshakeGate) Stats() (waited, dropped, timedOut int64) {
	return g.waited.Load(), g.dropped.Load(), g.timeout.Load()
}

// wait takes a turn, waiting for one if none is free (waited); the
// error says why it gave up.
func (g *HandshakeGate) wait(ctx context.Context) (waited bool, err error) {
	g.mu.Lock()
	if g.busy < g.turns && g.head == len(g.waiters) {
		g.busy++
		g.mu.Unlock()
		return false, nil
	}
	w := &waiter{ready: make(chan struct{}), since: g.now()}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	g.waited.Add(1)
	t := time.NewTimer(g.maxWait)
	defer t.Stop()
	select {
	case <-w.ready:
		return true, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = fmt.Errorf("TLS handshake: no turn within %v (%d handshakes at a time): server overloaded", g.maxWait, g.turns)
	}
	g.mu.Lock()
	granted := w.granted
	w.abandoned = !granted
	g.mu.Unlock()
	if granted { // the turn came as it gave up: pass it on
		g.release()
	}
	if err != ctx.Err() {
		g.timeout.Add(1)
	}
	return true, err
}

// release gives back a turn: to the oldest waiter, or to the newest when
// the oldest has waited lifoAfter (overload), or to none.
func (g *HandshakeGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.head < len(g.waiters) && g.waiters[g.head].abandoned {
		g.waiters[g.head] = nil
		g.head++
	}
	for n := len(g.waiters); n > g.head && g.waiters[n-1].abandoned; n-- {
		g.waiters = g.waiters[:n-1]
	}
	if g.head == len(g.waiters) {
		g.waiters, g.head = g.waiters[:0], 0
		g.busy--
		return
	}
	var w *waiter
	if g.now().Sub(g.waiters[g.head].since) >= g.lifoAfter {
		w = g.waiters[len(g.waiters)-1]
		g.waiters = g.waiters[:len(g.waiters)-1]
	} else {
		w = g.waiters[g.head]
		g.waiters[g.head] = nil
		g.head++
	}
	w.granted = true
	close(w.ready)
}

// Held is how many handshakes hold a turn now.
func (g *HandshakeGate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.busy
}

// releaseTurn gives back c's turn, if it holds one.
func releaseTurn(c *stallConn) {
	if heldN.Load() == 0 {
		return
	}
	heldMu.Lock()
	g, ok := held[c]
	if ok {
		delete(held, c)
		heldN.Add(-1)
	}
	heldMu.Unlock()
	if ok {
		g.release()
	}
}

// stallOf finds the stallConn under the guard's wrapper, if any.
func stallOf(c net.Conn) *stallConn {
	for {
		switch x := c.(type) {
		case *guardedConn:
			c = x.Conn
		case *stallConn:
			return x
		default:
			return nil
		}
	}
}
