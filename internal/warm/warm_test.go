package warm

import (
	"runtime"
	"sync/atomic"
	"testing"
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
