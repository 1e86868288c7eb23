package pool

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fake is a member that "exits" when asked to stop.
type fake struct {
	key     string
	stopped atomic.Bool
	reason  atomic.Value
}

func (f *fake) Dying() bool { return f.stopped.Load() }
func (f *fake) RequestStop(reason string) {
	f.reason.Store(reason)
	f.stopped.Store(true)
}

// In a synctest bubble: the restart delay passes in fake time, and a
// busy process's second acquire is seen waiting (durably blocked) rather
// than for a while.
func TestPool(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := New[*fake](2, 20*time.Millisecond, 100*time.Millisecond, nil)
		create := func(key string) func() *fake { return func() *fake { return &fake{key: key} } }

		a, out := p.Acquire(ctx, "a", create("a"), nil)
		if out != Created {
			t.Fatalf("first acquire: %v", out)
		}
		p.Release(a)
		if again, out := p.Acquire(ctx, "a", create("a"), nil); out != Acquired || again != a {
			t.Fatalf("second acquire: %v %v", again, out)
		}
		// Busy: a second acquire waits until released.
		got := make(chan Outcome, 1)
		go func() { _, o := p.Acquire(ctx, "a", create("a"), nil); got <- o }()
		synctest.Wait()
		select {
		case o := <-got:
			t.Fatalf("acquired a busy process: %v", o)
		default:
		}
		p.Release(a)
		if o := <-got; o != Acquired {
			t.Fatalf("after release: %v", o)
		}
		p.Release(a)
		time.Sleep(time.Millisecond) // fake time moves only when told: a was used before b

		// Full: the least recently used idle process makes room.
		b, _ := p.Acquire(ctx, "b", create("b"), nil)
		p.Release(b)
		exitWhenStopped := func(f *fake) {
			// A while, not for ever: were another process stopped, the
			// bubble's deadlock fails the test at once.
			for i := 0; !f.Dying(); i++ {
				if i == 1000 {
					return
				}
				time.Sleep(time.Millisecond)
			}
			p.Exited(f, false) // no crash: the pool stopped it
			p.Done()
		}
		go exitWhenStopped(a)
		c, out := p.Acquire(ctx, "c", create("c"), nil) // waits for a to exit
		if out != Created || !a.Dying() || a.reason.Load() != "making room for another session (maxProcesses reached)" {
			t.Fatalf("c: %v, a stopped %v", out, a.Dying())
		}
		if w := p.crashes.Wait("a"); w != 0 {
			t.Fatal("an eviction counted as a crash")
		}
		if _, ok := p.Get("a"); ok {
			t.Fatal("the evicted process is still a's")
		}

		// A crash delays the session's next start.
		p.Release(c)
		p.Exited(c, false)
		p.Done()
		if w := p.crashes.Wait("c"); w <= 0 {
			t.Fatalf("no restart delay after a crash (%s)", w)
		}
		start := time.Now()
		c2, out := p.Acquire(ctx, "c", create("c"), nil)
		if out != Created || time.Since(start) < 15*time.Millisecond {
			t.Fatalf("restart: %v after %s", out, time.Since(start))
		}
		p.Answered("c")
		if w := p.crashes.Wait("c"); w != 0 {
			t.Fatal("Answered kept the delay")
		}
		p.Release(c2)

		// Idle: taken out once idle long enough.
		if d := p.IdleCheck(c2, time.Hour); d <= 0 {
			t.Fatal("a fresh process is idle")
		}
		time.Sleep(time.Nanosecond) // fake time moves only when told
		if d := p.IdleCheck(c2, time.Nanosecond); d != 0 {
			t.Fatalf("IdleCheck = %s", d)
		}
		p.Exited(c2, false)
		p.Done()
		if w := p.crashes.Wait("c"); w != 0 {
			t.Fatal("an idle stop counted as a crash")
		}

		// Close stops the rest and refuses new work.
		ctxC, cancel := context.WithCancel(ctx)
		cancel()
		if _, o := p.Acquire(ctxC, "z", create("z"), nil); o != Cancelled {
			t.Fatalf("cancelled acquire: %v", o)
		}
		go exitWhenStopped(b)
		p.Close("closing")
		if _, o := p.Acquire(ctx, "b", create("b"), nil); o != Closed {
			t.Fatalf("after Close: %v", o)
		}
		if n := p.Live(); n != 0 {
			t.Fatalf("%d live after Close", n)
		}
	})
}
