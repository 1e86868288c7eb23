// Package warm runs jobs on a pool of long-lived goroutines. A goroutine
// started per job starts with the runtime's minimal stack and grows it
// again on every job (runtime.copystack, runtime.newstack): a server that
// starts one per frame, batch or burst of work pays that on every
// message. A pool goroutine keeps its grown stack from job to job.
//
// Goroutines are started as needed (a job may block: on a disk sync, a
// slow peer), so Run never waits and jobs never queue behind each other;
// a goroutine that finds maxIdle others idle when its job is done, or
// stays idle for idleFor, exits, so the pool follows the recent peak of
// concurrent jobs. Stop ends the idle ones and waits for all.
package warm

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs do(job) for each job given to Run, on its goroutines.
type Pool[T any] struct {
	jobs    chan T
	do      func(T)
	maxIdle int
	idleFor time.Duration
	quit    chan struct{}
	wg      sync.WaitGroup
	started atomic.Int64

	mu      sync.Mutex
	idle    int
	stopped bool
}

// New returns a pool that runs do, keeping at most maxIdle goroutines
// idle, each for at most idleFor.
func New[T any](maxIdle int, idleFor time.Duration, do func(T)) *Pool[T] {
	return &Pool[T]{jobs: make(chan T), do: do, maxIdle: maxIdle, idleFor: idleFor, quit: make(chan struct{})}
}

// Run runs do(job) on an idle goroutine of the pool, or on a new one; it
// never waits. After Stop the job runs on a goroutine of its own.
func (p *Pool[T]) Run(job T) {
	select {
	case p.jobs <- job:
		return
	default:
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		go p.do(job)
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	p.started.Add(1)
	go p.work(job)
}

func (p *Pool[T]) work(job T) {
	defer p.wg.Done()
	t := time.NewTimer(p.idleFor)
	defer t.Stop()
	for {
		p.do(job)
		p.mu.Lock()
		if p.idle >= p.maxIdle {
			p.mu.Unlock()
			return
		}
		p.idle++
		p.mu.Unlock()
		t.Reset(p.idleFor)
		ok := true
		select {
		case job = <-p.jobs:
		case <-t.C:
			ok = false
		case <-p.quit:
			ok = false
		}
		p.mu.Lock()
		p.idle--
		p.mu.Unlock()
		if !ok {
			return
		}
	}
}

// Stop ends the idle goroutines and waits for every one, busy ones
// included, to return.
func (p *Pool[T]) Stop() {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.quit)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Started is how many goroutines the pool has started.
func (p *Pool[T]) Started() int64 { return p.started.Load() }
