package wschannel

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// countingConn counts the writes that reach a real connection.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// tcpPair is a connected loopback pair with small socket buffers (64 KiB),
// so a peer that stops reading backs the writer up quickly.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc := <-accepted
	if sc == nil {
		t.Fatal("accept failed")
	}
	client, server = cc.(*net.TCPConn), sc.(*net.TCPConn)
	_ = client.SetReadBuffer(64 << 10)
	_ = server.SetWriteBuffer(64 << 10)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// Frames written between Cork and Flush reach the socket in one write.
func TestFlushConnCorksABatch(t *testing.T) {
	client, server := tcpPair(t)
	cc := &countingConn{Conn: server}
	fc := newFlushConn(cc, 5*time.Second)
	fc.Cork()
	for i := 0; i < 100; i++ {
		if _, err := fc.Write([]byte("frame\n")); err != nil {
			t.Fatal(err)
		}
	}
	if n := cc.writes.Load(); n != 0 {
		t.Fatalf("%d writes before Flush", n)
	}
	if err := fc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := cc.writes.Load(); n != 1 {
		t.Fatalf("%d writes for one batch, want 1", n)
	}
	buf := make([]byte, 600)
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(client, buf); err != nil {
		t.Fatalf("reading the batch: %v", err)
	}
	if _, err := fc.Write([]byte("uncorked")); err != nil || cc.writes.Load() != 2 {
		t.Fatalf("uncorked write: %v, %d writes", err, cc.writes.Load())
	}
}

// A write fails only when the peer takes nothing for the stall period: a
// slow reader is served, a reader that stopped is cut off.
func TestFlushConnStall(t *testing.T) {
	const stall = time.Second
	payload := make([]byte, 4<<20)

	t.Run("slow reader", func(t *testing.T) {
		client, server := tcpPair(t)
		fc := newFlushConn(server, stall)
		done := make(chan error, 1)
		go func() { _, err := fc.Write(payload); done <- err }()
		readSlowly(t, client, len(payload))
		if err := <-done; err != nil {
			t.Fatalf("write to a slow reader: %v", err)
		}
	})
	t.Run("stopped reader", func(t *testing.T) {
		_, server := tcpPair(t)
		fc := newFlushConn(server, stall)
		_, err := fc.Write(payload)
		if !errors.Is(err, errStalled) {
			t.Fatalf("write to a reader that stopped: %v, want errStalled", err)
		}
	})
}

// readSlowly takes total bytes from c, 256 KiB every 100 ms: a write of
// 4 MiB lasts more than a second, far past a stall period of a second,
// but never stalls.
func readSlowly(t *testing.T, c net.Conn, total int) {
	t.Helper()
	buf := make([]byte, 256<<10)
	got := 0
	for got < total {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.ReadFull(c, buf[:min(len(buf), total-got)])
		if err != nil {
			t.Fatalf("read after %d bytes: %v", got, err)
		}
		got += n
		time.Sleep(100 * time.Millisecond)
	}
}
