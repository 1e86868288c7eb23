package agent

import (
	"sync"
	"testing"
	"time"
)

// A burst of updates passes the first at once and the latest at the end
// of the interval; Stop passes the pending one, and nothing passes after.
func TestCoalescer(t *testing.T) {
	var mu sync.Mutex
	var got []string
	c := NewCoalescer(func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() }, 50*time.Millisecond)
	start := time.Now()
	for i := range 10000 {
		c.Progress(string(rune('a' + i%26)))
	}
	c.Progress("last")
	elapsed := time.Since(start)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		var tail string
		if n > 0 {
			tail = got[n-1]
		}
		mu.Unlock()
		if tail == "last" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the latest update never passed: %q", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	n := len(got)
	first := got[0]
	mu.Unlock()
	// One at once, then at most one per interval of the burst, plus the
	// trailing one.
	if limit := int(elapsed/(50*time.Millisecond)) + 2; n > limit || first != "a" {
		t.Fatalf("%d updates passed for 10001 in %s (limit %d), first %q", n, elapsed, limit, first)
	}
	time.Sleep(60 * time.Millisecond)
	c.Progress("after a pause") // a quiet interval: passes at once
	c.Progress("pending")
	c.Stop()
	c.Progress("after Stop")
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if tail := got[n:]; len(tail) != 2 || tail[0] != "after a pause" || tail[1] != "pending" {
		t.Fatalf("updates %q: want \"after a pause\" at once, \"pending\" at Stop, nothing after", tail)
	}
}
