package wschannel

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/identity"
)

// rawDevice connects a device over a bare TCP socket (no gorilla client,
// no buffers) and reads its connected frame: what the test side keeps
// per connection is the socket alone.
func rawDevice(t *testing.T, url, peerID string) net.Conn {
	t.Helper()
	hostPath := strings.TrimPrefix(url, "ws://")
	host, path, _ := strings.Cut(hostPath, "/")
	nc, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	req := "GET /" + path + " HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(nc, 256)
	for { // the 101 response, to its blank line
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}
	if _, err := nc.Write(clientFrame(&link.Connect{PeerID: peerID})); err != nil {
		t.Fatal(err)
	}
	var h [2]byte // connected: an unmasked text frame under 126 bytes
	if _, err := io.ReadFull(br, h[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(br, make([]byte, h[1]&0x7f)); err != nil {
		t.Fatal(err)
	}
	if br.Buffered() != 0 {
		t.Fatalf("%d bytes after connected", br.Buffered())
	}
	return nc
}

// heapInuse is the heap in use after a full collection.
func heapInuse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestMeasureIdleHeap reports the live heap per idle plain connection
// (the server's side and the test side's bare socket): HeapInuse after
// a collection with N (TERMLINK_MEASURE_N, default 2000) connected and
// silent, less that with none, over N. A figure, not an assertion:
// TERMLINK_MEASURE=1 runs it.
func TestMeasureIdleHeap(t *testing.T) {
	if os.Getenv("TERMLINK_MEASURE") == "" {
		t.Skip("a measurement: TERMLINK_MEASURE=1 runs it")
	}
	n := 2000
	if s := os.Getenv("TERMLINK_MEASURE_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	r := newPollRig(t, false, nil)
	warm := rawDevice(t, r.url, "warm") // the adapter's poller, wheel and pools exist
	defer warm.Close()
	testwait.Until(t, "the first connection armed", func() bool { return polledArmed(r.a) })
	before := heapInuse()
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = rawDevice(t, r.url, fmt.Sprintf("dev-%d", i))
	}
	testwait.Until(t, "every connection waiting for data", func() bool { return polledArmed(r.a) })
	after := heapInuse()
	t.Logf("idle plain connections: %d, heap in use %d -> %d bytes: %d bytes per connection (server side and the test's bare socket)",
		n, before, after, int64(after-before)/int64(n))
	for _, c := range conns {
		c.Close()
	}
}

// A connection keeps its Authorization header's token only until its
// connect frame is accepted: an idle connection holds no credential it
// no longer uses (and no bytes for it).
func TestHeaderTokenLetGoAfterConnect(t *testing.T) {
	r := newPollRig(t, false, func(c *config.Channel) { c.Config.Tokens.ByPeer = map[string]string{"p1": "tok-p1"} })
	b, err := identity.OpenLocalBindings(t.TempDir(), "terminal-dev", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.a.creds = b // before any connection
	ws, _, err := websocket.DefaultDialer.Dial(r.url, http.Header{"Authorization": {"Bearer tok-p1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
	if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: "p1"})); err != nil {
		t.Fatal(err)
	}
	if f, ok := readFrame(t, ws).(*link.Connected); !ok {
		t.Fatalf("connect with the header's token answered %T, want connected", f)
	}
	r.a.mu.Lock() // register took it after the connect was accepted
	c := r.a.peers["p1"]
	r.a.mu.Unlock()
	if c == nil {
		t.Fatal("p1 not registered")
	}
	if tok := c.headerToken(); tok != "" {
		t.Fatalf("the connected connection still holds the header's token %q", tok)
	}
}

// An idle connection is its wsConn and little else: one object, the
// struct with its flushConn, its detached socket and its ConnGuard count
// in it, in the 480-byte size class (what only the connect, mutual TLS,
// a connection with a goroutine of its own, a wait on the other half or
// the end needs is behind pointers, its open time a UnixNano), and
// none of those is an object of its own (they were 48, 96 and 48 bytes
// more).
func TestConnStructSize(t *testing.T) {
	if s := unsafe.Sizeof(wsConn{}); s > 480 {
		t.Fatalf("a wsConn is %d bytes, want at most 480 (the size class an idle connection's struct fits)", s)
	}
	r := newPollRig(t, false, nil)
	connected(t, r, "dev-one")
	testwait.Until(t, "the connection waiting in the poller", func() bool { return polledArmed(r.a) })
	c := onlyConn(t, r.a)
	start, end := uintptr(unsafe.Pointer(c)), uintptr(unsafe.Pointer(c))+unsafe.Sizeof(*c)
	inside := func(p unsafe.Pointer) bool { return uintptr(p) >= start && uintptr(p) < end }
	if !inside(unsafe.Pointer(c.ph)) {
		t.Fatal("the connection's poller handle is not in its wsConn: its detached socket is an object of its own")
	}
	if slot, _, _ := socketSlot(&c.nc); slot != nil {
		t.Fatal("the connection still holds a net.TCPConn")
	}
}

// Behind termserver's listener a connection's count in the ConnGuard is
// in its wsConn too (the guard's wrapper object goes at the detach),
// and its end gives the descriptor back once.
func TestGuardAdopted(t *testing.T) {
	r := newShapedRig(t, false, true, nil)
	ws, _ := connected(t, r, "dev-guarded")
	testwait.Until(t, "the connection waiting in the poller", func() bool { return polledArmed(r.a) })
	c := onlyConn(t, r.a)
	if c.nc.Conn != net.Conn(&c.guard) || c.guard.Conn != net.Conn(&c.sock) || c.guard.g != r.g {
		t.Fatalf("the socket's wrappers are %T over %T, want the wsConn's own guard over its socket", c.nc.Conn, c.guard.Conn)
	}
	if open, _, _, _ := r.g.stats(); open != 1 {
		t.Fatalf("the guard counts %d open connections, want 1", open)
	}
	ws.Close()
	testwait.Until(t, "the connection's end given back to the guard", func() bool { open, _, _, _ := r.g.stats(); return open == 0 })
	if err := c.guard.Close(); err == nil { // a second close: the socket is closed, the count stays
		t.Fatal("closing a closed connection again reported no error")
	}
	if open, _, _, _ := r.g.stats(); open != 0 {
		t.Fatalf("the guard counts %d open connections after a second close, want 0", open)
	}
}

// The open connections are a slice, each connection its index in it: a
// connection's place costs 8 bytes, not a map slot's 30 or so. Removing
// one moves the last into its place; removing one twice, or one never
// listed, changes nothing.
func TestConnsListed(t *testing.T) {
	a := &terminalAdapter{peers: map[string]*wsConn{}}
	cs := make([]*wsConn, 5)
	for i := range cs {
		cs[i] = &wsConn{a: a}
		a.addConnLocked(cs[i])
	}
	check := func(want ...*wsConn) {
		t.Helper()
		if len(a.conns) != len(want) {
			t.Fatalf("%d connections listed, want %d", len(a.conns), len(want))
		}
		for i, c := range a.conns {
			if c.slot != int32(i) {
				t.Fatalf("connection at %d says it is at %d", i, c.slot)
			}
		}
		for _, w := range want {
			if a.conns[w.slot] != w {
				t.Fatal("a connection is not where it says")
			}
		}
	}
	a.unregister(cs[1]) // the last (4) moves to 1
	check(cs[0], cs[4], cs[2], cs[3])
	a.unregister(cs[1])         // again: nothing
	a.unregister(&wsConn{a: a}) // never listed (slot 0): nothing
	a.unregister(cs[3])         // the last itself
	check(cs[0], cs[4], cs[2])
	for _, c := range []*wsConn{cs[0], cs[4], cs[2]} {
		a.unregister(c)
	}
	check()
	for _, c := range a.conns[:cap(a.conns)] {
		if c != nil {
			t.Fatal("a removed connection is still referenced by the list's array")
		}
	}
}
