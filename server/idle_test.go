package server

import (
	"fmt"
	"runtime"
	"testing"

	"termlink/link"
)

// TestIdleConnectionStackStaysSmall: a device that has connected and sent
// a message and is now idle costs its connection's goroutine a small
// stack; handling the frames (decoding, the session log) must not leave
// it grown. The stacks of all goroutines over devices connections
// (readers, the stepper's workers and whatever the server started for
// them) are counted, so the bound is loose: 8 KiB stacks, as before the
// stepper, fail it.
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
