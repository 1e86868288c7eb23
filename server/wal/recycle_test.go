package wal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fastSync stands in for fdatasync (recycling is off with NoSync, which
// has nothing to save): the tests check what is written, not the disk.
func fastSync(*os.File) error { return nil }

func spareFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+spareSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A released segment becomes a spare, the next segment is a spare
// written over from the start, at most maxSpares are kept, and a log of
// recycled segments reopens with exactly its unreleased records and goes
// on at the right LSN.
func TestSegmentsRecycled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opt := Options{SegmentBytes: 1 << 10, Sync: fastSync}
	l, _ := open(t, dir, opt)
	var all []rec
	// Each round fills about two segments, then releases everything.
	for round := range 6 {
		all = append(all, appendN(t, l, strings.Repeat("r", 60)+string(rune('a'+round)), 16)...)
		if err := l.Release(l.Durable()); err != nil {
			t.Fatal(err)
		}
		if n := len(spareFiles(t, dir)); n > maxSpares {
			t.Fatalf("round %d: %d spares kept, want at most %d", round, n, maxSpares)
		}
	}
	if n := len(spareFiles(t, dir)); n == 0 {
		t.Fatal("no released segment kept for reuse")
	}
	// Files on disk stay bounded: segments in use plus the spares.
	ents, _ := os.ReadDir(dir)
	if len(ents) > 2+maxSpares+2 { // + LOCK and released
		t.Fatalf("%d files in the log directory: released segments are not reused", len(ents))
	}
	// A recycled segment holds earlier content past its records: the
	// segment being written is longer than what was written to it.
	cur := segmentFiles(t, dir)
	fi, err := os.Stat(cur[len(cur)-1])
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() <= l.size+headerSize {
		t.Fatalf("the segment being written is %d bytes for %d written: not a recycled one", fi.Size(), l.size)
	}
	unreleased := appendN(t, l, "tail", 5)
	l.Close()

	l2, recs := open(t, dir, opt)
	equalRecs(t, recs, unreleased)
	more := appendN(t, l2, "more", 3)
	if more[0].lsn != unreleased[4].lsn+1 {
		t.Fatalf("after reopen the next LSN is %d, want %d", more[0].lsn, unreleased[4].lsn+1)
	}
	l2.Close()
	_, recs = open(t, dir, opt)
	equalRecs(t, recs, append(unreleased, more...))

	// Without the release mark every segment on disk replays from its
	// first record to where its records end, never its earlier content.
	d := copyDir(t, dir)
	os.Remove(filepath.Join(d, releaseFile))
	_, recs = open(t, d, opt)
	for i := 1; i < len(recs); i++ {
		if recs[i].lsn != recs[i-1].lsn+1 {
			t.Fatalf("replayed %v after %v: earlier content of a recycled segment read as records", recs[i], recs[i-1])
		}
	}
	if last := recs[len(recs)-1]; last != more[2] {
		t.Fatalf("without the mark the last record replayed is %v, want %v", last, more[2])
	}
	_ = all
}

// A crash while writing a recycled segment: the bytes of the unsynced
// write torn in the middle of its frame are a torn tail (dropped with a
// warning, the records before it kept), even with the segment's earlier
// content after them.
func TestTornTailInARecycledSegment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opt := Options{SegmentBytes: 1 << 10, Sync: fastSync}
	l, _ := open(t, dir, opt)
	// Append and release until the segment being written is a recycled
	// one with room for three more records.
	recycled := func() bool {
		segs := segmentFiles(t, dir)
		fi, err := os.Stat(segs[len(segs)-1])
		return err == nil && fi.Size() > l.size+4*headerSize+40 && l.size+3*(headerSize+10) < opt.SegmentBytes-headerSize
	}
	for i := 0; !recycled(); i++ {
		if i == 200 {
			t.Fatal("no recycled segment after 200 appends and releases")
		}
		appendN(t, l, strings.Repeat("x", 80), 1)
		if err := l.Release(l.Durable()); err != nil {
			t.Fatal(err)
		}
	}
	kept := appendN(t, l, "kept", 2)
	last := appendN(t, l, "torn", 1)
	end := l.size
	l.Close()
	segs := segmentFiles(t, dir)
	seg := segs[len(segs)-1]
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) <= end+headerSize {
		t.Fatal("the last segment is not a recycled one")
	}
	// Flip a payload byte of the last record: written, never synced.
	data[end-2] ^= 0xff
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	logger, logs := logBuffer()
	o := opt
	o.Logger = logger
	l2, recs, err := tryOpen(dir, o)
	if err != nil {
		t.Fatalf("a torn tail in a recycled segment refused: %v", err)
	}
	defer l2.Close()
	if len(recs) < 2 || recs[len(recs)-2] != kept[0] || recs[len(recs)-1] != kept[1] {
		t.Fatalf("replayed %v, want it to end with %v (and not %v)", recs, kept, last)
	}
	if !strings.Contains(logs.String(), "torn tail") {
		t.Fatalf("no torn-tail warning: %s", logs)
	}
	if lsn := appendN(t, l2, "after", 1)[0].lsn; lsn != last[0].lsn {
		t.Fatalf("append after the repair got LSN %d, want %d", lsn, last[0].lsn)
	}
}

// Zeroed bytes in the middle of synced records (a lost block) followed by
// records of later writes are corruption, not the end of the records:
// Open refuses it rather than silently dropping acknowledged records.
func TestZeroedBlockBeforeLaterRecordsIsCorruption(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opt := Options{Sync: fastSync}
	l, _ := open(t, dir, opt)
	recs := appendN(t, l, strings.Repeat("z", 40), 6)
	l.Close()
	seg := segmentFiles(t, dir)[0]
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	frame := headerSize + len(recs[0].payload)
	copy(data[2*frame:3*frame], make([]byte, frame)) // record 3 zeroed
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = tryOpen(dir, opt)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.LSN != 3 {
		t.Fatalf("open of a log with record 3 zeroed and 4-6 after it: %v, want a CorruptError at LSN 3", err)
	}
}
