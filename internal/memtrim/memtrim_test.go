package memtrim

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeHeap is a heap the test moves by hand; free makes it what a
// collection and a return of the free pages would.
type fakeHeap struct {
	mu    sync.Mutex
	h     Heap
	trims int
}

func (f *fakeHeap) read() Heap { f.mu.Lock(); defer f.mu.Unlock(); return f.h }
func (f *fakeHeap) free() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trims++
	f.h.Held = f.h.Live
}
func (f *fakeHeap) alloc(n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.h.Allocs += n
	f.h.Held += n
}
func (f *fakeHeap) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.trims }

const mib = 1 << 20

func TestTrimmer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		live      uint64
		held      uint64
		perPeriod uint64 // allocated each period
		want      int    // trims after three periods
	}{
		{"quiet with a burst's pages: trimmed once, then nothing is spare", 20 * mib, 60 * mib, 0, 1},
		{"quiet, heartbeats' garbage: trimmed when it passes a quarter of the live heap", 20 * mib, 20 * mib, 3 * mib, 1},
		{"busy: left to the runtime", 20 * mib, 60 * mib, 10 * mib, 0},
		{"small process: never Spare enough", 2 * mib, 5 * mib, 0, 0},
		{"nothing spare", 20 * mib, 24 * mib, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeHeap{h: Heap{Live: tc.live, Held: tc.held}}
				tr := &Trimmer{Every: time.Second, Read: f.read, Free: f.free}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { tr.Run(ctx); close(done) }()
				synctest.Wait()
				for range 3 {
					f.alloc(tc.perPeriod)
					time.Sleep(time.Second)
					synctest.Wait()
				}
				if got := f.count(); got != tc.want {
					t.Errorf("%d trims in three periods, want %d", got, tc.want)
				}
				cancel()
				<-done // Run ends with its context
			})
		})
	}
}

// The process's own heap reads as something: the metrics' names are right.
func TestReadHeap(t *testing.T) {
	runtime.GC() // the live heap is known after a collection
	h := ReadHeap()
	if h.Live == 0 || h.Held == 0 || h.Allocs == 0 {
		t.Fatalf("heap read as %+v: a metric's name is wrong", h)
	}
}
