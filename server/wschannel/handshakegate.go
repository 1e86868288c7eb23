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
// the first flight — in the order their ClientHellos were read
// (tls.Config.GetConfigForClient calls Enter; the slot is given back by
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
	slots   chan struct{}
	maxWait time.Duration

	waited  atomic.Int64 // handshakes that waited for a turn
	dropped atomic.Int64 // handshakes dropped: their device left while they waited
	timeout atomic.Int64 // handshakes dropped: no turn within maxWait
}

// NewHandshakeGate admits n handshakes at a time (at least 1); one that
// finds no turn within maxWait fails (its device retries).
func NewHandshakeGate(n int, maxWait time.Duration) *HandshakeGate {
	return &HandshakeGate{slots: make(chan struct{}, max(n, 1)), maxWait: maxWait}
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
	select {
	case g.slots <- struct{}{}:
	default:
		g.waited.Add(1)
		t := time.NewTimer(g.maxWait)
		defer t.Stop()
		select {
		case g.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			g.timeout.Add(1)
			return fmt.Errorf("TLS handshake: no turn within %v (%d handshakes at a time): server overloaded", g.maxWait, cap(g.slots))
		}
		// Its turn came after a wait: is the device still there?
		if peerClosed(sc.Conn) {
			<-g.slots
			g.dropped.Add(1)
			return errDeviceLeft
		}
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

// Held is how many handshakes hold a turn now.
func (g *HandshakeGate) Held() int { return len(g.slots) }

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
		<-g.slots
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
