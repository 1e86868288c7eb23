package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				b.Write([]byte("ab"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("ab", 400) {
		t.Fatalf("%d bytes, want 800 of \"ab\"", len(got))
	}
}

func TestMaxDropsWhatDoesNotFit(t *testing.T) {
	b := Buffer{Max: 5}
	for _, w := range []string{"abc", "de", "fgh"} {
		if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if got := b.String(); got != "abcde" {
		t.Fatalf("kept %q, want \"abcde\"", got)
	}
}
