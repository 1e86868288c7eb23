package wschannel

import (
	"sync"
	"sync/atomic"
	"time"
)

// workers is a pool of warm goroutines that run one kind of job for the
// connections: the steps of their readers (stepper) and their writers
// (writePump). A goroutine started per job starts with the runtime's
// minimal stack and grows it again on every job (runtime.copystack); a
// worker keeps its grown stack from job to job.
//
// The stepper runs the deep part of a connection's reading (decoding a
// frame, accepting a message, writing the session log) so that each
// connection's own goroutine only ever waits for data: its stack then
// stays at the runtime's minimum (2 KiB) instead of growing to 8 KiB on
// its first frame and staying there while the device is idle, which was
// half the memory of an idle connection. A caller hands over a connection
// and waits until its step is done, so a connection's frames are still
// handled one at a time, in order.
//
// The writers run a connection's writePump while it has something to
// write; the connection says a writer runs (wsConn.writing), so never two
// write one connection, and an idle connection holds none.
//
// Workers are started as needed (a step may wait for the session log's
// fsync, a write for a slow peer); a worker that finds maxIdle others idle,
// or stays idle for workerIdle, exits.
type workers struct {
	jobs    chan *wsConn
	do      func(*wsConn)
	maxIdle int
	quit    chan struct{}
	wg      sync.WaitGroup
	started atomic.Int64 // workers started, ever (tests)

	mu      sync.Mutex
	idle    int
	stopped bool
}

const (
	maxIdleSteppers = 128
	maxIdleWriters  = 128
	workerIdle      = 30 * time.Second
)

func newWorkers(maxIdle int, do func(*wsConn)) *workers {
	return &workers{jobs: make(chan *wsConn), do: do, maxIdle: maxIdle, quit: make(chan struct{})}
}

// submit runs do(c) on an idle worker, or on a new one; it never waits.
func (w *workers) submit(c *wsConn) {
	select {
	case w.jobs <- c:
	default:
		w.mu.Lock()
		if w.stopped { // cannot happen: the adapter's connections end before it stops
			w.mu.Unlock()
			go w.do(c)
			return
		}
		w.wg.Add(1)
		w.mu.Unlock()
		w.started.Add(1)
		go w.work(c)
	}
}

func (w *workers) work(c *wsConn) {
	defer w.wg.Done()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		w.do(c)
		w.mu.Lock()
		if w.idle >= w.maxIdle {
			w.mu.Unlock()
			return
		}
		w.idle++
		w.mu.Unlock()
		t.Reset(workerIdle)
		select {
		case c = <-w.jobs:
		case <-t.C:
			c = nil
		case <-w.quit:
			c = nil
		}
		w.mu.Lock()
		w.idle--
		w.mu.Unlock()
		if c == nil {
			return
		}
	}
}

// stop ends the idle workers and waits for all of them.
func (w *workers) stop() {
	w.mu.Lock()
	if !w.stopped {
		w.stopped = true
		close(w.quit)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// stepper runs the connections' reading steps on workers.
type stepper struct{ *workers }

// doneChans are the channels a step's end is signalled on: one per
// connection with a step running, none for an idle one.
var doneChans = sync.Pool{New: func() any { return make(chan bool) }}

func newStepper() stepper {
	return stepper{newWorkers(maxIdleSteppers, func(c *wsConn) { c.stepDone <- c.step() })}
}

// run runs c.step on a worker and returns its result.
func (s stepper) run(c *wsConn) bool {
	done := doneChans.Get().(chan bool)
	c.stepDone = done
	s.submit(c)
	more := <-done
	doneChans.Put(done)
	return more
}

// newWriters is the pool the connections' writers run on.
func newWriters() *workers {
	return newWorkers(maxIdleWriters, (*wsConn).writePump)
}
