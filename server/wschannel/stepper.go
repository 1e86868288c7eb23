package wschannel

import (
	"sync"
	"time"

	"termlink/internal/warm"
)

// The connections' readers' steps and writers run on warm pools (package
// warm): a goroutine started per frame or per batch starts with a minimal
// stack and grows it again each time; a pool's goroutines keep theirs.
//
// The stepper runs a connection's reading (decoding a frame, accepting a
// message, writing the session log). A polled connection (poll.go) is
// handed over by the readiness loop, the wheel or the writer and stepped
// while it has data, then waits in the loop again: it holds no goroutine
// while idle. Without the loop, a connection's own goroutine (serve) only
// ever waits for data, so its stack stays at the runtime's minimum (2
// KiB) instead of growing to 8 KiB on its first frame; it hands over the
// connection and waits until the step is done. Either way a connection's
// frames are handled one at a time, in order.
//
// The writers run a connection's writePump while it has something to
// write; the connection says a writer runs (wsConn.writing), so never two
// write one connection, and an idle connection holds none. The reader's
// own frames (acks, pongs) are written by the reader when no writer runs
// (wsConn.enqueue): no worker is woken for them.
//
// Both start goroutines as needed (a step may wait for the session log's
// fsync, a write for a slow peer); one that finds maxIdle others idle, or
// stays idle for a whole period of workerIdle (between once and twice
// workerIdle: internal/warm), exits.
const (
	maxIdleSteppers = 128
	maxIdleWriters  = 128
	workerIdle      = 30 * time.Second
)

// stepper runs the connections' reading steps.
type stepper struct{ *warm.Pool[*wsConn] }

// doneChans are the channels a step's end is signalled on: one per
// connection with a step running, none for an idle one.
var doneChans = sync.Pool{New: func() any { return make(chan bool) }}

func newStepper() stepper {
	return stepper{warm.New(maxIdleSteppers, workerIdle, func(c *wsConn) {
		if c.ph != nil { // polled (poll.go): steps while there is data
			c.pollRead()
			return
		}
		c.served.done <- c.step(c.served.waitErr)
	})}
}

// run runs c.step on a worker and returns its result (serve's: c.served
// is set); waitErr is why waiting for data failed.
func (s stepper) run(c *wsConn, waitErr error) bool {
	done := doneChans.Get().(chan bool)
	c.served.waitErr, c.served.done = waitErr, done
	s.Run(c)
	more := <-done
	c.served.waitErr, c.served.done = nil, nil
	doneChans.Put(done)
	return more
}

// newWriters is the pool the connections' writers run on.
func newWriters() *warm.Pool[*wsConn] {
	return warm.New(maxIdleWriters, workerIdle, (*wsConn).writePump)
}
