package session

import (
	"testing"
	"time"
)

// checkTimestamp: appendTimestamp writes what time.Format writes.
func checkTimestamp(t *testing.T, tm time.Time) {
	t.Helper()
	got := appendTimestamp([]byte("x"), tm)
	if want := tm.Format(TimeLayout); string(got[1:]) != want {
		t.Fatalf("appendTimestamp(%v) = %q, Format writes %q", tm, got[1:], want)
	}
}

func TestTimestampMatchesFormat(t *testing.T) {
	t.Parallel()
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("x", -(9*3600 + 30*60)), time.FixedZone("y", 14*3600)}
	for _, loc := range zones {
		for _, tm := range []time.Time{
			time.Date(2026, 3, 15, 14, 30, 0, 123456789, loc),
			time.Date(2026, 12, 31, 23, 59, 59, 999999999, loc),
			time.Date(1, 1, 1, 0, 0, 0, 0, loc),
			time.Date(0, 1, 1, 0, 0, 0, 999, loc),
			time.Date(-1, 6, 1, 0, 0, 0, 0, loc),
			time.Date(9999, 12, 31, 23, 59, 59, 999999000, loc),
			time.Date(10000, 1, 1, 0, 0, 0, 0, loc),
			time.Date(2024, 2, 29, 1, 2, 3, 4000, loc),
			time.Now().In(loc),
		} {
			checkTimestamp(t, tm)
		}
	}
	if now := Now(); len(now) != len(TimeLayout) {
		t.Fatalf("Now() = %q", now)
	}
}

func FuzzTimestamp(f *testing.F) {
	f.Add(int64(1773585000), int64(123456789), int32(0))
	f.Add(int64(-62135596800), int64(0), int32(3600))
	f.Add(int64(253402300799), int64(999999999), int32(-43200))
	f.Fuzz(func(t *testing.T, sec, nsec int64, offset int32) {
		checkTimestamp(t, time.Unix(sec, nsec).In(time.FixedZone("z", int(offset%(18*3600)))))
	})
}
