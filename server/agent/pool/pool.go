// Package pool keeps the long-lived agent processes of the runners that
// run one process per session (Nuum, ACP): the table of sessions to
// processes, at most Max processes at once (the least recently used idle
// one makes room), one turn at a time per process, the idle stop, and the
// restart backoff after a crash (package restart). Package stdio builds
// the process on it and the protocol runners how it talks; the pool owns
// when one may run.
package pool

import (
	"context"
	"log/slog"
	"time"

	"sync"

	"termlink/server/agent/restart"
)

// Member is one process. Its methods must not call back into the pool.
type Member interface {
	comparable
	// Dying reports whether the process has exited or is being stopped.
	Dying() bool
	// RequestStop asks the process to stop gracefully, for reason.
	RequestStop(reason string)
}

// State is the pool's record of a member.
type State struct {
	Key      string
	Busy     bool      // a turn holds it (or it is starting)
	LastUsed time.Time // end of the last turn
}

type entry struct {
	State
	stopping bool // the runner stopped it: its exit is no crash
}

// Pool is the process table of one runner. It is safe for concurrent use.
type Pool[M Member] struct {
	max int
	log *slog.Logger

	mu      sync.Mutex
	closed  bool
	byKey   map[string]M // the current process of each session; a stopping one is no longer here
	entries map[M]*entry // every live member: running, starting or stopping
	crashes *restart.Tracker
	notify  chan struct{} // closed and replaced when anything changes
	wg      sync.WaitGroup
}

// New returns a pool of at most max processes, restarting crashed ones
// after a delay within [backoffMin, backoffMax].
func New[M Member](max int, backoffMin, backoffMax time.Duration, log *slog.Logger) *Pool[M] {
	if log == nil {
		log = slog.Default()
	}
	return &Pool[M]{max: max, log: log, byKey: map[string]M{}, entries: map[M]*entry{},
		crashes: restart.New(backoffMin, backoffMax), notify: make(chan struct{})}
}

// Outcome of Acquire.
type Outcome int

const (
	Acquired  Outcome = iota // an idle process, now busy
	Created                  // a new member, busy, to be started by the caller (then Started or StartFailed)
	Closed                   // the pool is closed
	Cancelled                // ctx ended
)

// Acquire returns key's process marked busy, waiting while it is busy,
// dying or in its restart backoff, or while the pool is full of busy
// processes (waiting is called once then). Without a process and with
// room, it calls create (under the pool's lock: it must only build the
// value) and returns Created; the caller starts it.
func (p *Pool[M]) Acquire(ctx context.Context, key string, create func() M, waiting func()) (M, Outcome) {
	var zero M
	told := false
	for {
		if ctx.Err() != nil {
			return zero, Cancelled
		}
		var delay time.Duration
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return zero, Closed
		}
		wait := p.notify
		m, ok := p.byKey[key]
		if !ok {
			delay = p.crashes.Wait(key)
		}
		switch {
		case ok:
			if e := p.entries[m]; !e.Busy && !m.Dying() {
				e.Busy = true
				p.mu.Unlock()
				return m, Acquired
			}
		case delay > 0:
		case len(p.entries) < p.max:
			m := create()
			p.byKey[key] = m
			p.entries[m] = &entry{State: State{Key: key, Busy: true, LastUsed: time.Now()}}
			p.wg.Add(1)
			p.mu.Unlock()
			return m, Created
		default:
			if victim, ok := p.lruIdleLocked(); ok {
				e := p.entries[victim]
				delete(p.byKey, e.Key)
				e.stopping = true
				victim.RequestStop("making room for another session (maxProcesses reached)")
				p.log.Info("stopping the least recently used agent process", "session", e.Key, "for", key)
			} else if !told {
				told = true
				p.log.Info("all agent processes are busy; waiting", "session", key, "maxProcesses", p.max)
				if waiting != nil {
					waiting()
				}
			}
		}
		p.mu.Unlock()
		var timerC <-chan time.Time
		if delay > 0 {
			t := time.NewTimer(delay)
			timerC = t.C
			select {
			case <-wait:
			case <-timerC:
			case <-ctx.Done():
			}
			t.Stop()
			continue
		}
		select {
		case <-wait:
		case <-ctx.Done():
		}
	}
}

// StartFailed forgets a Created member whose process could not be
// started: its session waits out a restart delay, and the member's hold
// on Close ends.
func (p *Pool[M]) StartFailed(m M) {
	p.mu.Lock()
	if e := p.entries[m]; e != nil {
		if cur, ok := p.byKey[e.Key]; ok && cur == m {
			delete(p.byKey, e.Key)
		}
		delete(p.entries, m)
		p.crashedLocked(e.Key)
	}
	p.broadcastLocked()
	p.mu.Unlock()
	p.wg.Done()
}

// Release marks m idle after a turn.
func (p *Pool[M]) Release(m M) {
	p.mu.Lock()
	if e := p.entries[m]; e != nil {
		e.Busy = false
		e.LastUsed = time.Now()
	}
	p.broadcastLocked()
	p.mu.Unlock()
}

// Get returns key's current process.
func (p *Pool[M]) Get(key string) (M, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.byKey[key]
	return m, ok && !p.closed
}

// MarkStopping records that m's coming exit is not a crash.
func (p *Pool[M]) MarkStopping(m M) {
	p.mu.Lock()
	if e := p.entries[m]; e != nil {
		e.stopping = true
	}
	p.mu.Unlock()
}

// IdleCheck takes m out of the table when it has been idle for idle
// (returning 0: the caller stops it), or returns how long to wait before
// checking again.
func (p *Pool[M]) IdleCheck(m M, idle time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[m]
	if e == nil {
		return idle
	}
	if cur, ok := p.byKey[e.Key]; !ok || cur != m || e.Busy {
		return idle
	}
	if d := time.Since(e.LastUsed); d < idle {
		return idle - d
	}
	delete(p.byKey, e.Key)
	e.stopping = true
	return 0
}

// Exited is called once m's process has exited. An exit the runner did
// not ask for (MarkStopping, idle, eviction, Close) and that is not the
// agent ending itself (selfQuit) is a crash: the session's next start
// waits. Call Done once m's goroutines have all ended.
func (p *Pool[M]) Exited(m M, selfQuit bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[m]
	if e == nil {
		return
	}
	if cur, ok := p.byKey[e.Key]; ok && cur == m {
		delete(p.byKey, e.Key)
	}
	delete(p.entries, m)
	if !e.stopping && !selfQuit && !p.closed {
		p.crashedLocked(e.Key)
	}
	p.broadcastLocked()
}

// crashedLocked records a crash of key's process: its next start waits.
func (p *Pool[M]) crashedLocked(key string) {
	now := time.Now()
	d := p.crashes.Crashed(key, now)
	p.log.Info("agent crashed; its next start waits", "session", key, "delay", d, "crashes", p.crashes.Crashes(key),
		"next_start", now.Add(d))
}

// Done releases a member's hold on Close.
func (p *Pool[M]) Done() { p.wg.Done() }

// Answered resets key's restart backoff: its agent works.
func (p *Pool[M]) Answered(key string) {
	p.mu.Lock()
	p.crashes.Reset(key)
	p.mu.Unlock()
}

// Close asks every process to stop (reason) and waits for each member's
// Done. Later Acquires return Closed.
func (p *Pool[M]) Close(reason string) {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		for key, m := range p.byKey {
			delete(p.byKey, key)
			p.entries[m].stopping = true
			m.RequestStop(reason)
		}
		p.broadcastLocked()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Live is the number of processes running, starting or stopping.
func (p *Pool[M]) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// Each calls fn for every session's current process (under the pool's
// lock: fn must not call the pool).
func (p *Pool[M]) Each(fn func(m M, st State)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.byKey {
		fn(m, p.entries[m].State)
	}
}

func (p *Pool[M]) lruIdleLocked() (M, bool) {
	var victim M
	var at time.Time
	found := false
	for _, m := range p.byKey {
		e := p.entries[m]
		if e.Busy || m.Dying() {
			continue
		}
		if !found || e.LastUsed.Before(at) {
			victim, at, found = m, e.LastUsed, true
		}
	}
	return victim, found
}

func (p *Pool[M]) broadcastLocked() {
	close(p.notify)
	p.notify = make(chan struct{})
}
