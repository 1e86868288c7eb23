package router

import (
	"sync"
	"sync/atomic"
	"time"
)

// warmPool runs the sessions' workers (Router.work) on goroutines that
// outlive a session's burst of work: a goroutine started per burst starts
// with the runtime's minimal stack and grows it again each time
// (runtime.copystack), which a busy server with many sessions that empty
// and fill again pays on every message. A pool goroutine keeps its grown
// stack; one that finds maxIdle others idle, or stays idle for
// warmIdle, exits, and stop ends the idle ones.
type warmPool struct {
	jobs    chan func()
	quit    chan struct{}
	maxIdle int
	wg      sync.WaitGroup
	started atomic.Int64 // goroutines started, ever (tests)

	mu   sync.Mutex
	idle int
	once sync.Once
}

const (
	maxIdleSessionWorkers = 128
	warmIdle              = 30 * time.Second
)

func newWarmPool(maxIdle int) *warmPool {
	return &warmPool{jobs: make(chan func()), quit: make(chan struct{}), maxIdle: maxIdle}
}

// run runs f on an idle goroutine of the pool, or on a new one; it never
// waits.
func (p *warmPool) run(f func()) {
	select {
	case p.jobs <- f:
	default:
		p.wg.Add(1)
		p.started.Add(1)
		go p.work(f)
	}
}

func (p *warmPool) work(f func()) {
	defer p.wg.Done()
	t := time.NewTimer(warmIdle)
	defer t.Stop()
	for {
		f()
		p.mu.Lock()
		if p.idle >= p.maxIdle {
			p.mu.Unlock()
			return
		}
		p.idle++
		p.mu.Unlock()
		t.Reset(warmIdle)
		select {
		case f = <-p.jobs:
		case <-t.C:
			f = nil
		case <-p.quit:
			f = nil
		}
		p.mu.Lock()
		p.idle--
		p.mu.Unlock()
		if f == nil {
			return
		}
	}
}

// stop ends the idle goroutines and waits for every one; nothing is run
// after it.
func (p *warmPool) stop() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
}
