//go:build linux

package readiness

import (
	"net"
	"syscall"
	"testing"
)

func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func fdOf(t *testing.T, c syscall.Conn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	_ = raw.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// An armed handle runs its function once when data comes, and not again
// until armed again; Kick claims an armed handle (the socket's event is
// then stale); Remove reports whether it was armed and nothing runs
// after it; Close stops the loop.
func TestPollerArmKickRemove(t *testing.T) {
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	client, server := tcpPair(t)
	fired := make(chan struct{}, 10)
	h, err := p.Register(fdOf(t, server), Func(func() { fired <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	if !h.Arm() {
		t.Fatal("Arm failed")
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	<-fired // readable
	if h.Armed() {
		t.Fatal("still armed after its event")
	}
	// Data still unread: a new arm fires again (level-triggered).
	if !h.Arm() {
		t.Fatal("Arm failed")
	}
	<-fired
	if h.Kick() {
		t.Fatal("Kick claimed a handle that was not armed")
	}
	var b [1]byte
	if _, err := server.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	if !h.Arm() || !h.Kick() {
		t.Fatal("Kick did not claim an armed handle")
	}
	if !h.Arm() {
		t.Fatal("Arm failed")
	}
	if !h.Remove() {
		t.Fatal("Remove of an armed handle reported it idle")
	}
	if h.Arm() || h.Remove() {
		t.Fatal("a removed handle was armed or removed again")
	}
	if _, err := client.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if p.Len() != 0 {
		t.Fatalf("%d handles after Remove", p.Len())
	}
	p.Close()
	p.Close()
	if _, err := p.Register(0, Func(func() {})); err != ErrClosed {
		t.Fatalf("Register after Close: %v", err)
	}
	select {
	case <-fired:
		t.Fatal("a removed handle's function ran")
	default:
	}
}

// Handles are kept by id in a slice, a freed id taken again: a socket's
// place costs a pointer, not a map slot. The handle that takes a freed
// id arms with generations far from those of the one that had it, so an
// event of the old handle (held by the loop while it was removed) does
// not run the new one's function.
func TestHandleIDsReused(t *testing.T) {
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	noop := Func(func() {})
	h1, _ := p.Register(0, noop)
	h2, _ := p.Register(0, noop)
	if h1.id == wakeID || h2.id == wakeID || h1.id == h2.id {
		t.Fatalf("ids %d and %d (wake's is %d)", h1.id, h2.id, wakeID)
	}
	old, oldGen := h1.id, h1.gen
	h1.Remove()
	h3, _ := p.Register(0, noop)
	if h3.id != old {
		t.Fatalf("a new handle took id %d, want the freed %d", h3.id, old)
	}
	if p.Len() != 2 || len(p.handles) != 3 {
		t.Fatalf("%d handles registered in %d places, want 2 in 3 (the wake's and two)", p.Len(), len(p.handles))
	}
	h3.mu.Lock()
	h3.armed = true // as Arm, without a socket
	h3.mu.Unlock()
	if h3.fire(oldGen, 1) { // EPOLLIN of the old handle's arm
		t.Fatal("a stale event of the id's old handle ran the new handle's function")
	}
	if !h3.fire(h3.gen, 1) {
		t.Fatal("the new handle's own event did not run its function")
	}
	h2.Remove()
	h3.Remove()
	if p.Len() != 0 {
		t.Fatalf("%d handles after removing all", p.Len())
	}
}
