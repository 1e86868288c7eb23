// Package memtrim gives a quiet process's spare heap back to the system.
//
// Go's collector lets the heap grow to twice what is live (GOGC=100)
// before it collects, and its background scavenger keeps about that much
// resident: a server holding 10,000 idle connections keeps as much memory
// again as the connections need, most of it pages touched by the connect
// burst and by the heartbeats' garbage since the last collection. A
// Trimmer looks at the heap every period and, when the process is quiet
// (it allocated less than half its live heap in the period: a collection
// would not come on its own for two periods more) and the heap holds
// more than MinSpare and a quarter of what is live beyond it (dead
// objects, free pages), collects and returns the free pages at once
// (debug.FreeOSMemory).
//
// The cost is a collection that would have come later and page faults
// when the heap grows back: at most one full mark of the live heap a
// period, in practice one each time the quiet process's garbage reaches a
// quarter of its live heap (at 10,000 idle devices, about every 10 s:
// tens of ms of CPU each). A busy process (allocating its live heap every
// two periods or faster) is left to the runtime, so the hot path pays
// nothing; a small process (a server with 100 devices) rarely has
// MinSpare to give back.
package memtrim

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Heap is what a Trimmer reads of the heap, in bytes.
type Heap struct {
	Live uint64 // live at the last collection
	// Held is the heap's objects (live, and dead ones not yet swept) and
	// its free pages not yet returned: what a collection and a return
	// could bring down to Live. Free slots in spans that also hold live
	// objects (fragmentation) are not counted: no trim returns them.
	Held   uint64
	Allocs uint64 // allocated since the process started
}

// Trimmer returns a quiet heap's spare pages; see the package doc.
type Trimmer struct {
	// Every is the period (default 5 s): at most one trim per period.
	Every time.Duration
	// MinSpare is the least spare heap worth a trim (default 4 MiB); the
	// spare must also exceed a quarter of the live heap.
	MinSpare uint64
	// Read and Free default to the runtime's metrics and
	// debug.FreeOSMemory; tests inject theirs.
	Read func() Heap
	Free func()
}

// Run trims until ctx is done.
func (t *Trimmer) Run(ctx context.Context) {
	every, read, free := t.Every, t.Read, t.Free
	if every <= 0 {
		every = 5 * time.Second
	}
	if read == nil {
		read = ReadHeap
	}
	if free == nil {
		free = debug.FreeOSMemory
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := read()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		h := read()
		if t.due(last, h) {
			free()
			h = read() // the trim's own collection is not the process's allocation
		}
		last = h
	}
}

// due reports whether the heap h, allocs since last, wants a trim.
func (t *Trimmer) due(last, h Heap) bool {
	minSpare := t.MinSpare
	if minSpare == 0 {
		minSpare = 4 << 20
	}
	if h.Allocs-last.Allocs >= h.Live/2 {
		return false // busy: the runtime collects soon enough
	}
	if h.Held <= h.Live {
		return false
	}
	spare := h.Held - h.Live
	return spare > minSpare && spare > h.Live/4
}

var names = []string{
	"/gc/heap/live:bytes",
	"/gc/heap/allocs:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
}

// ReadHeap reads the process's heap from runtime/metrics.
func ReadHeap() Heap {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return Heap{Live: v(0), Allocs: v(1), Held: v(2) + v(3)}
}
