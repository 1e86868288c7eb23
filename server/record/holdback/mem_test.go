package holdback

import (
	"fmt"
	"runtime"
	"testing"
)

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// The book keeps an entry per online device (its live connection's
// number), 10,000 of them on a big server: keyed by the peer id within
// its channel, an entry costs under 45 bytes (a map slot of a string and
// a number, with the map's spare room: 27 at 10,000), not the 62 of a
// slot keyed by channel and peer.
func TestConnectedDeviceCost(t *testing.T) {
	const n = 10000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("dev-%05d", i)
	}
	b := New()
	b.Connected("terminal-dev", "warm")
	before := heapAlloc()
	for _, id := range ids {
		b.Connected("terminal-dev", id)
	}
	after := heapAlloc()
	per := float64(after-before) / n
	t.Logf("%.1f bytes per connected device", per)
	if per > 45 {
		t.Fatalf("the book holds %.1f bytes per connected device, want at most 45", per)
	}
	runtime.KeepAlive(b)
}
