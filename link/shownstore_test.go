package link

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var shownLog = slog.New(slog.DiscardHandler)

// The shown-notice list is bounded, drops expired ids (also at open), and
// survives a reopen.
func TestShownStoreBoundedAndPruned(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := openShownStore(dir, shownLog, clock)
	const max = 16
	s.max = max
	if err := s.Mark("soon", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Mark("never", time.Time{}); err != nil {
		t.Fatal(err)
	}
	for i := range max + 10 {
		if err := s.Mark(fmt.Sprintf("n-%d", i), now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != max || s.Shown("soon") || s.Shown("n-0") || !s.Shown(fmt.Sprintf("n-%d", max+9)) {
		t.Fatalf("len %d: not bounded to the newest %d", s.Len(), max)
	}
	now = now.Add(2 * time.Hour)
	r := openShownStore(dir, shownLog, clock)
	if r.Len() != 0 {
		t.Fatalf("after every expiry the reopened list holds %d ids", r.Len())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ShownNoticesFile)); len(b) != 0 {
		t.Fatalf("the file still holds %d bytes of expired ids", len(b))
	}
	if err := r.Mark("kept", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if !openShownStore(dir, shownLog, clock).Shown("kept") {
		t.Fatal("an id without expiry did not survive a reopen")
	}
}

// A state dir that cannot be written keeps the list in memory, and the
// next change after the fix stores everything.
func TestShownStoreFallsBackToMemory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(dir, []byte("a file in the way"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openShownStore(dir, shownLog, time.Now)
	if err := s.Mark("a", time.Time{}); err == nil || s.Problem() == nil {
		t.Fatal("Mark into a file in the way did not report the problem")
	}
	if !s.Shown("a") {
		t.Fatal("the id is not kept in memory")
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Mark("b", time.Time{}); err != nil || s.Problem() != nil {
		t.Fatalf("after the fix: %v / %v", err, s.Problem())
	}
	r := openShownStore(dir, shownLog, time.Now)
	if !r.Shown("a") || !r.Shown("b") {
		t.Fatal("the ids kept in memory were not stored once the dir worked")
	}
}

// A file with junk lines loads what parses.
func TestShownStoreSkipsBadLines(t *testing.T) {
	dir := t.TempDir()
	data := "{\"id\":\"ok\",\"shown\":\"2026-11-23T12:00:00Z\"}\nnot json\n{\"id\":\"\"}\n{\"id\":\"torn"
	if err := os.WriteFile(filepath.Join(dir, ShownNoticesFile), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openShownStore(dir, shownLog, time.Now)
	if s.Len() != 1 || !s.Shown("ok") {
		t.Fatalf("loaded %d ids", s.Len())
	}
}

// Whatever the shown-notice file holds, opening it keeps going, keeps
// only valid ids within the bound, and can store again.
func FuzzShownStoreLoad(f *testing.F) {
	f.Add([]byte("{\"id\":\"n-1\",\"expires\":\"2999-01-01T00:00:00Z\",\"shown\":\"2026-11-23T12:00:00Z\"}\n"))
	f.Add([]byte("{\"id\":\"n-2\",\"expires\":\"yesterday\"}\n{\"id\":\"n-2\"}\n"))
	f.Add([]byte("not json\n\n{\"id\":"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ShownNoticesFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
		s := openShownStore(dir, shownLog, time.Now)
		if s.Len() > MaxShownNotices {
			t.Fatalf("%d ids kept", s.Len())
		}
		for _, r := range s.recs {
			if r.ID == "" || len(r.ID) > maxOutboxID || !s.ids[r.ID] {
				t.Fatalf("kept a bad record %+v", r)
			}
		}
		if len(s.ids) != len(s.recs) {
			t.Fatalf("%d ids, %d records", len(s.ids), len(s.recs))
		}
	})
}
