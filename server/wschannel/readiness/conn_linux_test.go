//go:build linux

package readiness

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"termlink/internal/testwait"
)

// detached is the server side of a TCP pair moved into a poller.
func detached(t *testing.T) (client *net.TCPConn, c *Conn, fired chan struct{}) {
	t.Helper()
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	client, server := tcpPair(t)
	fired = make(chan struct{}, 10)
	c, err = Detach(server, p, Func(func() { fired <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return client, c, fired
}

// Detach closes the net.TCPConn (its descriptor leaves Go's poller) and
// the socket lives on in the Conn: bytes go both ways, the addresses are
// the socket's, Arm still calls f when data comes, and Close ends it
// for the peer.
func TestDetachMovesTheSocket(t *testing.T) {
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	client, server := tcpPair(t)
	fired := make(chan struct{}, 10)
	c, err := Detach(server, p, Func(func() { fired <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the detached net.TCPConn reads %v, want net.ErrClosed", err)
	}
	if got, want := c.RemoteAddr().String(), client.LocalAddr().String(); got != want {
		t.Fatalf("RemoteAddr %s, want %s", got, want)
	}
	if got, want := c.LocalAddr().String(), client.RemoteAddr().String(); got != want {
		t.Fatalf("LocalAddr %s, want %s", got, want)
	}
	if !c.Handle().Arm() {
		t.Fatal("Arm failed")
	}
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	<-fired
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if _, err := c.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("client read %q, %v", buf, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v, want net.ErrClosed", err)
	}
	if _, err := client.Read(buf); err != io.EOF {
		t.Fatalf("the peer reads %v after Close, want EOF", err)
	}
	if p.Len() != 0 {
		t.Fatalf("%d handles left after Close", p.Len())
	}
}

// A read with nothing to read parks (Wait) until data comes, or its
// deadline passes (a timeout, as net's), or the Conn is closed
// (net.ErrClosed); a peer that closes mid-stream is io.EOF after what
// it sent.
func TestConnReadWaits(t *testing.T) {
	client, c, _ := detached(t)
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 5)
		n, _ := io.ReadFull(c, buf)
		got <- buf[:n]
	}()
	if _, err := client.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the read parked for the rest", func() bool { r, _ := c.Handle().Waiting(); return r })
	if _, err := client.Write([]byte("cde")); err != nil {
		t.Fatal(err)
	}
	if b := <-got; string(b) != "abcde" {
		t.Fatalf("read %q, want abcde", b)
	}

	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	_ = c.SetReadDeadline(time.Time{})

	errc := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 1)); errc <- err }()
	testwait.Until(t, "the read parked", func() bool { r, _ := c.Handle().Waiting(); return r })
	c.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read parked when the Conn closed: %v, want net.ErrClosed", err)
	}

	client2, c2, _ := detached(t)
	client2.Write([]byte("xy"))
	client2.Close()
	b, err := io.ReadAll(c2)
	if err != nil || string(b) != "xy" {
		t.Fatalf("read %q, %v from a peer that closed after xy; want xy and EOF", b, err)
	}
}

// A write to a peer that stopped reading fills the socket's buffers
// (EAGAIN), waits for room until its deadline and then fails as a
// timeout, having reported what it wrote; one to a peer that reads
// slowly waits and completes.
func TestConnWriteWaitsForRoom(t *testing.T) {
	payload := bytes.Repeat([]byte("z"), 8<<20)
	_, c, _ := detached(t)
	_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c.Write(payload)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || n <= 0 || n >= len(payload) {
		t.Fatalf("write to a stopped reader: %d bytes, %v; want some bytes and a timeout", n, err)
	}

	client, c2, _ := detached(t)
	done := make(chan error, 1)
	go func() { _, err := c2.Write(payload); done <- err }()
	testwait.Until(t, "the write parked for room", func() bool { _, w := c2.Handle().Waiting(); return w })
	if b, err := io.ReadAll(io.LimitReader(client, int64(len(payload)))); err != nil || len(b) != len(payload) {
		t.Fatalf("client read %d bytes, %v", len(b), err)
	}
	if err := <-done; err != nil {
		t.Fatalf("write to a reader: %v", err)
	}
}

// A read and a write parked at once on one socket each wake for their
// own readiness, and an armed handle still runs f once.
func TestConnReadAndWriteWaitTogether(t *testing.T) {
	client, c, fired := detached(t)
	if !c.Handle().Arm() {
		t.Fatal("Arm failed")
	}
	payload := bytes.Repeat([]byte("w"), 8<<20)
	done := make(chan error, 1)
	go func() { _, err := c.Write(payload); done <- err }()
	testwait.Until(t, "the write parked", func() bool { _, w := c.Handle().Waiting(); return w })
	if _, err := client.Write([]byte("r")); err != nil {
		t.Fatal(err)
	}
	<-fired // the armed handle's f, while the write still waits
	if _, w := c.Handle().Waiting(); !w {
		t.Fatal("the write stopped waiting on a readable event")
	}
	if b, err := io.ReadAll(io.LimitReader(client, int64(len(payload)))); err != nil || len(b) != len(payload) {
		t.Fatalf("client read %d bytes, %v", len(b), err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err != nil || buf[0] != 'r' {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// A detached socket is one object in the 96-byte size class: the Conn
// holds its Handle (not a pointer to a second object), and the Handle
// calls its owner through an interface (no closure per socket).
func TestConnIsOneObject(t *testing.T) {
	if s := unsafe.Sizeof(Conn{}); s > 96 {
		t.Fatalf("a Conn is %d bytes, want at most 96", s)
	}
	if k := reflect.TypeFor[Conn]().Field(0).Type; k != reflect.TypeFor[Handle]() {
		t.Fatalf("a Conn's first field is a %v, want its Handle", k)
	}
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var c Conn
	var owner struct{ Func }
	owner.Func = func() {}
	allocs := testing.AllocsPerRun(100, func() {
		if err := p.register(&c.h, 0, owner); err != nil {
			t.Fatal(err)
		}
		c.h.Remove()
		c.h = Handle{}
	})
	if allocs > 0 {
		t.Fatalf("registering a Conn's handle allocates %.1f times, want none", allocs)
	}
}

// Close while a read, a write (one each way: Wait's rule) and address
// lookups are under way on other goroutines: each ends with net.ErrClosed (or what it did before the
// close), Close returns once, a second Close says ErrClosed, and the
// peer sees the end of the stream (the race detector checks that no
// call reached the descriptor after it was closed).
func TestConnCloseWhileInUse(t *testing.T) {
	client, c, _ := detached(t)
	const users = 8
	started := make(chan struct{}, users)
	done := make(chan error, users)
	for i := range users {
		go func() {
			buf := make([]byte, 64)
			started <- struct{}{}
			for {
				var err error
				switch i {
				case 0:
					_, err = c.Read(buf)
				case 1:
					_, err = c.Write(buf)
				default:
					_ = c.RemoteAddr()
					err = c.CloseWrite()
				}
				if errors.Is(err, net.ErrClosed) {
					done <- nil
					return
				}
			}
		}()
	}
	go func() { _, _ = io.Copy(io.Discard, client) }() // room for the writers
	for range users {
		<-started
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range users {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a second Close: %v, want net.ErrClosed", err)
	}
	if a := c.RemoteAddr().String(); a != (&net.TCPAddr{}).String() {
		t.Fatalf("a closed Conn's RemoteAddr is %s, want the empty address", a)
	}
}
