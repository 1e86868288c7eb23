package router

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"termlink/server/record"
)

func isReady(w *Waiter) bool {
	select {
	case <-w.Ready():
		return true
	default:
		return false
	}
}

// The refusals wrap record.ErrBusy, name their bound and can be waited out.
func TestAdmissionRefusals(t *testing.T) {
	a := NewAdmission(2)
	if err := a.Reserve("s", 1); err != nil {
		t.Fatal(err)
	}
	err := a.Reserve("s", 1)
	var be *BusyError
	if !errors.Is(err, record.ErrBusy) || !errors.As(err, &be) || !strings.Contains(err.Error(), "maxWaitingPerSession") ||
		!strings.HasPrefix(err.Error(), "busy: session s has 1 messages waiting") {
		t.Fatalf("session bound: %v", err)
	}
	if err := a.Reserve("t", 5); err != nil {
		t.Fatal(err)
	}
	if err := a.Reserve("u", 5); !errors.As(err, &be) || !strings.Contains(err.Error(), "the server has 2 messages waiting (maxWaitingRuns)") {
		t.Fatalf("server bound: %v", err)
	}
	ready, done := be.WaitRoom()
	a.Release("t", 1)
	select {
	case <-ready:
	default:
		t.Fatal("the waiter was not given the freed place")
	}
	if first, err := a.ReserveFirst("u", 5); err != nil || !first {
		t.Fatalf("the waiter's resend: first %v, %v", first, err)
	}
	done()
	if n := a.Waiting(); n != 2 {
		t.Fatalf("waiting %d, want 2", n)
	}
}

// Freed places go to the waiters in line, one each, in order; a fresh
// message does not overtake them.
func TestAdmissionLineInOrder(t *testing.T) {
	a := NewAdmission(2)
	a.Reserve("a", 10)
	a.Reserve("b", 10)
	ws := make([]*Waiter, 5)
	for i := range ws {
		ws[i] = a.Wait(fmt.Sprintf("w%d", i), 10)
	}
	a.Release("a", 1)
	for i, w := range ws {
		if got := isReady(w); got != (i == 0) {
			t.Fatalf("after one release waiter %d ready %v", i, got)
		}
	}
	if err := a.Reserve("fresh", 10); !errors.Is(err, record.ErrBusy) {
		t.Fatalf("a fresh message took the place held for a waiter: %v", err)
	}
	a.Release("b", 1)
	if !isReady(ws[1]) || isReady(ws[2]) {
		t.Fatal("second release did not go to the second waiter alone")
	}
	ws[2].Done() // gives up in line: skipped
	ws[0].Done() // held, never taken: its place goes on, to waiter 3
	if !isReady(ws[3]) || isReady(ws[4]) {
		t.Fatal("a place a waiter let go did not go to the next one in line")
	}
	if err := a.Reserve("w1", 10); err != nil {
		t.Fatalf("waiter 1 takes its place: %v", err)
	}
	ws[1].Done()
	if n := a.Waiting(); n != 2 {
		t.Fatalf("waiting %d, want 2 (w1's message and w3's held place)", n)
	}
	if n := a.Waiters(); n != 1 {
		t.Fatalf("waiters %d, want 1", n)
	}
	ws[3].Done()
	ws[4].Done()
	if n, w := a.Waiting(), a.Waiters(); n != 1 || w != 0 {
		t.Fatalf("waiting %d waiters %d, want 1 and 0", n, w)
	}
}

// A waiter whose session is at its bound is woken by its own session's
// release, not by another's.
func TestAdmissionSessionWaiter(t *testing.T) {
	a := NewAdmission(100)
	a.Reserve("s", 2)
	a.Reserve("s", 2)
	a.Reserve("t", 2)
	w := a.Wait("s", 2)
	a.Release("t", 1)
	if isReady(w) {
		t.Fatal("another session's release woke the waiter")
	}
	a.Release("s", 1)
	if !isReady(w) {
		t.Fatal("its session's release did not wake the waiter")
	}
	if _, err := a.ReserveFirst("s", 2); err != nil {
		t.Fatal(err)
	}
	w.Done()
	if n := a.Waiting(); n != 2 {
		t.Fatalf("waiting %d, want 2", n)
	}
	// Given up while blocked: gone.
	w = a.Wait("s", 2)
	w.Done()
	a.Release("s", 1)
	if n, ws := a.Waiting(), a.Waiters(); n != 1 || ws != 0 {
		t.Fatalf("waiting %d waiters %d after a blocked waiter gave up, want 1 and 0", n, ws)
	}
}

// A session waiter whose session frees a place while the server is full
// joins the line.
func TestAdmissionSessionThenLine(t *testing.T) {
	a := NewAdmission(2)
	a.Reserve("s", 1)
	a.Reserve("t", 5)
	ws := a.Wait("s", 1) // blocked by its session
	wu := a.Wait("u", 5) // in line
	a.Release("s", 1)    // one place: ws joins the line behind wu
	if !isReady(wu) || isReady(ws) {
		t.Fatalf("the place went to ws %v wu %v, want the one in line first", isReady(ws), isReady(wu))
	}
	a.Release("t", 1)
	if !isReady(ws) {
		t.Fatal("the session waiter did not get the next place")
	}
	ws.Done()
	wu.Done()
	if n := a.Waiting(); n != 0 {
		t.Fatalf("waiting %d, want 0", n)
	}
}

func TestAdmissionReserveWait(t *testing.T) {
	a := NewAdmission(1)
	a.Reserve("s", 5)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.ReserveWait(ctx, "t", 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	got := make(chan error, 1)
	go func() { got <- a.ReserveWait(context.Background(), "t", 5) }()
	for a.Waiters() == 0 {
		runtime.Gosched()
	}
	a.Release("s", 1)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n, w := a.Waiting(), a.Waiters(); n != 1 || w != 0 {
		t.Fatalf("waiting %d waiters %d, want 1 and 0", n, w)
	}
	a.Release("t", 1)
	if err := a.Reserve("x", 5); err != nil {
		t.Fatalf("a place taken by ReserveWait was not a reservation: %v", err)
	}
}

// The line's memory follows its waiters: many that give up leave nothing.
func TestAdmissionLineCompacts(t *testing.T) {
	a := NewAdmission(1)
	a.Reserve("s", 5)
	for i := range 10000 {
		a.Wait(fmt.Sprint(i), 5).Done()
	}
	if len(a.line) > 64 {
		t.Fatalf("line holds %d entries for no waiter", len(a.line))
	}
}
