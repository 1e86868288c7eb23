package readiness

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A timer runs once its deadline has passed, never before and at most a
// tick after; one moved later runs at the later deadline, a stopped one
// never; deadlines beyond a turn of the wheel run too.
func TestWheelDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick = 100 * time.Millisecond
		w := NewWheel(tick)
		defer w.Stop()
		start := time.Now()
		type rec struct{ at atomic.Int64 }
		mk := func() (*Timer, *rec) {
			r := &rec{}
			tm := &Timer{}
			w.Init(tm, Func(func() { r.at.Store(int64(time.Since(start))) }))
			return tm, r
		}
		a, ra := mk()
		a.Reset(start.Add(time.Second))
		b, rb := mk()
		b.Reset(start.Add(time.Second))
		b.Reset(start.Add(3 * time.Second)) // later: a store, filed again by the wheel
		c, rc := mk()
		c.Reset(start.Add(time.Second))
		c.Stop()
		d, rd := mk()
		d.Reset(start.Add(2 * wheelSlots * tick)) // two turns away
		e, re := mk()
		e.Reset(start.Add(5 * time.Second))
		e.Reset(start.Add(500 * time.Millisecond)) // earlier: filed again now

		time.Sleep(3*wheelSlots*tick + time.Second)
		synctest.Wait()
		check := func(name string, r *rec, want time.Duration) {
			t.Helper()
			got := time.Duration(r.at.Load())
			if got < want || got > want+tick {
				t.Errorf("timer %s ran at %v, want in [%v, %v]", name, got, want, want+tick)
			}
		}
		check("a", ra, time.Second)
		check("b", rb, 3*time.Second)
		check("d", rd, 2*wheelSlots*tick)
		check("e", re, 500*time.Millisecond)
		if rc.at.Load() != 0 {
			t.Errorf("a stopped timer ran at %v", time.Duration(rc.at.Load()))
		}
	})
}

// Many timers moved at random stay correct: each runs once, after its
// last deadline.
func TestWheelManyResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick = 50 * time.Millisecond
		w := NewWheel(tick)
		defer w.Stop()
		start := time.Now()
		const n = 2000
		var runs [n]atomic.Int32
		var late [n]atomic.Int64
		timers := make([]Timer, n)
		dl := make([]time.Time, n)
		for i := range timers {
			w.Init(&timers[i], Func(func() {
				runs[i].Add(1)
				late[i].Store(int64(time.Since(dl[i])))
			}))
			dl[i] = start.Add(time.Duration(i%97) * 37 * time.Millisecond)
			timers[i].Reset(dl[i])
		}
		time.Sleep(time.Second)
		synctest.Wait()         // the wheel's tick at 1s is done
		for i := range timers { // those not run yet move later
			if runs[i].Load() == 0 {
				dl[i] = time.Now().Add(time.Duration(i%13) * 300 * time.Millisecond)
				timers[i].Reset(dl[i])
			}
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		for i := range timers {
			if r := runs[i].Load(); r != 1 {
				t.Fatalf("timer %d ran %d times, want once", i, r)
			}
			if l := time.Duration(late[i].Load()); l < 0 || l > tick {
				t.Fatalf("timer %d ran %v after its deadline", i, l)
			}
		}
	})
}
