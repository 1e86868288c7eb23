package throttle

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"
)

type sums struct {
	mu  sync.Mutex
	all []Summary
}

func (s *sums) add(x Summary) { s.mu.Lock(); s.all = append(s.all, x); s.mu.Unlock() }
func (s *sums) get() []Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Summary(nil), s.all...)
}

// The first Burst of a kind from a source pass, then one per Every; the
// rest are counted into one summary per kind per Every; other sources
// and other kinds have buckets of their own.
func TestBurstThenSummary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got sums
		g := New(nil, Options{Burst: 3, Every: time.Minute, Summary: got.add})
		defer g.Close()
		n := 0
		for i := 0; i < 1000; i++ {
			if g.Allow("settings_ack", "peer-a", fmt.Sprint("line ", i)) {
				n++
			}
		}
		if n != 3 {
			t.Fatalf("%d of 1000 passed, want the burst of 3", n)
		}
		if !g.Allow("settings_ack", "peer-b", "x") || !g.Allow("diag_result", "peer-a", "x") {
			t.Fatal("another source or another kind was held back")
		}
		if len(got.get()) != 0 {
			t.Fatal("a summary before the interval")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		s := got.get()
		if len(s) != 1 || s[0].Kind != "settings_ack" || s[0].Held != 997 || s[0].Sources != 1 || s[0].LastSource != "peer-a" || s[0].LastDetail != "line 999" {
			t.Fatalf("summaries %+v, want one of 997 held from peer-a", s)
		}
		// A minute on the burst is back; a third of a minute, one.
		for i := 0; i < 3; i++ {
			if !g.Allow("settings_ack", "peer-a", "again") {
				t.Fatalf("a minute on: line %d of the burst held back", i)
			}
		}
		if g.Allow("settings_ack", "peer-a", "again") {
			t.Fatal("a minute on: more than the burst passed")
		}
		time.Sleep(20 * time.Second)
		if !g.Allow("settings_ack", "peer-a", "again") || g.Allow("settings_ack", "peer-a", "again") {
			t.Fatal("20 s on: want exactly one more to pass")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if s = got.get(); len(s) != 2 || s[1].Held != 2 {
			t.Fatalf("second summary %+v, want 2 held", s)
		}
		// Quiet: no summary when nothing was held back.
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if len(got.get()) != 2 {
			t.Fatal("a summary with nothing held back")
		}
	})
}

// A flood from many sources is bounded by the kind's own bucket: at
// most KindBurst at once, then KindBurst per Every, whatever the number
// of sources.
func TestManySourcesBoundedByKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got sums
		g := New(nil, Options{Burst: 5, KindBurst: 20, Every: time.Minute, Summary: got.add})
		defer g.Close()
		passed := 0
		for i := 0; i < 60000; i++ {
			if g.Allow("pairing_code", fmt.Sprintf("net-%d", i), "code") {
				passed++
			}
		}
		if passed != 20 {
			t.Fatalf("%d of 60000 sources passed at once, want the kind's burst of 20", passed)
		}
		time.Sleep(time.Minute)
		passed = 0
		for i := 0; i < 60000; i++ {
			if g.Allow("pairing_code", fmt.Sprintf("other-%d", i), "code") {
				passed++
			}
		}
		if passed != 20 {
			t.Fatalf("a minute on: %d passed, want 20", passed)
		}
	})
}

// A flood from more sources than MaxSources costs MaxSources buckets.
func TestSourcesBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got sums
		g := New(nil, Options{Burst: 1, KindBurst: 1 << 20, Every: time.Minute, MaxSources: 100, Summary: got.add})
		defer g.Close()
		passed := 0
		for i := 0; i < 100000; i++ {
			if g.Allow("enroll_code", fmt.Sprintf("10.%d.%d.0/24", i/256, i%256), "code") {
				passed++
			}
		}
		if len(g.buckets) > 100 {
			t.Fatalf("%d buckets, want at most 100", len(g.buckets))
		}
		if passed > 101 {
			t.Fatalf("%d of 100000 sources passed, want at most 101 (100 buckets and the overflow's one)", passed)
		}
		g.Flush()
		if s := got.get(); len(s) != 1 || s[0].Held != 100000-passed {
			t.Fatalf("summary %+v, want %d held", s, 100000-passed)
		}
	})
}

// Every string logged is cut to MaxField, still valid UTF-8, saying how
// long it was; the summary line goes to the logger.
func TestLogCutsFields(t *testing.T) {
	var buf bytes.Buffer
	g := New(slog.New(slog.NewTextHandler(&buf, nil)), Options{Burst: 1, MaxField: 64})
	long := strings.Repeat("é", 100000)
	if !g.Warn("diag_result", long, "unasked "+long, "request_id", long, "err", fmt.Errorf("%s", long)) {
		t.Fatal("first line held back")
	}
	if g.Warn("diag_result", long, "again") {
		t.Fatal("second line passed")
	}
	g.Close()
	out := buf.String()
	if len(out) > 1024 {
		t.Fatalf("%d bytes logged for a 200 KB field, want under 1 KiB:\n%s", len(out), out)
	}
	if !utf8.ValidString(out) || !strings.Contains(out, "…(200000 bytes)") || !strings.Contains(out, "summary") || !strings.Contains(out, "count=1") {
		t.Fatalf("log:\n%s", out)
	}
	if c := Cut("short", 64); c != "short" {
		t.Fatalf("Cut of a short string: %q", c)
	}
}

// A nil Gate allows everything (a part built without one).
func TestNilGate(t *testing.T) {
	var g *Gate
	if !g.Allow("k", "s", "d") {
		t.Fatal("nil gate held back")
	}
	g.Flush()
	g.Close()
}

func BenchmarkAllowHeld(b *testing.B) {
	g := New(nil, Options{Burst: 1, Summary: func(Summary) {}})
	defer g.Close()
	for i := 0; i < b.N; i++ {
		g.Allow("kind", "source", "detail")
	}
}

// A quiet gate forgets its buckets once they are full again (a device
// that logged one line: Every/Burst later; one that used its whole
// burst: Every later), and lets go of the map's table: an idle fleet's
// connect lines hold nothing.
func TestQuietGateForgetsItsBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(nil, Options{Burst: 10, Every: time.Minute, Summary: func(Summary) {}})
		defer g.Close()
		for i := range 1000 {
			g.Allow("device connected", fmt.Sprintf("peer-%d", i), "")
		}
		for range 10 {
			g.Allow("reply queue full", "noisy", "")
		}
		buckets := func() int { g.mu.Lock(); defer g.mu.Unlock(); return len(g.buckets) }
		if n := buckets(); n != 1001 {
			t.Fatalf("%d buckets after 1001 sources, want 1001", n)
		}
		time.Sleep(time.Minute/10 + time.Millisecond)
		synctest.Wait()
		if n := buckets(); n != 1 {
			t.Fatalf("%d buckets a refill later, want 1 (the source that used its burst)", n)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		g.mu.Lock()
		n, pruner := len(g.buckets), g.pruner
		g.mu.Unlock()
		if n != 0 || pruner != nil {
			t.Fatalf("%d buckets and a pruner %v a minute later, want none", n, pruner)
		}
		if !g.Allow("device connected", "peer-1", "") {
			t.Fatal("a pruned source is refused, want a full bucket")
		}
	})
}
