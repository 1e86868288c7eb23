package server

import (
	"fmt"
	"runtime"
	"testing"

	"termlink/link"
)

// TestIdleConnectionStackStaysSmall: a device that has connected and sent
// a message and is now idle leaves no grown stack behind. On Linux an
// idle connection has no goroutine at all (the readiness loop; wschannel's
// TestIdleConnectionsHoldNoGoroutine counts them): what is counted here is
// the stepper's warm workers that handled the frames, over 200 devices
// (819 bytes a device on the 2-core machine). Without epoll each
// connection waits on a goroutine of its own, whose stack frame handling
// must not leave grown. The stacks of all goroutines are counted (the
// test's own clients too), so the bound is loose: 8 KiB stacks per
// connection, as before the stepper, fail it.
func TestIdleConnectionStackStaysSmall(t *testing.T) {
	ts := startServer(t, nil, nil)
	stacks := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	const devices = 200
	before := stacks()
	for i := range devices {
		c := dial(t, ts.ws, nil)
		c.connect(fmt.Sprintf("idle-%d", i))
		id := fmt.Sprintf("m-%d", i)
		c.send(&link.Message{MessageID: id, Text: "hello"})
		if ack := readAs[*link.Ack](c); ack.MessageID != id {
			t.Fatalf("ack for %q, want %q", ack.MessageID, id)
		}
	}
	after := stacks()
	perConn := (int64(after) - int64(before)) / devices
	t.Logf("stack per idle connection: %d bytes (%d -> %d)", perConn, before, after)
	if perConn > 6<<10 {
		t.Fatalf("stack per idle connection is %d bytes, want at most 6 KiB: a connection's goroutine keeps a stack grown by frame handling", perConn)
	}
}
