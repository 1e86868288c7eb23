package wschannel

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"termlink/internal/testwait"
	"termlink/server/fdbudget"
)

// socketsOnly is the sockets' share of a descriptor budget with room
// for just n more connections.
func socketsOnly(n int) *fdbudget.Pool {
	p := fdbudget.New(1024).Pool(fdbudget.Sockets)
	held := 0
	for p.TryAcquire(1) {
		held++
	}
	p.Release(n)
	return p
}

// guardedServer serves /healthz (and /hold, which hijacks and keeps the
// connection, as a WebSocket upgrade does) behind a ConnGuard of limit.
func guardedServer(t *testing.T, limit int) (addr string, g *ConnGuard) {
	t.Helper()
	g = NewConnGuard(socketsOnly(limit))
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	var heldMu sync.Mutex
	var held []net.Conn
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
		heldMu.Lock()
		held = append(held, c)
		heldMu.Unlock()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// No header timeout cuts a connection in its headers while a test
	// runs: only the guard does.
	hs := &http.Server{Handler: mux, ConnState: g.ConnState, ReadHeaderTimeout: time.Hour}
	go hs.Serve(g.Listener(ln))
	t.Cleanup(func() {
		hs.Close()
		heldMu.Lock()
		for _, c := range held {
			c.Close()
		}
		heldMu.Unlock()
	})
	return ln.Addr().String(), g
}

// keepAliveGet sends one GET on a new connection, reads the answer and
// returns the connection, left open (idle keep-alive).
func keepAliveGet(t *testing.T, addr, path string) (net.Conn, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, "error: " + err.Error()
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.SetDeadline(time.Time{})
	return c, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
}

func waitGuard(t *testing.T, g *ConnGuard, what string, ok func(open, idle int) bool) {
	t.Helper()
	testwait.UntilOK(t, what, func() error {
		if open, idle, _, _ := g.stats(); !ok(open, idle) {
			return fmt.Errorf("open=%d idle=%d", open, idle)
		}
		return nil
	})
}

// Idle keep-alive connections cannot fill the server: past the limit the
// one idle longest is closed and the newcomer is served.
func TestConnGuardShedsIdleKeepAlive(t *testing.T) {
	addr, g := guardedServer(t, 4)
	var idle []net.Conn
	for i := 0; i < 4; i++ {
		c, got := keepAliveGet(t, addr, "/healthz")
		if got != "200 ok" {
			t.Fatalf("request %d: %s", i, got)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	waitGuard(t, g, "four idle", func(open, idle int) bool { return open == 4 && idle == 4 })
	for i := 0; i < 3; i++ { // each newcomer pushes out the oldest idle one
		c, got := keepAliveGet(t, addr, "/healthz")
		if got != "200 ok" {
			t.Fatalf("request past the limit %d: %s, want 200 ok", i, got)
		}
		defer c.Close()
	}
	// The first three idle connections were closed by the server.
	for i, c := range idle[:3] {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("idle connection %d still open after being shed", i)
		}
	}
	if _, _, shed, _ := g.stats(); shed != 3 {
		t.Errorf("shed = %d, want 3", shed)
	}
	waitGuard(t, g, "at the limit", func(open, idle int) bool { return open <= 4 })
}

// When every connection is busy (hijacked, like devices), a newcomer gets
// a clear 503 instead of the listener running out of descriptors.
func TestConnGuardRefusesWhenNoneIdle(t *testing.T) {
	addr, g := guardedServer(t, 2)
	for i := 0; i < 2; i++ {
		c, got := keepAliveGet(t, addr, "/hold")
		if got != "200 " {
			t.Fatalf("hold %d: %q", i, got)
		}
		defer c.Close()
	}
	waitGuard(t, g, "two held", func(open, idle int) bool { return open == 2 && idle == 0 })
	c, got := keepAliveGet(t, addr, "/healthz")
	if c != nil {
		c.Close()
	}
	if !strings.HasPrefix(got, "503 server at its connection limit") {
		t.Fatalf("past the limit with nothing idle: %q, want 503 with the reason", got)
	}
	if _, _, _, refused := g.stats(); refused != 1 {
		t.Errorf("refused = %d, want 1", refused)
	}
	waitGuard(t, g, "refused one uncounted", func(open, idle int) bool { return open == 2 })
}

// The guard admits what the shared budget has room for: descriptors held
// by agents (or session files) are not there for sockets, and a closed
// connection gives its descriptor back.
func TestConnGuardFollowsTheBudget(t *testing.T) {
	b := fdbudget.New(1024)
	agents := b.Pool(fdbudget.Agents)
	held := 0
	for agents.TryAcquire(1) { // agents take all they may (141), past their floor
		held++
	}
	others := b.Pool(fdbudget.Sockets) // other sockets take the rest (804)
	hog := 0
	for others.TryAcquire(1) {
		hog++
	}
	defer others.Release(hog)
	g := NewConnGuard(b.Pool(fdbudget.Sockets))
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux, ConnState: g.ConnState, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(g.Listener(ln))
	t.Cleanup(func() { hs.Close() })
	addr := ln.Addr().String()

	c, got := keepAliveGet(t, addr, "/healthz")
	if c != nil {
		c.Close()
	}
	if !strings.HasPrefix(got, "503 ") {
		t.Fatalf("with agents and other sockets holding every descriptor: %q, want 503", got)
	}
	agents.Release(1)
	c, got = keepAliveGet(t, addr, "/healthz")
	if got != "200 ok" {
		t.Fatalf("with one descriptor given back: %q, want 200 ok", got)
	}
	if used := b.Stats().Used[fdbudget.Sockets]; used != hog+1 {
		t.Fatalf("sockets hold %d descriptors with one connection open, want %d", used, hog+1)
	}
	c.Close()
	testwait.Until(t, "the sockets' descriptor given back after the client closed", func() bool { return b.Stats().Used[fdbudget.Sockets] == hog })
	agents.Release(held - 1)
}

// slowHeaders opens a connection and sends part of a request line, as a
// client does that sends its headers a byte at a time: net/http holds it
// in StateNew until the header timeout.
func slowHeaders(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /heal"); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedByServer reports whether the server closed c (a read ends
// without data) rather than leaving it open until the deadline.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// Connections still sending their headers cannot fill the server either
// (issue 36 row 2): a newcomer closes the one in its headers the longest,
// and is served. Before, only connections idle between requests were
// shed, and every newcomer got 503 until the header timeout (10 s).
func TestConnGuardShedsSlowHeaders(t *testing.T) {
	addr, g := guardedServer(t, 3)
	var slow []net.Conn
	for i := range 3 {
		// Once the guard counts it, it is in the guard's line too: the
		// server calls ConnState(StateNew) before it accepts again.
		slow = append(slow, slowHeaders(t, addr))
		waitGuard(t, g, fmt.Sprintf("%d in their headers", i+1), func(open, idle int) bool { return open == i+1 })
	}
	for i := range 2 { // each newcomer stays open (idle): the budget stays full
		c, got := keepAliveGet(t, addr, "/healthz")
		if got != "200 ok" {
			t.Fatalf("request %d with every descriptor held by connections in their headers: %s, want 200 ok", i, got)
		}
		defer c.Close()
	}
	for i, c := range slow[:2] {
		if !closedByServer(c) {
			t.Errorf("connection %d, in its headers the longest, still open after newcomers came", i)
		}
	}
	if _, _, shed, refused := g.stats(); shed != 2 || refused != 0 {
		t.Errorf("shed = %d, refused = %d, want 2 and 0", shed, refused)
	}
	// The youngest one in its headers is still served once it finishes them.
	if _, err := io.WriteString(slow[2], "thz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	slow[2].SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(slow[2]), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the connection left in its headers: %v %v, want 200", resp, err)
	}
	resp.Body.Close()
}

// Connections out of a request go in the order they became so, whether
// new or idle: the one waiting the longest is shed first.
func TestConnGuardShedsLongestWaitingFirst(t *testing.T) {
	addr, g := guardedServer(t, 3)
	first := slowHeaders(t, addr)
	waitGuard(t, g, "one in its headers", func(open, idle int) bool { return open == 1 })
	second, got := keepAliveGet(t, addr, "/healthz")
	if got != "200 ok" {
		t.Fatal(got)
	}
	defer second.Close()
	waitGuard(t, g, "one in its headers, then one idle", func(open, idle int) bool { return open == 2 && idle == 2 })
	third := slowHeaders(t, addr)
	waitGuard(t, g, "three out of a request", func(open, idle int) bool { return open == 3 })

	// Each newcomer stays open (idle after its answer, so younger than
	// third): the budget stays full.
	a, got := keepAliveGet(t, addr, "/healthz") // sheds first
	if got != "200 ok" {
		t.Fatal(got)
	}
	defer a.Close()
	if !closedByServer(first) {
		t.Fatal("the connection in its headers the longest was not shed first")
	}
	b, got := keepAliveGet(t, addr, "/healthz") // sheds second, idle
	if got != "200 ok" {
		t.Fatal(got)
	}
	defer b.Close()
	if !closedByServer(second) {
		t.Fatal("the idle connection, next in line, was not shed")
	}
	third.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := third.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
		t.Fatalf("the youngest connection in its headers was shed (read: %v)", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A guarded connection lives as long as its device's WebSocket: it stays
// in the 48-byte size class.
func TestGuardedConnSize(t *testing.T) {
	if s := unsafe.Sizeof(guardedConn{}); s > 48 {
		t.Fatalf("a guardedConn is %d bytes, want at most 48", s)
	}
}
