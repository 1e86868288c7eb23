package fdbudget

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
)

func TestShares(t *testing.T) {
	for _, tc := range []struct {
		limit                                                                  int
		total, filesFloor, filesCap, agents, agentsMax, socketFloor, socketMax int
	}{
		{limit: 1024, total: 960, filesFloor: 15, filesCap: 96, agents: 60, agentsMax: 141, socketFloor: 804, socketMax: 885},
		{limit: 100, total: 64, filesFloor: 8, filesCap: 8, agents: 6, agentsMax: 6, socketFloor: 50, socketMax: 50}, // raised to MinLimit
		{limit: 1 << 20, total: 1<<20 - 64, filesFloor: 64, filesCap: MaxFiles, agents: 6144, agentsMax: MaxFiles - 64 + 6144,
			socketFloor: 1<<20 - 64 - MaxFiles - 6144, socketMax: 1<<20 - 64 - 64 - 6144},
	} {
		b := New(tc.limit)
		got := []int{b.Total(), b.Floor(Files), b.Max(Files), b.Floor(Agents), b.Max(Agents), b.Floor(Sockets), b.Max(Sockets)}
		want := []int{tc.total, tc.filesFloor, tc.filesCap, tc.agents, tc.agentsMax, tc.socketFloor, tc.socketMax}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("limit %d: total, files floor, files max, agents floor, agents max, sockets floor, sockets max = %v, want %v", tc.limit, got, want)
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
	if n := fill(agents); n != 0 {
		t.Fatalf("agents got %d more, want none: what is left is the sockets' floor", n)
	}
	if n := fill(sockets); n != 19 {
		t.Fatalf("sockets got %d back, want their floor's 19", n)
	}
	files.Release(81)
	if n := fill(agents); n != 81 {
		t.Fatalf("agents got %d more, want the 81 the session files gave back (up to 141)", n)
	}
	if sockets.TryAcquire(1) {
		t.Fatal("a socket was admitted with no room left")
	}
	agents.Release(81)
	if n := fill(sockets); n != 81 {
		t.Fatalf("sockets got %d back, want 81 (up to the others' floors)", n)
	}
	if files.TryAcquire(1) {
		t.Fatal("session files got more than their floor with the sockets full")
	}
}

// Agents cannot take the sockets' floor (issue 36 row 5): a process per
// message, hundreds of runs at once, used to grow into every descriptor
// but the session files' floor (945 of 960 at a limit of 1024), and
// devices connecting after them got 503 (146 of 740 connected).
func TestAgentsLeaveSocketsTheirFloor(t *testing.T) {
	b := New(1024)
	sockets, agents := b.Pool(Sockets), b.Pool(Agents)
	n := 0
	for agents.TryAcquire(PerAgent) {
		n++
	}
	if n != 141/PerAgent {
		t.Errorf("agents started %d processes on an empty budget, want %d (141 descriptors)", n, 141/PerAgent)
	}
	if got, want := fill(sockets), 960-15-n*PerAgent; got != want || got < 804 {
		t.Fatalf("sockets got %d beside busy agents, want %d (at least their floor 804)", got, want)
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
	synctest.Test(t, func(t *testing.T) {
		b := New(1024)
		agents, sockets := b.Pool(Agents), b.Pool(Sockets)
		for agents.TryAcquire(1) { // agents take everything they can
		}
		got := make(chan error, 1)
		go func() { got <- agents.Acquire(context.Background(), PerAgent) }()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("Acquire returned %v with no room", err)
		default:
		}
		if s := b.Stats(); s.Waiting[Agents] != 1 || s.Refused[Agents] != 2 {
			t.Fatalf("waiting %v, refused %v: want one agent waiting, refused twice (TryAcquire, Acquire)", s.Waiting, s.Refused)
		}
		if want := "agents 141 of 141 (60 kept, 1 waiting)"; !strings.Contains(b.String(), want) {
			t.Errorf("String() = %q, want it to say %q", b.String(), want)
		}
		if !sockets.TryAcquire(1) {
			t.Fatal("a socket did not get a descriptor of its floor beside full agents")
		}
		agents.Release(PerAgent)
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if s := b.Stats(); s.Waiting[Agents] != 0 || s.Used[Agents] != 141 {
			t.Fatalf("after the release: %+v", s)
		}

		ctx, cancel := context.WithCancel(context.Background())
		go func() { got <- agents.Acquire(ctx, 1) }()
		synctest.Wait()
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for 1 file descriptors for agents") {
			t.Fatalf("cancelled Acquire: %v", err)
		}
		if s := b.Stats(); s.Waiting[Agents] != 0 {
			t.Fatalf("a cancelled Acquire still waits: %+v", s)
		}
		if err := agents.Acquire(context.Background(), b.Total()+1); err == nil {
			t.Fatal("Acquire of more than the class can ever hold did not fail at once")
		}
		if err := (*Pool)(nil).Acquire(ctx, 1); err != nil {
			t.Fatalf("nil pool: %v", err)
		}
	})
}

// Acquire calls are served in the order they came, and a new one gets
// in line behind those waiting even when a release left room for it:
// a run waiting for its agent's descriptors waits for the runs before it
// only, never indefinitely behind later ones.
func TestAcquireFirstComeFirstServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(1024)
		agents := b.Pool(Agents)
		for agents.TryAcquire(PerAgent) {
		}
		held := b.Stats().Used[Agents]
		order := make(chan int, 4)
		for i := range 4 {
			go func() {
				if err := agents.Acquire(context.Background(), PerAgent); err != nil {
					t.Error(err)
				}
				order <- i
			}()
			synctest.Wait() // i waits before i+1 comes
		}
		for want := range 4 {
			agents.Release(PerAgent)
			if got := <-order; got != want {
				t.Fatalf("waiter %d served in place %d", got, want)
			}
			synctest.Wait()
			select {
			case got := <-order:
				t.Fatalf("waiter %d served without room", got)
			default:
			}
		}
		if s := b.Stats(); s.Used[Agents] != held || s.Waiting[Agents] != 0 {
			t.Fatalf("%+v, want %d agents' descriptors held and none waiting", s, held)
		}
	})
}

// A waiter whose context ends as it is granted room gives the room on
// to the next waiter: it is neither kept by a caller told "no" nor lost.
func TestAcquireGrantedAsCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(1024)
		agents := b.Pool(Agents)
		for agents.TryAcquire(PerAgent) {
		}
		full := b.Stats().Used[Agents]
		ctx, cancel := context.WithCancel(context.Background())
		first, second := make(chan error, 1), make(chan error, 1)
		go func() { first <- agents.Acquire(ctx, PerAgent) }()
		synctest.Wait()
		go func() { second <- agents.Acquire(context.Background(), PerAgent) }()
		synctest.Wait()
		// The first waiter's context ends (its select takes that case),
		// then, before it gets the lock back, a release grants it room.
		b.mu.Lock()
		cancel()
		b.used[Agents] -= PerAgent
		b.serveLocked()
		b.mu.Unlock()
		if err := <-first; !errors.Is(err, context.Canceled) {
			t.Fatalf("first: %v, want its context's end", err)
		}
		if err := <-second; err != nil {
			t.Fatalf("second did not get the room the first gave on: %v", err)
		}
		if s := b.Stats(); s.Used[Agents] != full || s.Waiting[Agents] != 0 {
			t.Fatalf("%+v, want %d held and none waiting", s, full)
		}
	})
}
