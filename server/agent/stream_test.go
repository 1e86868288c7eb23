package agent

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"
)

// updates records what a Stream passes on.
type updates struct {
	mu  sync.Mutex
	got []string
}

func (u *updates) add(text string) {
	u.mu.Lock()
	u.got = append(u.got, text)
	u.mu.Unlock()
}

func (u *updates) all() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.got...)
}

// waitFor lets the bubble's fake time run, a StreamGap at a time, until
// the last update is want (the tests run in a synctest bubble: the
// stream's timers fire as soon as every goroutine waits).
func (u *updates) waitFor(t *testing.T, want string) []string {
	t.Helper()
	var got []string
	for range 1000 {
		synctest.Wait()
		if got = u.all(); len(got) > 0 && got[len(got)-1] == want {
			return got
		}
		time.Sleep(StreamGap)
	}
	t.Fatalf("updates %q, want the last to be %q", got, want)
	return nil
}

// checkExtends fails unless each update extends the one before.
func checkExtends(t *testing.T, got []string) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		if !strings.HasPrefix(got[i], got[i-1]) || len(got[i]) == len(got[i-1]) {
			t.Fatalf("update %d %q does not extend update %d %q", i, got[i], i-1, got[i-1])
		}
	}
}

func TestStreamFirstChunkPassesAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var u updates
		s := NewStream(0, u.add)
		defer s.Close()
		s.Write("Hel")
		// The first chunk is not held for the gap: it is the first update,
		// alone, even when more follows within the gap.
		u.waitFor(t, "Hel")
		s.Write("lo")
		got := u.waitFor(t, "Hello")
		if len(got) != 2 || got[0] != "Hel" {
			t.Fatalf("updates %q, want [Hel Hello]", got)
		}
	})
}

// A flood of 1,000 tiny chunks makes a handful of updates, each with all
// the text so far, the last with everything.
func TestStreamFloodCoalesced(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var u updates
		s := NewStream(0, u.add)
		defer s.Close()
		start := time.Now()
		var want strings.Builder
		for i := 0; i < 1000; i++ {
			c := string(rune('a' + i%26))
			want.WriteString(c)
			s.Write(c)
			if i%100 == 99 {
				time.Sleep(20 * time.Millisecond) // the flood takes a while: several gaps
			}
		}
		got := u.waitFor(t, want.String())
		elapsed := time.Since(start)
		limit := int(elapsed/StreamGap) + 2
		t.Logf("1000 chunks in %s: %d updates (limit %d)", elapsed, len(got), limit)
		if len(got) > limit || len(got) > 50 {
			t.Fatalf("%d updates for 1000 chunks in %s, want at most %d", len(got), elapsed, limit)
		}
		checkExtends(t, got)
	})
}

func TestStreamCappedOnARuneBoundary(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var u updates
		s := NewStream(7, u.add)
		defer s.Close()
		s.Write("héllo")  // 5 characters, 6 bytes
		s.Write(" wörld") // 2 fit: " w"
		s.Write("more")   // ignored: capped
		u.waitFor(t, "héllo w")
		if got := s.Text(); got != "héllo w" || utf8.RuneCountInString(got) != 7 {
			t.Fatalf("text %q, want the first 7 characters", got)
		}
		s.Write("x")
		if got := s.Text(); got != "héllo w" {
			t.Fatalf("after the cap a chunk was taken: %q", got)
		}
		// Cut inside a multibyte character's run: never half a character.
		s2 := NewStream(2, func(string) {})
		defer s2.Close()
		s2.Write("€€€")
		if got := s2.Text(); got != "€€" {
			t.Fatalf("capped at 2: %q", got)
		}
	})
}

func TestStreamCloseDropsPendingAndStops(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var u updates
		s := NewStream(0, u.add)
		s.gap = time.Hour // "b" stays pending
		s.Write("a")
		u.waitFor(t, "a")
		s.Write("b") // within the gap of "a": pending
		s.Close()
		s.Write("c") // after Close: ignored
		// Every timer of the stream would have fired by now, and run.
		time.Sleep(3 * StreamGap)
		synctest.Wait()
		if got := u.all(); len(got) != 1 || got[0] != "a" {
			t.Fatalf("updates %q, want only [a]: Close drops what is pending", got)
		}
	})
}

// Close waits for an update under way: none runs once it returns.
//
// Not in a bubble: Close waits on a mutex, which synctest does not count
// as durably blocked.
func TestStreamNothingAfterClose(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		closed  bool
		late    bool
		started = make(chan struct{}, 1)
		release = make(chan struct{})
	)
	s := NewStream(0, func(string) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		mu.Lock()
		late = late || closed
		mu.Unlock()
	})
	s.Write("a")
	<-started
	done := make(chan struct{})
	go func() {
		s.Close()
		mu.Lock()
		closed = true
		mu.Unlock()
		close(done)
	}()
	time.Sleep(20 * time.Millisecond) // Close is waiting for the update
	close(release)
	<-done
	mu.Lock()
	defer mu.Unlock()
	if late {
		t.Fatal("an update ran after Close returned")
	}
}

// A character split between two chunks is never passed half.
func TestStreamHoldsAPartialCharacter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var u updates
		s := NewStream(0, u.add)
		defer s.Close()
		s.Write("a\xe2\x82") // "a" and the first two bytes of "€"
		u.waitFor(t, "a")
		s.Write("\xac!")
		got := u.waitFor(t, "a€!")
		for _, g := range got {
			if !utf8.ValidString(g) {
				t.Fatalf("update %q is not valid UTF-8", g)
			}
		}
	})
}

func TestStreamConcurrentWriters(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var u updates
		s := NewStream(0, u.add)
		defer s.Close()
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 250; i++ {
					s.Write("x")
				}
			}()
		}
		wg.Wait()
		got := u.waitFor(t, strings.Repeat("x", 1000))
		checkExtends(t, got)
	})
}
