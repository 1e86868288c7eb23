package agent

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A burst of updates passes the first at once and the latest at the end
// of the interval; Stop passes the pending one, and nothing passes after.
// In a synctest bubble: the burst takes no time, so exactly two pass.
func TestCoalescer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []string
		passed := func() []string {
			synctest.Wait() // the coalescer's timer, if due, has run
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(got)
		}
		c := NewCoalescer(func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() }, 50*time.Millisecond)
		for i := range 10000 {
			c.Progress(string(rune('a' + i%26)))
		}
		c.Progress("last")
		if p := passed(); !slices.Equal(p, []string{"a"}) {
			t.Fatalf("during the burst: %q, want only the first at once", p)
		}
		time.Sleep(50 * time.Millisecond)
		if p := passed(); !slices.Equal(p, []string{"a", "last"}) {
			t.Fatalf("an interval after the burst: %q, want the first and the latest", p)
		}
		time.Sleep(60 * time.Millisecond)
		c.Progress("after a pause") // a quiet interval: passes at once
		c.Progress("pending")
		c.Stop()
		c.Progress("after Stop")
		time.Sleep(100 * time.Millisecond)
		if p := passed(); !slices.Equal(p[2:], []string{"after a pause", "pending"}) {
			t.Fatalf("updates %q: want \"after a pause\" at once, \"pending\" at Stop, nothing after", p[2:])
		}
	})
}
