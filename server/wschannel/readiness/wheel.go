package readiness

import (
	"sync"
	"sync/atomic"
	"time"
)

// Wheel runs timers' functions once their deadlines have passed, never
// before, at most about a tick after: one goroutine and one ticker for
// any number of timers (a hashed timing wheel of wheelSlots slots). A
// timer whose deadline is further than a turn of the wheel is looked at
// once a turn. Moving a timer's deadline later (what a connection does
// at each frame) is a store when the timer is filed earlier already: the
// wheel files it again when it gets there.
type Wheel struct {
	tick  time.Duration
	start time.Time

	mu    sync.Mutex
	slots [wheelSlots]*Timer // each a circular list's first element, nil when empty
	done  int64              // the last tick processed
	stop  chan struct{}
	ended chan struct{}
}

const wheelSlots = 512

// Timer is one deadline of a Wheel; its zero value is not usable: see
// Wheel.Init.
type Timer struct {
	w    *Wheel
	f    Expired
	when atomic.Int64 // UnixNano; 0: stopped

	filed      atomic.Int64 // the tick it is filed under; 0: none
	prev, next *Timer       // in its slot's list (w.mu)
}

// NewWheel starts a wheel that looks at its timers every tick; Stop
// stops it.
func NewWheel(tick time.Duration) *Wheel {
	w := &Wheel{tick: tick, start: time.Now(), stop: make(chan struct{}), ended: make(chan struct{})}
	go w.run()
	return w
}

// Init sets t up to call f.Expired (on the wheel's goroutine: it must
// not block) once a deadline set with Reset has passed.
func (w *Wheel) Init(t *Timer, f Expired) { t.w, t.f = w, f }

// tickOf is the first tick at or after when.
func (w *Wheel) tickOf(when int64) int64 {
	d := when - w.start.UnixNano()
	k := d / int64(w.tick)
	if d > k*int64(w.tick) {
		k++
	}
	return max(k, 1)
}

// Reset sets t's deadline to when (replacing any other); t's function
// runs once it has passed.
func (t *Timer) Reset(when time.Time) {
	ns := when.UnixNano()
	if ns == 0 {
		ns = 1
	}
	t.when.Store(ns)
	k := t.w.tickOf(ns)
	if f := t.filed.Load(); f != 0 && f <= k {
		return // the wheel gets to it first and files it again (run)
	}
	w := t.w
	w.mu.Lock()
	w.unlink(t)
	if t.when.Load() == ns { // else a later Reset or Stop took over
		w.file(t, max(k, w.done+1))
	}
	w.mu.Unlock()
}

// Stop cancels t's deadline.
func (t *Timer) Stop() {
	t.when.Store(0)
	if t.filed.Load() == 0 {
		return
	}
	t.w.mu.Lock()
	t.w.unlink(t)
	t.w.mu.Unlock()
}

func (w *Wheel) file(t *Timer, k int64) {
	i := k % wheelSlots
	if h := w.slots[i]; h == nil {
		t.prev, t.next = t, t
		w.slots[i] = t
	} else {
		t.prev, t.next = h.prev, h
		h.prev.next = t
		h.prev = t
	}
	t.filed.Store(k)
}

func (w *Wheel) unlink(t *Timer) {
	k := t.filed.Load()
	if k == 0 {
		return
	}
	i := k % wheelSlots
	if t.next == t {
		w.slots[i] = nil
	} else {
		t.prev.next, t.next.prev = t.next, t.prev
		if w.slots[i] == t {
			w.slots[i] = t.next
		}
	}
	t.prev, t.next = nil, nil
	t.filed.Store(0)
}

func (w *Wheel) run() {
	defer close(w.ended)
	tk := time.NewTicker(w.tick)
	defer tk.Stop()
	var due []*Timer
	for {
		select {
		case <-w.stop:
			return
		case <-tk.C:
		}
		now := time.Now().UnixNano()
		upTo := (now - w.start.UnixNano()) / int64(w.tick)
		w.mu.Lock()
		from := max(w.done+1, upTo-wheelSlots+1) // a turn at most: each slot once
		for k := from; k <= upTo; k++ {
			i := k % wheelSlots
			head := w.slots[i]
			w.slots[i] = nil
			for t := head; t != nil; {
				next := t.next
				if next == head {
					next = nil
				}
				t.prev, t.next = nil, nil
				t.filed.Store(0)
				switch when := t.when.Load(); {
				case when == 0:
				case when <= now:
					due = append(due, t)
				default:
					w.file(t, max(w.tickOf(when), upTo+1))
				}
				t = next
			}
		}
		w.done = max(w.done, upTo)
		w.mu.Unlock()
		for i, t := range due {
			t.f.Expired()
			due[i] = nil
		}
		due = due[:0]
	}
}

// Stop stops the wheel's goroutine and waits for it; no timer runs after.
func (w *Wheel) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.ended
}
