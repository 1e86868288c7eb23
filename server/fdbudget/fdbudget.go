// Package fdbudget shares the process's file descriptors among the parts
// of termserver that open them on demand, so that none of them runs the
// others out: a server at its limit refuses a new connection (HTTP 503)
// instead of failing to record a message with "too many open files".
//
// The limit is the soft RLIMIT_NOFILE, read once ([FromProcess]). A fixed
// [Base] of it is left outside the accounting for what the process holds
// all along or for an instant: standard streams, the listener and the
// poller, the write-ahead logs (segment, directory, lock; two segments
// while one is cut), the notices and registry files and their temporary
// files, the agent sentinel, and the socket a refused connection is
// answered on. The rest, [Budget.Total], is shared by three classes,
// each with a floor (kept for it whatever the others do) and a cap:
//
//   - [Files]: the session store's open files (its cache of append
//     handles, the temporary file of a new session, readers). It grows
//     past its floor up to its cap only into room nobody else uses, and
//     closes its least recently used handle rather than fail a write.
//   - [Agents]: the pipes of agent processes ([PerAgent] each). Past its
//     floor an agent takes room nobody else uses or keeps, or waits for
//     some ([Pool.Acquire]: a terminal agent's run; the waiters are served
//     in the order they came), or is not started ([Pool.TryAcquire]: a
//     long-lived agent; the run answers an error).
//   - [Sockets]: accepted TCP connections (HTTP requests and WebSockets).
//     Its floor is what the others can never hold between them: Total
//     less the session files' cap and the agents' floor. A connection
//     that finds no room gets 503 (wschannel.ConnGuard).
//
// A class takes n descriptors with [Pool.TryAcquire] (or waits for them
// with [Pool.Acquire]) when it stays within its cap and what remains
// still covers every other class's unused floor; [Pool.Release] gives
// them back. So each class can always count on its floor whatever the
// others do. The sockets' floor is the agents' ceiling: busy agents
// (hundreds of runs of a process per message) cannot take the room
// devices and /healthz connect with. At a limit of 1024: Total 960,
// session files 15 to 96, agents 60 to 141 (10 to 23 processes), sockets
// 804 to 885.
package fdbudget

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"syscall"
)

// Class is a user of file descriptors.
type Class int

const (
	Sockets Class = iota // accepted TCP connections
	Files                // session files
	Agents               // agent process pipes
	numClasses
)

func (c Class) String() string {
	switch c {
	case Sockets:
		return "sockets"
	case Files:
		return "session files"
	case Agents:
		return "agents"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

const (
	// Base is how many descriptors are left outside the accounting (see
	// the package doc). An idle termserver holds about 20.
	Base = 64
	// PerAgent is what one agent process costs: the parent's ends of its
	// stdin, stdout and stderr pipes and its pidfd, with room for the
	// child's ends while it starts.
	PerAgent = 6
	// MaxFiles caps the session store's share at any limit.
	MaxFiles = 4096
	// MinLimit is the smallest limit New accepts; below it the budget
	// works as if the limit were MinLimit.
	MinLimit = Base + 64
	// defaultLimit is used when RLIMIT_NOFILE cannot be read.
	defaultLimit = 1024
)

// Budget is the process's file descriptors, shared by the classes. Its
// methods are safe for concurrent use.
type Budget struct {
	limit int
	total int
	floor [numClasses]int
	cap   [numClasses]int

	mu      sync.Mutex
	used    [numClasses]int
	refused [numClasses]int64
	waiters list.List // of *waiter: Acquire calls waiting, first come first
}

// waiter is an Acquire call waiting for room; Release takes the room for
// it (granted) and closes ready.
type waiter struct {
	c       Class
	n       int
	ready   chan struct{}
	granted bool // guarded by Budget.mu
}

// New returns the budget of a process allowed limit descriptors:
// Total = limit - Base; Files keep Total/64 (8 to 64) and may grow to
// Total/10 (at most MaxFiles); Agents keep Total/16 (at least one agent,
// at most 1,024 agents); Sockets keep the rest: Total less the cap of
// Files and the floor of Agents. Agents and Sockets may grow into what
// Files leave unused, and Sockets into what Agents leave unused.
func New(limit int) *Budget {
	limit = max(limit, MinLimit)
	b := &Budget{limit: limit, total: limit - Base}
	t := b.total
	b.floor[Files] = clamp(t/64, 8, 64)
	b.cap[Files] = clamp(t/10, b.floor[Files], MaxFiles)
	b.floor[Agents] = clamp(t/16, PerAgent, 1024*PerAgent)
	b.floor[Sockets] = t - b.cap[Files] - b.floor[Agents]
	b.cap[Agents] = t
	b.cap[Sockets] = t
	return b
}

// FromProcess is New with the soft RLIMIT_NOFILE (1024 if it cannot be
// read; at most 1<<24). Call it once: the limit is not read again.
func FromProcess() *Budget {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return New(defaultLimit)
	}
	return New(int(min(rl.Cur, 1<<24)))
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

// Limit is the process limit the budget was made from.
func (b *Budget) Limit() int { return b.limit }

// Total is the part of the limit the classes share (Limit - Base).
func (b *Budget) Total() int { return b.total }

// Floor is what is kept for class c whatever the others use.
func (b *Budget) Floor(c Class) int { return b.floor[c] }

// Max is the most class c can ever hold: its cap, or Total less the
// other classes' floors.
func (b *Budget) Max(c Class) int { return b.maxLocked(c) }

// maxLocked is Max; it reads only what New set.
func (b *Budget) maxLocked(c Class) int {
	m := b.total
	for o := range numClasses {
		if o != c {
			m -= b.floor[o]
		}
	}
	return min(m, b.cap[c])
}

// Pool is class c of the budget, the handle its user is given.
func (b *Budget) Pool(c Class) *Pool { return &Pool{b: b, c: c} }

func (b *Budget) tryAcquire(c Class, n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.takeLocked(c, n) {
		b.refused[c]++
		return false
	}
	return true
}

func (b *Budget) takeLocked(c Class, n int) bool {
	if b.used[c]+n > b.cap[c] {
		return false
	}
	need := n
	for o := range numClasses {
		need += b.used[o]
		if o != c {
			need += max(0, b.floor[o]-b.used[o])
		}
	}
	if need > b.total {
		return false
	}
	b.used[c] += n
	return true
}

func (b *Budget) acquire(ctx context.Context, c Class, n int) error {
	if n > b.Max(c) {
		return fmt.Errorf("fdbudget: %s asked for %d descriptors, more than they can ever hold (%d)", c, n, b.Max(c))
	}
	b.mu.Lock()
	if !b.waitingLocked(c) && b.takeLocked(c, n) {
		b.mu.Unlock()
		return nil
	}
	// Wait in line: Release serves the waiters in the order they came,
	// so none waits behind later ones (each holder gives its room back
	// in a bounded time: an agent run has a timeout).
	b.refused[c]++
	w := &waiter{c: c, n: n, ready: make(chan struct{})}
	e := b.waiters.PushBack(w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.granted { // granted as ctx ended: the room is the next waiter's
		b.used[c] -= n
		b.serveLocked()
	} else {
		b.waiters.Remove(e)
	}
	return fmt.Errorf("waiting for %d file descriptors for %s (%s): %w", n, c, b.stringLocked(), ctx.Err())
}

// waitingLocked reports whether an Acquire of class c waits: a new one
// gets in line behind it.
func (b *Budget) waitingLocked(c Class) bool {
	for e := b.waiters.Front(); e != nil; e = e.Next() {
		if e.Value.(*waiter).c == c {
			return true
		}
	}
	return false
}

// serveLocked gives the room there is to the waiters, first come first;
// one that does not fit is skipped for a later one of another class
// only (one of its own class waits behind it).
func (b *Budget) serveLocked() {
	var blocked [numClasses]bool
	for e := b.waiters.Front(); e != nil; {
		next := e.Next()
		w := e.Value.(*waiter)
		if !blocked[w.c] {
			if b.takeLocked(w.c, w.n) {
				w.granted = true
				close(w.ready)
				b.waiters.Remove(e)
			} else {
				blocked[w.c] = true
			}
		}
		e = next
	}
}

func (b *Budget) release(c Class, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.used[c] {
		panic(fmt.Sprintf("fdbudget: %s released %d descriptors but holds %d", c, n, b.used[c]))
	}
	b.used[c] -= n
	if b.waiters.Len() > 0 {
		b.serveLocked()
	}
}

// Stats is a snapshot of the budget.
type Stats struct {
	Limit, Total int
	Used         [numClasses]int   // by class
	Refused      [numClasses]int64 // TryAcquire and Acquire calls that found no room, by class
	Waiting      [numClasses]int   // Acquire calls waiting now, by class
}

// Stats returns what each class holds now, how often it was refused and
// how many of its Acquire calls wait.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.statsLocked()
}

func (b *Budget) statsLocked() Stats {
	s := Stats{Limit: b.limit, Total: b.total, Used: b.used, Refused: b.refused}
	for e := b.waiters.Front(); e != nil; e = e.Next() {
		s.Waiting[e.Value.(*waiter).c]++
	}
	return s
}

// String says what the budget holds, for error messages and logs.
func (b *Budget) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stringLocked()
}

func (b *Budget) stringLocked() string {
	s := b.statsLocked()
	return fmt.Sprintf("file descriptors: limit %d (%d shared): sockets %d (%d kept), session files %d of %d, agents %d of %d (%d kept, %d waiting)",
		s.Limit, s.Total, s.Used[Sockets], b.floor[Sockets], s.Used[Files], b.cap[Files], s.Used[Agents], b.maxLocked(Agents), b.floor[Agents], s.Waiting[Agents])
}

// Pool is one class's share of a [Budget]. A nil *Pool accounts nothing:
// TryAcquire always succeeds (for callers run without a budget).
type Pool struct {
	b *Budget
	c Class
}

// TryAcquire takes n descriptors if the budget has room for them (see
// the package doc); it never waits.
func (p *Pool) TryAcquire(n int) bool {
	if p == nil {
		return true
	}
	return p.b.tryAcquire(p.c, n)
}

// Acquire takes n descriptors, waiting until the budget has room for
// them (another user releases some) or ctx is done. A nil Pool returns
// at once.
func (p *Pool) Acquire(ctx context.Context, n int) error {
	if p == nil {
		return nil
	}
	return p.b.acquire(ctx, p.c, n)
}

// Release gives back n descriptors taken by TryAcquire or Acquire.
func (p *Pool) Release(n int) {
	if p == nil {
		return
	}
	p.b.release(p.c, n)
}

// Max is the most this class can ever hold (math.MaxInt for a nil Pool).
func (p *Pool) Max() int {
	if p == nil {
		return int(^uint(0) >> 1)
	}
	return p.b.Max(p.c)
}

// Floor is what is kept for this class (0 for a nil Pool).
func (p *Pool) Floor() int {
	if p == nil {
		return 0
	}
	return p.b.floor[p.c]
}

// Budget is the budget the pool belongs to (nil for a nil Pool).
func (p *Pool) Budget() *Budget {
	if p == nil {
		return nil
	}
	return p.b
}
