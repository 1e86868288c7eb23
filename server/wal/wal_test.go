package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
)

func TestAppendReopenReplay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, recs := open(t, dir, Options{})
	if len(recs) != 0 {
		t.Fatalf("new log replayed %v", recs)
	}
	want := appendN(t, l, "a", 5)
	if want[0].lsn != 1 || want[4].lsn != 5 {
		t.Fatalf("LSNs %v, want 1..5", want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	l, recs = open(t, dir, Options{})
	equalRecs(t, recs, want)
	more := appendN(t, l, "b", 2)
	if more[0].lsn != 6 {
		t.Fatalf("after reopen the next LSN is %d, want 6", more[0].lsn)
	}
}

// TestTornTailEveryOffset cuts the last record at every byte: the
// complete records replay, the torn one is dropped with a warning naming
// the offset, and appends go on after it.
func TestTornTailEveryOffset(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := open(t, dir, Options{NoSync: true})
	want := appendN(t, l, "rec", 3)
	l.Close()
	seg := segmentFiles(t, dir)[0]
	full, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	recEnd := len(full) - headerSize // the end marker follows the records
	lastStart := recEnd - (headerSize + len(want[2].payload))
	for cut := lastStart; cut < recEnd; cut++ {
		d := copyDir(t, dir)
		if err := os.Truncate(filepath.Join(d, filepath.Base(seg)), int64(cut)); err != nil {
			t.Fatal(err)
		}
		logger, logs := logBuffer()
		l, recs, err := tryOpen(d, Options{NoSync: true, Logger: logger})
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		equalRecs(t, recs, want[:2])
		if cut > lastStart && !strings.Contains(logs.String(), fmt.Sprintf("offset=%d", lastStart)) {
			t.Fatalf("cut at %d: no warning naming offset %d: %s", cut, lastStart, logs)
		}
		lsn, err := l.Append(context.Background(), []byte("after"))
		if err != nil || lsn != 3 {
			t.Fatalf("cut at %d: append after repair: LSN %d, %v", cut, lsn, err)
		}
		l.Close()
		l, recs, err = tryOpen(d, Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		equalRecs(t, recs, append(want[:2:2], rec{3, "after"}))
		l.Close()
	}
	// A cut inside the end marker loses no record.
	for cut := recEnd + 1; cut < len(full); cut++ {
		d := copyDir(t, dir)
		if err := os.Truncate(filepath.Join(d, filepath.Base(seg)), int64(cut)); err != nil {
			t.Fatal(err)
		}
		l, recs, err := tryOpen(d, Options{NoSync: true, Logger: quiet})
		if err != nil {
			t.Fatalf("cut at %d in the end marker: %v", cut, err)
		}
		equalRecs(t, recs, want)
		if lsn, err := l.Append(context.Background(), []byte("after")); err != nil || lsn != 4 {
			t.Fatalf("cut at %d in the end marker: append: LSN %d, %v", cut, lsn, err)
		}
		l.Close()
	}
}

// TestCorruptMiddle flips a bit in a record followed by records of later
// writes: Open refuses, naming segment and offset, after replaying the
// records before it; with TruncateCorrupt it drops them and goes on.
func TestCorruptMiddle(t *testing.T) {
	t.Parallel()
	for _, where := range []struct {
		name string
		at   int // byte within the frame
	}{{"payload", headerSize + 2}, {"header", 6}} {
		t.Run(where.name, func(t *testing.T) {
			dir := t.TempDir()
			l, _ := open(t, dir, Options{NoSync: true})
			want := appendN(t, l, "r", 10)
			l.Close()
			seg := segmentFiles(t, dir)[0]
			data, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			frameSize := headerSize + len("r-0")
			badOff := 4 * frameSize // record LSN 5
			data[badOff+where.at] ^= 0x04
			if err := os.WriteFile(seg, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, recs, err := tryOpen(dir, Options{NoSync: true})
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("open: %v, want a *CorruptError", err)
			}
			if ce.Segment != seg || ce.Offset != int64(badOff) || ce.LSN != 5 {
				t.Fatalf("error names %s offset %d LSN %d, want %s offset %d LSN 5", ce.Segment, ce.Offset, ce.LSN, seg, badOff)
			}
			if !strings.Contains(err.Error(), seg) || !strings.Contains(err.Error(), fmt.Sprint("offset ", badOff)) {
				t.Fatalf("error text %q names no segment and offset", err)
			}
			equalRecs(t, recs, want[:4])

			// The refusal left the file alone; the operator may truncate.
			l, recs = open(t, dir, Options{NoSync: true, TruncateCorrupt: true})
			equalRecs(t, recs, want[:4])
			if lsn, err := l.Append(context.Background(), []byte("x")); err != nil || lsn != 5 {
				t.Fatalf("append after truncation: LSN %d, %v", lsn, err)
			}
		})
	}
}

// TestConcurrentAppend: many goroutines append; each record is replayed
// exactly once after reopen, under the LSN its Append returned.
func TestConcurrentAppend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := open(t, dir, Options{SegmentBytes: 8 << 10})
	const goroutines, each = 32, 100
	var mu sync.Mutex
	acked := map[LSN]string{}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				p := fmt.Sprintf("g%d-%d", g, i)
				lsn, err := l.Append(context.Background(), []byte(p))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if old, dup := acked[lsn]; dup {
					t.Errorf("LSN %d given to %q and %q", lsn, old, p)
				}
				acked[lsn] = p
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	st := l.Stats()
	t.Logf("%d appends in %d batches, %d syncs, %d segments", st.Appends, st.Batches, st.Syncs, st.Segments)
	if st.Appends != goroutines*each || st.Syncs != st.Batches {
		t.Fatalf("stats %+v", st)
	}
	l.Close()
	_, recs := open(t, dir, Options{})
	if len(recs) != goroutines*each {
		t.Fatalf("replayed %d records, want %d", len(recs), goroutines*each)
	}
	for i, r := range recs {
		if r.lsn != LSN(i+1) || acked[r.lsn] != r.payload {
			t.Fatalf("record %d: %v, acked as %q", i, r, acked[r.lsn])
		}
	}
}

func TestRotationAndRelease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opt := Options{SegmentBytes: 1 << 10}
	l, _ := open(t, dir, opt)
	payload := strings.Repeat("p", 100)
	for range 100 {
		if _, err := l.Append(context.Background(), []byte(payload)); err != nil {
			t.Fatal(err)
		}
	}
	segs := segmentFiles(t, dir)
	perSeg := ((1 << 10) - headerSize) / (headerSize + 100) // whole records per segment, and the end marker
	if len(segs) != (100+perSeg-1)/perSeg {
		t.Fatalf("%d segments, want %d of %d records", len(segs), (100+perSeg-1)/perSeg, perSeg)
	}
	for _, s := range segs {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 1<<10 || (fi.Size()-headerSize)%(headerSize+100) != 0 {
			t.Fatalf("%s is %d bytes: a record split or the size exceeded", s, fi.Size())
		}
	}
	if err := l.Release(101); err == nil {
		t.Fatal("released beyond the log end")
	}
	if err := l.Release(50); err != nil {
		t.Fatal(err)
	}
	// Segment k holds LSNs k*perSeg+1 .. (k+1)*perSeg; those ending at or below 50 go.
	gone := 50 / perSeg
	left := segmentFiles(t, dir)
	if len(left) != len(segs)-gone || left[0] != segs[gone] {
		t.Fatalf("after release of 50: %v, want %v", left, segs[gone:])
	}
	if st := l.Stats(); st.Segments != len(left) {
		t.Fatalf("stats count %d segments, %d on disk", st.Segments, len(left))
	}
	l.Close()

	_, recs := open(t, dir, opt)
	if len(recs) != 50 || recs[0].lsn != 51 || recs[49].lsn != 100 {
		t.Fatalf("replayed %d records from %v, want 51..100", len(recs), recs[0].lsn)
	}

	// The mark is advisory: without it, replay starts at the oldest segment.
	d := copyDir(t, dir)
	os.Remove(filepath.Join(d, releaseFile))
	_, recs = open(t, d, opt)
	if first := LSN(gone*perSeg + 1); len(recs) != 100-int(first)+1 || recs[0].lsn != first {
		t.Fatalf("without a mark replayed %d records from %d, want from %d", len(recs), recs[0].lsn, first)
	}

	// Releasing everything keeps the segment being written.
	l, _ = open(t, copyDir(t, dir), opt)
	if err := l.Release(100); err != nil {
		t.Fatal(err)
	}
	if n := len(segmentFiles(t, l.dir)); n != 1 {
		t.Fatalf("%d segments after releasing everything, want 1", n)
	}
	if lsn, err := l.Append(context.Background(), []byte("x")); err != nil || lsn != 101 {
		t.Fatalf("append after full release: %d %v", lsn, err)
	}
}

func TestMissingSegmentIsCorrupt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := open(t, dir, Options{SegmentBytes: 200})
	appendN(t, l, strings.Repeat("m", 100), 5)
	l.Close()
	segs := segmentFiles(t, dir)
	os.Remove(segs[2])
	_, _, err := tryOpen(dir, Options{})
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Segment != segs[3] || !strings.Contains(ce.Reason, "missing") {
		t.Fatalf("open with a missing segment: %v", err)
	}
}

// TestSyncFailure: a failed fsync fails its batch and every append after
// it, until reopened; nothing is retried.
func TestSyncFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	fail := false
	syncs := 0
	opt := Options{Sync: func(f *os.File) error {
		mu.Lock()
		defer mu.Unlock()
		syncs++
		if fail {
			return errors.New("injected EIO")
		}
		return fdatasync(f)
	}}
	l, _ := open(t, dir, opt)
	want := appendN(t, l, "ok", 3)
	mu.Lock()
	fail = true
	mu.Unlock()
	_, err := l.Append(context.Background(), []byte("lost"))
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "injected EIO") || !strings.Contains(err.Error(), "reopened") {
		t.Fatalf("append with a failing sync: %v", err)
	}
	mu.Lock()
	fail = false
	before := syncs
	mu.Unlock()
	if _, err := l.Append(context.Background(), []byte("after")); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed sync: %v, want ErrFailed", err)
	}
	mu.Lock()
	if syncs != before {
		t.Fatalf("the failed log synced again (%d syncs after the failure)", syncs-before)
	}
	mu.Unlock()
	if err := l.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("close: %v, want the failure", err)
	}
	// Reopened, it reads what is on disk (here the write did land).
	l, recs := open(t, dir, Options{})
	equalRecs(t, recs[:3], want)
	if _, err := l.Append(context.Background(), []byte("again")); err != nil {
		t.Fatal(err)
	}
}

func TestAppendContextCancel(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	l, _ := open(t, t.TempDir(), Options{Sync: func(*os.File) error { <-block; return nil }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Append(ctx, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("append with a cancelled context: %v", err)
	}
	close(block)
}

func TestReplayError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := open(t, dir, Options{NoSync: true})
	appendN(t, l, "x", 3)
	l.Close()
	boom := errors.New("boom")
	n := 0
	_, err := Open(dir, Options{Logger: quiet}, func(LSN, []byte) error {
		n++
		if n == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || n != 2 {
		t.Fatalf("replay error: %v after %d records", err, n)
	}
}

// TestPipelinedGroupCommit holds each sync until the test releases it:
// an Append returns only after its batch's sync; while one batch syncs,
// the next fills and is not written; then it goes out as one write and
// one sync.
func TestPipelinedGroupCommit(t *testing.T) {
	t.Parallel()
	entered := make(chan string)
	release := make(chan struct{})
	ended := make(chan struct{}) // the test is over: syncs pass
	dir := t.TempDir()
	l, _ := open(t, dir, Options{Sync: func(f *os.File) error {
		select {
		case entered <- f.Name():
		case <-ended:
			return nil
		}
		select {
		case <-release:
		case <-ended:
		}
		return nil
	}})
	t.Cleanup(func() { close(ended) }) // runs before open's Close
	type result struct {
		lsn LSN
		err error
	}
	appendAsync := func(p string) chan result {
		ch := make(chan result, 1)
		go func() {
			lsn, err := l.Append(context.Background(), []byte(p))
			ch <- result{lsn, err}
		}()
		return ch
	}
	returned := func(ch chan result) bool {
		select {
		case r := <-ch:
			ch <- r
			return true
		default:
			return false
		}
	}
	fileSize := func() int64 {
		fi, err := os.Stat(segmentFiles(t, dir)[0])
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	waitEntered := func() {
		select {
		case <-entered:
		case <-time.After(testwait.Deadline):
			t.Fatal("no sync started")
		}
	}

	first := appendAsync("first")
	waitEntered() // batch 1 is written and syncing
	var second []chan result
	for i := range 10 {
		second = append(second, appendAsync(fmt.Sprint("second-", i)))
	}
	testwait.UntilOK(t, "10 appends queued behind the sync", func() error {
		l.mu.Lock()
		n := l.cur.n
		l.mu.Unlock()
		if n != 10 {
			return fmt.Errorf("%d queued", n)
		}
		return nil
	})
	if returned(first) {
		t.Fatal("Append returned before its sync finished")
	}
	frame := int64(headerSize + len("second-0"))
	// The first batch and the end marker after it.
	if got, want := fileSize(), int64(headerSize+len("first")+headerSize); got != want {
		t.Fatalf("during the first sync the segment is %d bytes, want %d (only the first batch)", got, want)
	}
	release <- struct{}{}
	if r := <-first; r.err != nil || r.lsn != 1 {
		t.Fatalf("first append: %v %v", r.lsn, r.err)
	}
	waitEntered() // batch 2: one write of all ten
	// (and the end marker after it)
	if got, want := fileSize(), int64(headerSize+len("first"))+10*frame+headerSize; got != want {
		t.Fatalf("during the second sync the segment is %d bytes, want %d", got, want)
	}
	for _, ch := range second {
		if returned(ch) {
			t.Fatal("Append returned before its sync finished")
		}
	}
	release <- struct{}{}
	for _, ch := range second {
		if r := <-ch; r.err != nil || r.lsn < 2 || r.lsn > 11 {
			t.Fatalf("second batch append: %v %v", r.lsn, r.err)
		}
	}
	if st := l.Stats(); st.Batches != 2 || st.Syncs != 2 || st.Appends != 11 {
		t.Fatalf("stats %+v, want 11 appends in 2 batches and 2 syncs", st)
	}
}

// TestTruncateCorruptLowersReleaseMark: when TruncateCorrupt drops
// released records, the mark comes down so new records replay.
func TestTruncateCorruptLowersReleaseMark(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := open(t, dir, Options{NoSync: true})
	appendN(t, l, "r", 10)
	if err := l.Release(8); err != nil {
		t.Fatal(err)
	}
	l.Close()
	seg := segmentFiles(t, dir)[0]
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[4*(headerSize+len("r-0"))+headerSize] ^= 1 // LSN 5's payload
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	l, recs := open(t, dir, Options{NoSync: true, TruncateCorrupt: true})
	if len(recs) != 0 {
		t.Fatalf("replayed released records %v", recs)
	}
	if lsn, err := l.Append(context.Background(), []byte("new")); err != nil || lsn != 5 {
		t.Fatalf("append: %d %v", lsn, err)
	}
	l.Close()
	_, recs = open(t, dir, Options{NoSync: true})
	equalRecs(t, recs, []rec{{5, "new"}})
}

func TestOpenTwiceRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := open(t, dir, Options{})
	// The refusal names the holder (issue 23 row 11): this process's pid.
	if _, _, err := tryOpen(dir, Options{}); err == nil || !strings.Contains(err.Error(), "open elsewhere") ||
		!strings.Contains(err.Error(), fmt.Sprintf("process %d holds", os.Getpid())) {
		t.Fatalf("second open: %v", err)
	}
	l.Close()
	l2, _, err := tryOpen(dir, Options{})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	l2.Close()
}

// A lock this process still holds for a moment (a log closed here while
// a forked child, before its exec, had a copy of the lock file's
// descriptor) is waited for, not refused: TestNoticeSurvivesRestart's
// restart in place failed so under load.
func TestOpenWaitsForItsOwnLockBriefly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := open(t, dir, Options{})
	closed := make(chan struct{})
	time.AfterFunc(100*time.Millisecond, func() { l.Close(); close(closed) })
	l2, _, err := tryOpen(dir, Options{})
	if err != nil {
		t.Fatalf("open while this process's lock goes: %v", err)
	}
	<-closed
	l2.Close()
}
