//go:build linux

package wschannel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"termlink/internal/testwait"
)

// socketPair is a loopback TCP connection: the server's end as
// StallListener hands it out, and the client's.
func socketPair(t *testing.T) (server *stallConn, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := StallListener(ln).Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); client.Close() })
	return s.(*stallConn), client
}

// enter runs g.Enter for c on a goroutine; its answer comes on the channel.
func enter(g *HandshakeGate, c net.Conn) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- g.Enter(context.Background(), c) }()
	return ch
}

// untilWaiting waits until n handshakes have waited for a turn.
func untilWaiting(t *testing.T, g *HandshakeGate, n int64) {
	t.Helper()
	testwait.UntilOK(t, fmt.Sprintf("%d handshakes waiting", n), func() error {
		if w, _, _ := g.Stats(); w != n {
			return fmt.Errorf("%d waited", w)
		}
		return nil
	})
}

// One turn at a time: the second handshake waits while the first holds
// the turn, gets it when the first writes its flight, and a close gives
// a turn back too.
func TestHandshakeGateTakesTurns(t *testing.T) {
	g := NewHandshakeGate(1, time.Hour)
	a, _ := socketPair(t)
	b, _ := socketPair(t)
	c, _ := socketPair(t)
	if err := g.Enter(context.Background(), &guardedConn{Conn: a}); err != nil { // through the guard's wrapper
		t.Fatal(err)
	}
	bDone := enter(g, b)
	untilWaiting(t, g, 1)
	select {
	case err := <-bDone:
		t.Fatalf("b entered while a held the turn: %v", err)
	default:
	}
	if _, err := a.Write([]byte("a's first flight")); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("b after a's flight: %v", err)
	}
	cDone := enter(g, c)
	untilWaiting(t, g, 2)
	b.Close() // a failed handshake: the connection closes without writing
	if err := <-cDone; err != nil {
		t.Fatalf("c after b closed: %v", err)
	}
	c.Close()
	if n := len(g.slots); n != 0 {
		t.Fatalf("%d turns still held", n)
	}
	// A second write, or a write of a connection that never entered,
	// gives back nothing.
	a.Write([]byte("more"))
	if n := len(g.slots); n != 0 {
		t.Fatalf("%d turns held after plain writes", n)
	}
}

// A handshake whose device closed the connection while it waited is
// dropped at its turn, before any work, and the turn passes on.
func TestHandshakeGateDropsADeviceThatLeft(t *testing.T) {
	g := NewHandshakeGate(1, time.Hour)
	a, _ := socketPair(t)
	b, bClient := socketPair(t)
	c, _ := socketPair(t)
	if err := g.Enter(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	bDone := enter(g, b)
	untilWaiting(t, g, 1)
	bClient.Close() // its connect timeout
	// Its FIN has arrived once a peek sees it.
	testwait.UntilOK(t, "b's close reached the server", func() error {
		if !peerClosed(b.Conn) {
			return errors.New("b still open")
		}
		return nil
	})
	a.Write([]byte("flight"))
	if err := <-bDone; !errors.Is(err, errDeviceLeft) {
		t.Fatalf("b: %v, want %v", err, errDeviceLeft)
	}
	if err := g.Enter(context.Background(), c); err != nil { // free at once
		t.Fatal(err)
	}
	if w, d, _ := g.Stats(); w != 1 || d != 1 {
		t.Fatalf("waited %d dropped %d, want 1 and 1", w, d)
	}
	c.Close()
}

// A device with bytes waiting (its ClientHello's rest) or none is there;
// the peek takes no byte.
func TestPeerClosed(t *testing.T) {
	s, cl := socketPair(t)
	if peerClosed(s.Conn) {
		t.Fatal("an open socket with nothing to read reads as closed")
	}
	cl.Write([]byte("hello"))
	testwait.UntilOK(t, "the bytes arrived", func() error {
		if n := waiting(t, s.Conn); n != 5 {
			return fmt.Errorf("%d bytes waiting", n)
		}
		return nil
	})
	if peerClosed(s.Conn) {
		t.Fatal("a socket with bytes waiting reads as closed")
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(s.Conn, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("after the peek: %q, %v", buf, err)
	}
	cl.Close()
	testwait.UntilOK(t, "the close seen", func() error {
		if !peerClosed(s.Conn) {
			return errors.New("open")
		}
		return nil
	})
}

// waiting is how many bytes c's socket holds unread (FIONREAD).
func waiting(t *testing.T, c net.Conn) int {
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	raw.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	})
	return n
}

// No turn within the wait, or the handshake's context ended: the
// handshake fails with the reason, and holds nothing.
func TestHandshakeGateGivesUp(t *testing.T) {
	g := NewHandshakeGate(1, 10*time.Millisecond)
	a, _ := socketPair(t)
	b, _ := socketPair(t)
	if err := g.Enter(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	err := g.Enter(context.Background(), b)
	if err == nil || !strings.Contains(err.Error(), "no turn within 10ms (1 handshakes at a time)") {
		t.Fatalf("b: %v", err)
	}
	g.maxWait = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- g.Enter(ctx, b) }()
	untilWaiting(t, g, 2)
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("b with its context ended: %v", err)
	}
	a.Close()
	if n := len(g.slots); n != 0 {
		t.Fatalf("%d turns held", n)
	}
	if _, _, o := g.Stats(); o != 1 {
		t.Fatalf("%d timed out, want 1", o)
	}
	// A connection not made by StallListener is not gated.
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if err := g.Enter(context.Background(), p); err != nil || len(g.slots) != 0 {
		t.Fatalf("a pipe: %v, %d turns", err, len(g.slots))
	}
}
