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
// Both start goroutines as needed (a step may wait for the session log's
// fsync, a write for a slow peer); one that finds maxIdle others idle, or
// stays idle for workerIdle, exits.
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
		c.stepDone <- c.step()
	})}
}

// run runs c.step on a worker and returns its result.
func (s stepper) run(c *wsConn) bool {
	done := doneChans.Get().(chan bool)
	c.stepDone = done
	s.Run(c)
	more := <-done
	doneChans.Put(done)
	return more
}

// newWriters is the pool the connections' writers run on.
func newWriters() *warm.Pool[*wsConn] {
	return warm.New(maxIdleWriters, workerIdle, (*wsConn).writePump)
}
