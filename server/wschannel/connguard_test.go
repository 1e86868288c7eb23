package wschannel

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

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
	hs := &http.Server{Handler: mux, ConnState: g.ConnState, ReadHeaderTimeout: 10 * time.Second}
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		open, idle, _, _ := g.stats()
		if ok(open, idle) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: open=%d idle=%d", what, open, idle)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	for agents.TryAcquire(1) {
		held++
	}
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
		t.Fatalf("with agents holding every descriptor sockets may use: %q, want 503", got)
	}
	agents.Release(1)
	c, got = keepAliveGet(t, addr, "/healthz")
	if got != "200 ok" {
		t.Fatalf("with one descriptor given back: %q, want 200 ok", got)
	}
	if used := b.Stats().Used[fdbudget.Sockets]; used != 1 {
		t.Fatalf("sockets hold %d descriptors with one connection open", used)
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for b.Stats().Used[fdbudget.Sockets] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sockets still hold %d descriptors after the client closed", b.Stats().Used[fdbudget.Sockets])
		}
		time.Sleep(5 * time.Millisecond)
	}
	agents.Release(held - 1)
}
