package activity

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"termlink/link"
)

type report struct {
	busy bool
	why  string
	at   time.Duration // since the test's start
}

// reporter runs t.Report and keeps what it sent.
func reporter(t *testing.T, tr *Tracker) (got func() []report, stop func()) {
	t.Helper()
	start := time.Now()
	var mu sync.Mutex
	var out []report
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.Report(ctx, func(b bool, why string) {
			mu.Lock()
			out = append(out, report{b, why, time.Since(start)})
			mu.Unlock()
		})
	}()
	return func() []report {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return append([]report(nil), out...)
		}, func() {
			cancel()
			<-done
		}
}

// A run in progress (a message not yet replied) makes the device busy
// "run" until its reply; the state goes at once, the change as it comes.
func TestRunBusyUntilReplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int64
		tr := New(func() int { return int(runs.Load()) }, 10*time.Second)
		defer tr.Stop()
		got, stop := reporter(t, tr)
		defer stop()
		if r := got(); len(r) != 1 || r[0].busy {
			t.Fatalf("reports %+v, want one: idle", r)
		}
		time.Sleep(5 * time.Second)
		runs.Store(1) // a message sent
		tr.Changed()
		if r := got(); len(r) != 2 || !r[1].busy || r[1].why != link.BusyRun {
			t.Fatalf("reports %+v, want busy run second", r)
		}
		if !tr.Busy() {
			t.Fatal("not busy with a run in progress")
		}
		time.Sleep(time.Minute) // a long run: busy still, nothing new sent
		if r := got(); len(r) != 2 {
			t.Fatalf("reports %+v during the run", r)
		}
		runs.Store(0) // replied; not told: the poll finds it
		time.Sleep(runsPoll)
		if r := got(); len(r) != 3 || r[2].busy {
			t.Fatalf("reports %+v, want idle after the reply", r)
		}
	})
}

// A key makes the device busy "keys" for the key window, each key
// pressing it on; the busy_seconds setting changes the window.
func TestKeysBusyForTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(nil, 60*time.Second)
		defer tr.Stop()
		got, stop := reporter(t, tr)
		defer stop()
		got() // idle, sent
		time.Sleep(5 * time.Second)
		tr.KeyPressed()
		if r := got(); len(r) != 2 || !r[1].busy || r[1].why != link.BusyKeys {
			t.Fatalf("reports %+v, want busy keys after the key", r)
		}
		time.Sleep(59 * time.Second)
		tr.KeyPressed() // pressed on
		time.Sleep(59 * time.Second)
		if r := got(); len(r) != 2 || !tr.Busy() {
			t.Fatalf("reports %+v, busy %v: want busy still 59 s after the second key", r, tr.Busy())
		}
		time.Sleep(time.Second)
		r := got()
		if len(r) != 3 || r[2].busy || r[2].at != 124*time.Second {
			t.Fatalf("reports %+v, want idle at 124 s (60 s after the last key)", r)
		}
		tr.SetKeyWindow(5 * time.Second)
		tr.KeyPressed() // at 124 s: sent a gap after the last report
		time.Sleep(5 * time.Second)
		if r := got(); len(r) != 5 || !r[3].busy || r[3].at != 125*time.Second || r[4].busy || r[4].at != 129*time.Second {
			t.Fatalf("reports %+v, want busy at 125 s (the gap) then idle at 129 s (5 s after the key)", r)
		}
	})
}

// A question open keeps the device busy until it closes; a run outranks
// it; changes within a second are sent once, the state at the gap's end.
func TestQuestionAndReportGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int64
		tr := New(func() int { return int(runs.Load()) }, time.Second)
		defer tr.Stop()
		got, stop := reporter(t, tr)
		defer stop()
		got() // idle, sent
		tr.SetQuestionOpen(true)
		runs.Store(1)
		tr.Changed()
		tr.SetQuestionOpen(false)
		tr.SetQuestionOpen(true)
		r := got()
		if len(r) != 1 {
			t.Fatalf("reports %+v, want the first only within the gap", r)
		}
		time.Sleep(MinReportGap)
		r = got()
		if len(r) != 2 || r[1].why != link.BusyRun || r[1].at != MinReportGap {
			t.Fatalf("reports %+v, want busy run (the run outranks the question) a gap after the first", r)
		}
		runs.Store(0)
		tr.Changed()
		time.Sleep(MinReportGap)
		if r = got(); len(r) != 3 || r[2].why != link.BusyQuestion {
			t.Fatalf("reports %+v, want busy question once the run ended", r)
		}
		tr.SetQuestionOpen(false)
		time.Sleep(MinReportGap)
		if r = got(); len(r) != 4 || r[3].busy {
			t.Fatalf("reports %+v, want idle once the question closed", r)
		}
	})
}

// WaitIdle returns once nothing holds the device, or with ctx's error.
func TestWaitIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(nil, 30*time.Second)
		defer tr.Stop()
		if err := tr.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
		tr.KeyPressed()
		start := time.Now()
		if err := tr.WaitIdle(context.Background()); err != nil || time.Since(start) != 30*time.Second {
			t.Fatalf("WaitIdle: %v after %v, want nil after the 30 s key window", err, time.Since(start))
		}
		tr.SetQuestionOpen(true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		if err := tr.WaitIdle(ctx); err != context.DeadlineExceeded {
			t.Fatalf("WaitIdle with a question open: %v, want the context's deadline", err)
		}
	})
}
