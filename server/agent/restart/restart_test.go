package restart

import (
	"fmt"
	"testing"
	"time"
)

// Restart delays are jittered (agents that crashed together restart
// apart) and stay within [min, max]. Issue 10, finding 10.
func TestDelays(t *testing.T) {
	lo, hi := 500*time.Millisecond, 30*time.Second
	tr := New(lo, hi)
	b := tr.newBackoff()
	if b.RandomizationFactor <= 0 || b.MaxElapsedTime != 0 || b.Multiplier != 2 {
		t.Fatalf("backoff %+v: want randomized, doubling, never giving up", b)
	}
	// The first delay of many sessions that crashed at once.
	now := time.Now()
	firsts := map[time.Duration]bool{}
	for i := range 50 {
		d := tr.Crashed(fmt.Sprint("s", i), now)
		if d < lo || d > 3*lo {
			t.Fatalf("first delay %s, want %s..%s", d, lo, 3*lo)
		}
		firsts[d] = true
	}
	if len(firsts) < 2 {
		t.Errorf("50 sessions that crashed together all wait %v: no jitter", firsts)
	}
	// Crashes in a row: growing, never past the bounds, reaching the top.
	var top time.Duration
	for i := range 30 {
		d := tr.Crashed("row", now)
		if d < lo || d > hi {
			t.Fatalf("delay %d = %s, want %s..%s", i, d, lo, hi)
		}
		top = max(top, d)
	}
	if top < hi/3 {
		t.Errorf("after 30 crashes the longest delay was %s, want the backoff near %s", top, hi)
	}
	if w := tr.Wait("row"); w <= 0 {
		t.Errorf("Wait after a crash = %s, want > 0", w)
	}
	if n := tr.Crashes("row"); n != 30 {
		t.Errorf("Crashes after 30 in a row = %d", n)
	}
	tr.Reset("row")
	if w := tr.Wait("row"); w != 0 {
		t.Errorf("Wait after Reset = %s, want 0", w)
	}
	if n := tr.Crashes("row"); n != 0 {
		t.Errorf("Crashes after Reset = %d, want 0", n)
	}
	// Keys long past their wait are forgotten at the next crash.
	tr.Crashed("other", now.Add(20*hi))
	if _, ok := tr.crashes["s1"]; ok {
		t.Error("a key whose wait ended long ago is still kept")
	}
}
