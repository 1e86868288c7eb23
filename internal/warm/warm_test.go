package warm

import (
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Jobs given one after another run on the same few goroutines.
func TestJobsReuseGoroutines(t *testing.T) {
	done := make(chan int)
	p := New(8, time.Minute, func(i int) { done <- i })
	defer p.Stop()
	for i := range 500 {
		p.Run(i)
		if got := <-done; got != i {
			t.Fatalf("job %d ran as %d", i, got)
		}
	}
	if s := p.Started(); s > 10 {
		t.Fatalf("%d goroutines for 500 jobs one after another, want a few reused", s)
	}
}

// Run never waits: jobs that block run side by side, each on a goroutine.
func TestRunNeverWaits(t *testing.T) {
	release := make(chan struct{})
	var running atomic.Int32
	p := New(2, time.Minute, func(int) { running.Add(1); <-release })
	for i := range 20 {
		p.Run(i)
	}
	for running.Load() < 20 {
		runtime.Gosched()
	}
	close(release)
	p.Stop()
	if s := p.Started(); s != 20 {
		t.Fatalf("%d goroutines for 20 blocked jobs, want 20", s)
	}
}

// With maxIdle 0 nothing stays: each job starts a goroutine; Stop returns
// once all are done, and a job given after Stop still runs.
func TestNoIdleAndStop(t *testing.T) {
	done := make(chan struct{})
	p := New(0, time.Minute, func(struct{}) { done <- struct{}{} })
	for range 3 {
		p.Run(struct{}{})
		<-done
	}
	p.Stop()
	if s := p.Started(); s != 3 {
		t.Fatalf("%d goroutines, want 3", s)
	}
	p.Run(struct{}{})
	<-done
}

// An idle goroutine exits after idleFor.
func TestIdleGoroutinesExit(t *testing.T) {
	done := make(chan struct{})
	p := New(4, time.Millisecond, func(struct{}) { done <- struct{}{} })
	p.Run(struct{}{})
	<-done
	p.wg.Wait() // the goroutine has returned without Stop
}

// liveCount is the number of the pool's goroutines running.
func (p *Pool[T]) liveCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// A goroutine idle for a whole period of idleFor exits by the end of the
// next one; one given a job within every period stays, and a pool with
// no goroutine left arms its timer again for the next one it starts.
func TestIdleExitAfterAWholePeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		p := New(4, time.Minute, func(struct{}) { done <- struct{}{} })
		defer p.Stop()
		for range 10 { // a job every 50 s: never idle for a whole minute
			p.Run(struct{}{})
			<-done
			time.Sleep(50 * time.Second)
			synctest.Wait()
			if n := p.liveCount(); n != 1 {
				t.Fatalf("%d goroutines live while given a job every 50 s, want 1", n)
			}
		}
		if s := p.Started(); s != 1 {
			t.Fatalf("%d goroutines started for jobs 50 s apart, want 1 kept", s)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := p.liveCount(); n != 0 {
			t.Fatalf("%d goroutines live after 2 idle minutes, want 0", n)
		}
		p.Run(struct{}{})
		<-done
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := p.liveCount(); n != 0 {
			t.Fatalf("%d goroutines live 2 idle minutes after a restart of the pool, want 0", n)
		}
		if s := p.Started(); s != 2 {
			t.Fatalf("%d goroutines started, want 2", s)
		}
	})
}

// Of several idle goroutines, those that stayed idle throughout a period
// exit, and those that took a job during it stay.
func TestReapOnlyTheIdleThroughout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		p := New(8, time.Minute, func(struct{}) { <-release })
		defer p.Stop()
		for range 3 { // three goroutines at once
			p.Run(struct{}{})
		}
		synctest.Wait()
		for range 3 {
			release <- struct{}{}
		}
		synctest.Wait() // 3 idle
		time.Sleep(90 * time.Second)
		// A job during the second period: one goroutine is busy for a while.
		p.Run(struct{}{})
		synctest.Wait()
		time.Sleep(40 * time.Second) // the reap at 2 minutes: 2 were idle throughout
		synctest.Wait()
		if n := p.liveCount(); n != 1 {
			t.Fatalf("%d goroutines live, want the busy one alone", n)
		}
		release <- struct{}{}
	})
}
