// Package warm runs short jobs on goroutines that outlive them for a
// while, so that a server handing each message to a goroutine does not
// start a cold one per message: a new goroutine starts with the runtime's
// minimum stack and grows it (runtime.copystack) on its first deep call,
// every time. A Pool keeps up to maxIdle finished goroutines waiting for
// the next job, each for at most idleFor; nothing waits when there is no
// work, so an idle server holds none of them past idleFor.
package warm

import (
	"sync"
	"time"
)

// Pool runs jobs on warm goroutines; Go never blocks.
type Pool struct {
	jobs    chan func()
	quit    chan struct{}
	maxIdle int
	idleFor time.Duration
	wg      sync.WaitGroup

	mu      sync.Mutex
	idle    int
	started int // goroutines started, for tests
	stopped bool
}

// New returns a pool that keeps at most maxIdle goroutines waiting for a
// job, each for at most idleFor.
func New(maxIdle int, idleFor time.Duration) *Pool {
	return &Pool{jobs: make(chan func()), quit: make(chan struct{}), maxIdle: maxIdle, idleFor: idleFor}
}

// Go runs f on a waiting goroutine, or on a new one when none waits
// (also after Stop: f still runs, on a goroutine that then exits).
func (p *Pool) Go(f func()) {
	select {
	case p.jobs <- f:
		return
	default:
	}
	p.mu.Lock()
	stopped := p.stopped
	if !stopped {
		p.wg.Add(1)
		p.started++
	}
	p.mu.Unlock()
	if stopped {
		go f()
		return
	}
	go p.work(f)
}

func (p *Pool) work(f func()) {
	defer p.wg.Done()
	t := time.NewTimer(p.idleFor)
	defer t.Stop()
	for f != nil {
		f()
		f = nil
		p.mu.Lock()
		if p.idle >= p.maxIdle || p.stopped {
			p.mu.Unlock()
			return
		}
		p.idle++
		p.mu.Unlock()
		t.Reset(p.idleFor)
		select {
		case f = <-p.jobs:
		case <-t.C:
		case <-p.quit:
		}
		p.mu.Lock()
		p.idle--
		p.mu.Unlock()
	}
}

// Idle is the number of goroutines waiting for a job.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}

// Stop ends the waiting goroutines and waits until every goroutine the
// pool started has returned (their jobs finished).
func (p *Pool) Stop() {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.quit)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
