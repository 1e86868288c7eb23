package wschannel

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"termlink/internal/testwait"
	"termlink/link"
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
