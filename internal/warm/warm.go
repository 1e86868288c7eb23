// Package warm runs jobs on a pool of long-lived goroutines. A goroutine
// started per job starts with the runtime's minimal stack and grows it
// again on every job (runtime.copystack, runtime.newstack): a server that
// starts one per frame, batch or burst of work pays that on every
// message. A pool goroutine keeps its grown stack from job to job.
//
// Goroutines are started as needed (a job may block: on a disk sync, a
// slow peer), so Run never waits and jobs never queue behind each other;
// a goroutine that finds maxIdle others idle when its job is done, or
// stays idle for a whole period of idleFor, exits, so the pool follows
// the recent peak of concurrent jobs. Stop ends the idle ones and waits for all.
package warm

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs do(job) for each job given to Run, on its goroutines.
type Pool[T any] struct {
	jobs    chan T
	exit    chan struct{} // an idle goroutine that takes a token exits (reap)
	do      func(T)
	maxIdle int
	idleFor time.Duration
	quit    chan struct{}
	wg      sync.WaitGroup
	started atomic.Int64

	mu   sync.Mutex
	idle int
	// minIdle is the fewest goroutines idle at once since the last reap:
	// that many stayed idle the whole period, and are surplus.
	minIdle int
	live    int         // goroutines running
	reaper  *time.Timer // armed while live > 0
	armed   bool
	stopped bool
}

// New returns a pool that runs do, keeping at most maxIdle goroutines
// idle; those idle for a whole period of idleFor exit (each has been
// idle for between idleFor and twice that).
//
// A goroutine waits for its next job on the job channel alone (and
// Stop's): no timer of its own, which every wait would put in the
// runtime's timer heap and take out again (a reset per job, and the
// timer channel's park and wake-up). One timer per pool fires every
// idleFor while goroutines live, and sends as many of them an exit token
// as stayed idle throughout.
func New[T any](maxIdle int, idleFor time.Duration, do func(T)) *Pool[T] {
	return &Pool[T]{jobs: make(chan T), exit: make(chan struct{}), do: do, maxIdle: maxIdle, idleFor: idleFor, quit: make(chan struct{})}
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
	p.live++
	if !p.armed {
		p.armed = true
		if p.reaper == nil {
			p.reaper = time.AfterFunc(p.idleFor, p.reap)
		} else {
			p.reaper.Reset(p.idleFor)
		}
	}
	p.mu.Unlock()
	p.started.Add(1)
	go p.work(job)
}

func (p *Pool[T]) work(job T) {
	defer func() {
		p.mu.Lock()
		p.live--
		p.mu.Unlock()
		p.wg.Done()
	}()
	for {
		p.do(job)
		p.mu.Lock()
		if p.idle >= p.maxIdle {
			p.mu.Unlock()
			return
		}
		p.idle++
		p.mu.Unlock()
		ok := true
		select {
		case job = <-p.jobs:
		case <-p.exit:
			ok = false
		case <-p.quit:
			ok = false
		}
		p.mu.Lock()
		p.idle--
		p.minIdle = min(p.minIdle, p.idle)
		p.mu.Unlock()
		if !ok {
			return
		}
	}
}

// reap runs every idleFor while goroutines live: the goroutines idle
// throughout the period just ended exit (as many as were idle at the
// fewest; which ones does not matter, they are alike). A token no idle
// goroutine takes at once is dropped: one took a job meanwhile.
func (p *Pool[T]) reap() {
	p.mu.Lock()
	surplus := p.minIdle
	p.minIdle = p.idle
	p.mu.Unlock()
	for range surplus {
		select {
		case p.exit <- struct{}{}:
		default:
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.minIdle = min(p.minIdle, p.idle)
	if p.live > 0 && !p.stopped {
		p.reaper.Reset(p.idleFor)
		return
	}
	p.armed = false
}

// Stop ends the idle goroutines and waits for every one, busy ones
// included, to return.
func (p *Pool[T]) Stop() {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.quit)
		if p.reaper != nil {
			p.reaper.Stop()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Started is how many goroutines the pool has started.
func (p *Pool[T]) Started() int64 { return p.started.Load() }
