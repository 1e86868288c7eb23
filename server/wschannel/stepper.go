package wschannel

import (
	"sync"
	"time"
)

// stepper runs the deep part of a connection's reading (decoding a frame,
// accepting a message, writing the session log) on a few shared
// goroutines, so that each connection's own goroutine only ever waits
// for data: its stack then stays at the runtime's minimum (2 KiB) instead
// of growing to 8 KiB on its first frame and staying there while the
// device is idle, which was half the memory of an idle connection.
//
// A caller hands over a connection and waits until its step is done, so a
// connection's frames are still handled one at a time, in order. Workers
// are started as needed (a step may wait for the session log's fsync);
// a worker that finds maxIdleSteppers others idle, or stays idle for
// stepperIdle, exits.
type stepper struct {
	jobs chan *wsConn
	quit chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	idle    int
	stopped bool
}

const (
	maxIdleSteppers = 32
	stepperIdle     = 30 * time.Second
)

// doneChans are the channels a step's end is signalled on: one per
// connection with a step running, none for an idle one.
var doneChans = sync.Pool{New: func() any { return make(chan bool) }}

func newStepper() *stepper {
	return &stepper{jobs: make(chan *wsConn), quit: make(chan struct{})}
}

// run runs c.step on a worker and returns its result.
func (s *stepper) run(c *wsConn) bool {
	done := doneChans.Get().(chan bool)
	c.stepDone = done
	select {
	case s.jobs <- c:
	default:
		s.mu.Lock()
		if s.stopped { // cannot happen: the adapter's connections end before it stops
			s.mu.Unlock()
			doneChans.Put(done)
			return c.step()
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.work(c)
	}
	more := <-done
	doneChans.Put(done)
	return more
}

func (s *stepper) work(c *wsConn) {
	defer s.wg.Done()
	t := time.NewTimer(stepperIdle)
	defer t.Stop()
	for {
		c.stepDone <- c.step()
		s.mu.Lock()
		if s.idle >= maxIdleSteppers {
			s.mu.Unlock()
			return
		}
		s.idle++
		s.mu.Unlock()
		t.Reset(stepperIdle)
		select {
		case c = <-s.jobs:
		case <-t.C:
			c = nil
		case <-s.quit:
			c = nil
		}
		s.mu.Lock()
		s.idle--
		s.mu.Unlock()
		if c == nil {
			return
		}
	}
}

// stop ends the idle workers and waits for all of them.
func (s *stepper) stop() {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.quit)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
