package fdbudget

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestShares(t *testing.T) {
	for _, tc := range []struct {
		limit                                          int
		total, filesFloor, filesCap, agents, socketMax int
	}{
		{limit: 1024, total: 960, filesFloor: 15, filesCap: 96, agents: 60, socketMax: 885},
		{limit: 100, total: 64, filesFloor: 8, filesCap: 8, agents: 6, socketMax: 50}, // raised to MinLimit
		{limit: 1 << 20, total: 1<<20 - 64, filesFloor: 64, filesCap: MaxFiles, agents: 6144, socketMax: 1<<20 - 64 - 64 - 6144},
	} {
		b := New(tc.limit)
		got := []int{b.Total(), b.Floor(Files), b.Max(Files), b.Floor(Agents), b.Max(Sockets)}
		want := []int{tc.total, tc.filesFloor, tc.filesCap, tc.agents, tc.socketMax}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("limit %d: total, files floor, files max, agents floor, sockets max = %v, want %v", tc.limit, got, want)
				break
			}
		}
	}
}

// fill takes descriptors one at a time until the pool refuses.
func fill(p *Pool) int {
	n := 0
	for p.TryAcquire(1) {
		n++
	}
	return n
}

func TestFloorsAreKept(t *testing.T) {
	b := New(1024)
	sockets, files, agents := b.Pool(Sockets), b.Pool(Files), b.Pool(Agents)
	// Sockets take everything but the others' floors.
	if n := fill(sockets); n != 885 {
		t.Fatalf("sockets got %d, want 885", n)
	}
	if n := fill(files); n != 15 {
		t.Fatalf("session files got %d beside full sockets, want their floor 15", n)
	}
	if n := fill(agents); n != 60 {
		t.Fatalf("agents got %d beside full sockets, want their floor 60", n)
	}
	if s := b.Stats(); s.Used != [numClasses]int{885, 15, 60} || s.Refused != [numClasses]int64{1, 1, 1} {
		t.Fatalf("stats %+v", s)
	}
	// Room given back goes to whoever asks first, within caps and floors.
	sockets.Release(100)
	if n := fill(files); n != 81 {
		t.Fatalf("session files got %d more, want 81 (up to their cap 96)", n)
	}
	if n := fill(agents); n != 19 {
		t.Fatalf("agents got %d more, want the 19 left", n)
	}
	if sockets.TryAcquire(1) {
		t.Fatal("a socket was admitted with no room left")
	}
	agents.Release(79)
	files.Release(96)
	if n := fill(sockets); n != 100 {
		t.Fatalf("sockets got %d back, want 100 (up to the others' floors)", n)
	}
	if !files.TryAcquire(15) || files.TryAcquire(1) {
		t.Fatal("session files did not get exactly their floor back")
	}
}

func TestAcquireMany(t *testing.T) {
	b := New(1024)
	agents := b.Pool(Agents)
	if !agents.TryAcquire(PerAgent) {
		t.Fatal("first agent refused")
	}
	if agents.TryAcquire(b.Total()) {
		t.Fatal("agents took more than the total")
	}
	agents.Release(PerAgent)
	if s := b.Stats(); s.Used[Agents] != 0 {
		t.Fatalf("agents hold %d after release", s.Used[Agents])
	}
}

func TestOverReleasePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("releasing more than held did not panic")
		}
	}()
	New(1024).Pool(Files).Release(1)
}

func TestNilPool(t *testing.T) {
	var p *Pool
	if !p.TryAcquire(1 << 30) {
		t.Fatal("nil pool refused")
	}
	p.Release(1 << 30)
	if p.Floor() != 0 || p.Max() <= 1<<30 || p.Budget() != nil {
		t.Fatal("nil pool is not unbounded")
	}
}

// TestConcurrent never lets the classes hold more than the total between them.
func TestConcurrent(t *testing.T) {
	b := New(1024)
	var wg sync.WaitGroup
	for c := range numClasses {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := b.Pool(c)
				held := 0
				for i := range 2000 {
					if i%3 != 2 && p.TryAcquire(1) {
						held++
					} else if held > 0 {
						p.Release(1)
						held--
					}
					s := b.Stats()
					if sum := s.Used[0] + s.Used[1] + s.Used[2]; sum > b.Total() {
						t.Errorf("classes hold %d > total %d", sum, b.Total())
						return
					}
				}
				p.Release(held)
			}()
		}
	}
	wg.Wait()
	if s := b.Stats(); s.Used != [numClasses]int{} {
		t.Fatalf("left held: %v", s.Used)
	}
}

func TestFromProcessReadsTheSoftLimit(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	if got, want := FromProcess().Limit(), max(int(min(rl.Cur, 1<<24)), MinLimit); got != want {
		t.Fatalf("limit %d, want the soft RLIMIT_NOFILE %d", got, want)
	}
}

// Acquire waits for room and gets it when another user releases some;
// it gives up when its context ends.
func TestAcquireWaits(t *testing.T) {
	b := New(1024)
	agents, sockets := b.Pool(Agents), b.Pool(Sockets)
	for agents.TryAcquire(1) { // agents take everything they can
	}
	got := make(chan error, 1)
	go func() { got <- agents.Acquire(context.Background(), PerAgent) }()
	select {
	case err := <-got:
		t.Fatalf("Acquire returned %v with no room", err)
	case <-time.After(50 * time.Millisecond):
	}
	if sockets.TryAcquire(1) {
		t.Fatal("a socket got a descriptor the agents hold")
	}
	agents.Release(PerAgent)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not get the descriptors released")
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { got <- agents.Acquire(ctx, 1) }()
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for 1 file descriptors for agents") {
			t.Fatalf("cancelled Acquire: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not end with its context")
	}
	if err := agents.Acquire(context.Background(), b.Total()+1); err == nil {
		t.Fatal("Acquire of more than the class can ever hold did not fail at once")
	}
	if err := (*Pool)(nil).Acquire(ctx, 1); err != nil {
		t.Fatalf("nil pool: %v", err)
	}
}
