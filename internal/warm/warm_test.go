package warm

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestJobsRunOnWarmGoroutines(t *testing.T) {
	p := New(4, time.Minute)
	defer p.Stop()
	var n atomic.Int64
	for i := 0; i < 100; i++ {
		done := make(chan struct{})
		p.Go(func() { n.Add(1); close(done) })
		<-done
		waitFor(t, "the goroutine waits again", func() bool { return p.Idle() == 1 })
	}
	if n.Load() != 100 {
		t.Fatalf("ran %d jobs, want 100", n.Load())
	}
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if started != 1 {
		t.Fatalf("started %d goroutines for 100 jobs one after another, want 1", started)
	}
}

func TestAtMostMaxIdleWait(t *testing.T) {
	p := New(3, time.Minute)
	defer p.Stop()
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		p.Go(func() { defer wg.Done(); <-release })
	}
	close(release)
	wg.Wait()
	waitFor(t, "the goroutines settle", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.idle == 3
	})
	time.Sleep(20 * time.Millisecond) // the others return; none may wait beyond maxIdle
	if idle := p.Idle(); idle != 3 {
		t.Fatalf("%d goroutines wait, want maxIdle 3", idle)
	}
}

func TestIdleGoroutinesExit(t *testing.T) {
	p := New(8, 5*time.Millisecond)
	defer p.Stop()
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	waitFor(t, "the idle goroutine exits", func() bool { return p.Idle() == 0 })
	// And a job after that still runs, on a new goroutine.
	done2 := make(chan struct{})
	p.Go(func() { close(done2) })
	<-done2
}

func TestStopWaitsForJobsAndEndsWaiters(t *testing.T) {
	p := New(8, time.Hour)
	var ran atomic.Bool
	started := make(chan struct{})
	p.Go(func() { close(started); time.Sleep(20 * time.Millisecond); ran.Store(true) })
	<-started
	idleDone := make(chan struct{})
	p.Go(func() { close(idleDone) })
	<-idleDone
	p.Stop()
	if !ran.Load() {
		t.Fatal("Stop returned before a running job finished")
	}
	if idle := p.Idle(); idle != 0 {
		t.Fatalf("%d goroutines still wait after Stop", idle)
	}
	// After Stop a job still runs.
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
}
