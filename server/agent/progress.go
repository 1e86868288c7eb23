package agent

import (
	"sync"
	"time"
)

// DefaultProgressInterval is the least time between two progress updates
// a Coalescer passes on: at most 4 a second.
const DefaultProgressInterval = 250 * time.Millisecond

// Coalescer rate-limits a run's progress before it reaches the bus: the
// first update passes at once, later ones at most one per interval, and
// of the updates within an interval only the latest is passed on (at the
// end of the interval). An agent printing 10,000 progress lines in a
// second costs about 5 updates, not 10,000. Progress is a hint of what the
// agent does; the latest one is all a screen shows.
type Coalescer struct {
	out   Progress
	every time.Duration

	mu      sync.Mutex
	last    time.Time // when out was last called
	pending string
	has     bool
	timer   *time.Timer
	stopped bool
}

// NewCoalescer returns a Coalescer passing updates to out, at most one per
// every (DefaultProgressInterval when every <= 0).
func NewCoalescer(out Progress, every time.Duration) *Coalescer {
	if every <= 0 {
		every = DefaultProgressInterval
	}
	return &Coalescer{out: out, every: every}
}

// Progress takes one update; it is an agent.Progress.
func (c *Coalescer) Progress(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	now := time.Now()
	if !c.has && c.timer == nil && now.Sub(c.last) >= c.every {
		c.last = now
		c.out(text) // under mu: updates keep their order, and none passes after Stop
		return
	}
	c.pending, c.has = text, true
	if c.timer == nil {
		c.timer = time.AfterFunc(c.every-now.Sub(c.last), c.flush)
	}
}

func (c *Coalescer) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer = nil
	if c.stopped || !c.has {
		return
	}
	c.last = time.Now()
	c.has = false
	c.out(c.pending)
	c.pending = ""
}

// Stop passes a pending update at once (the last thing the agent said it
// does is not lost) and none after it returns.
func (c *Coalescer) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.stopped = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.has {
		c.has = false
		c.out(c.pending)
	}
}
