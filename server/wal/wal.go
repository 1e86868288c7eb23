package wal

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultSegmentBytes is the default [Options.SegmentBytes].
const DefaultSegmentBytes = 64 << 20

// Options configure a [Log].
type Options struct {
	// SegmentBytes is the size at which a new segment is cut (default
	// DefaultSegmentBytes). A segment holds at least one batch, so it can
	// be larger by one batch.
	SegmentBytes int64
	// NoSync skips every fsync: for benchmarks and tests only.
	NoSync bool
	// TruncateCorrupt makes Open truncate the log at a corrupt frame
	// (dropping every record after it, with a warning) instead of failing
	// with a *CorruptError.
	TruncateCorrupt bool
	// Logger receives repair warnings (default slog.Default()).
	Logger *slog.Logger
	// Sync replaces fdatasync of a segment (nil: fdatasync). Tests set it
	// to inject failures.
	Sync func(f *os.File) error
}

// ErrFailed is wrapped by every error of a log that failed to write or
// sync; it stays failed until reopened.
var ErrFailed = errors.New("wal: log failed")

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("wal: log closed")

// CorruptError is a bad frame that is not a torn tail: acknowledged
// records at or after Offset in Segment cannot be read.
type CorruptError struct {
	Segment string // file path
	Offset  int64
	LSN     LSN // the LSN expected there
	Reason  string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("wal: corrupt record at %s offset %d (LSN %d expected): %s; the records from there on are refused (Options.TruncateCorrupt drops them)", e.Segment, e.Offset, e.LSN, e.Reason)
}

// Stats are counters since Open.
type Stats struct {
	Appends  uint64 // records made durable
	Batches  uint64 // writes, one per batch
	Syncs    uint64 // fdatasyncs of segments (directory syncs not counted)
	Segments int    // segments on disk now
}

// Log is an open write-ahead log. Its methods are safe for concurrent use.
type Log struct {
	dir  string
	opt  Options
	log  *slog.Logger
	lock *os.File // flock on dir/LOCK; nil where there is none

	mu       sync.Mutex
	cur      *batch // filling; never nil while open
	next     LSN    // LSN of the next Append
	err      error  // sticky failure
	closed   bool
	segments []segment // on disk, oldest first; the last is being written
	released LSN
	spares   []string // released segment files kept for reuse (recycle.go)

	kick    chan struct{} // cap 1: a batch is waiting
	stop    chan struct{} // closed by Close
	stopped chan struct{} // closed when the writer returns

	// Owned by the writer goroutine.
	file    *os.File
	size    int64
	durable LSN // last LSN synced; written by the writer under mu

	releaseMu sync.Mutex // serialises Release's file work

	appends, batches, syncs atomic.Uint64
}

type segment struct {
	first LSN
	path  string
}

// batch is the records of one write.
type batch struct {
	first LSN
	n     int
	buf   []byte
	done  chan struct{} // closed once written and synced, or failed
	err   error
}

func segmentName(first LSN) string { return fmt.Sprintf("%016x.wal", uint64(first)) }

const releaseFile = "released"

// Open opens the log in dir (created if missing), repairs a torn tail and
// calls replay, in order, for every record after the release mark; the
// payload is valid only during the call. An error from replay stops Open
// and is returned. On error the log is not open, and what replay saw is
// a prefix of the log.
func Open(dir string, opt Options, replay func(lsn LSN, payload []byte) error) (*Log, error) {
	if opt.SegmentBytes <= 0 {
		opt.SegmentBytes = DefaultSegmentBytes
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Sync == nil {
		opt.Sync = fdatasync
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	l, err := load(dir, opt, replay)
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		return nil, err
	}
	l.lock = lock
	go l.writer()
	return l, nil
}

// load does the work of Open but for the lock and the writer.
func load(dir string, opt Options, replay func(LSN, []byte) error) (*Log, error) {
	l := &Log{dir: dir, opt: opt, log: opt.Logger, kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	l.released = readReleaseMark(filepath.Join(dir, releaseFile), l.log)
	if err := l.loadSpares(); err != nil {
		return nil, err
	}
	if err := l.recover(segs, replay); err != nil {
		return nil, err
	}
	if l.released >= l.next {
		// Only after TruncateCorrupt dropped released records: new
		// records must not hide below the mark.
		l.log.Warn("wal: release mark beyond the last record; lowering it", "mark", l.released, "last", l.next-1)
		l.released = l.next - 1
		if err := writeReleaseMark(filepath.Join(dir, releaseFile), l.released); err != nil {
			return nil, err
		}
	}
	if len(l.segments) == 0 {
		if err := l.createSegment(l.next); err != nil {
			return nil, err
		}
	} else {
		// Writes go on where the records end (recover set l.size): a
		// recycled segment has its earlier content after that.
		last := l.segments[len(l.segments)-1]
		f, err := os.OpenFile(last.path, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("wal: %w", err)
		}
		l.file = f
	}
	l.durable = l.next - 1
	l.cur = &batch{done: make(chan struct{})}
	return l, nil
}

// listSegments returns the segments in dir, oldest first.
func listSegments(dir string) ([]segment, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	var segs []segment
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".wal")
		if !ok || len(name) != 16 {
			continue
		}
		first, err := strconv.ParseUint(name, 16, 64)
		if err != nil || first == 0 {
			return nil, fmt.Errorf("wal: %s: not a segment name (%%016x.wal of its first LSN, at least 1)", filepath.Join(dir, e.Name()))
		}
		segs = append(segs, segment{first: LSN(first), path: filepath.Join(dir, e.Name())})
	}
	slices.SortFunc(segs, func(a, b segment) int { return cmp.Compare(a.first, b.first) })
	return segs, nil
}

// recover reads every segment, replays, and repairs a torn tail. It sets
// l.segments and l.next.
func (l *Log) recover(segs []segment, replay func(LSN, []byte) error) error {
	l.next = 1
	if len(segs) > 0 {
		l.next = segs[0].first
	}
	apply := func(lsn LSN, p []byte) error {
		if lsn <= l.released || replay == nil {
			return nil
		}
		return replay(lsn, p)
	}
	for i, s := range segs {
		last := i == len(segs)-1
		if s.first != l.next {
			return &CorruptError{Segment: s.path, Offset: 0, LSN: l.next, Reason: fmt.Sprintf("segment starts at LSN %d: records %d to %d are missing", s.first, l.next, s.first-1)}
		}
		data, err := os.ReadFile(s.path)
		if err != nil {
			return fmt.Errorf("wal: %w", err)
		}
		r, err := scanSegment(data, s.first, apply)
		if err != nil {
			return err
		}
		l.next = r.next
		l.segments = append(l.segments, s)
		l.size = int64(r.good) // where the next write goes, if this segment is the last
		if r.good == len(data) || r.end {
			continue
		}
		if !(last && r.torn) && !l.opt.TruncateCorrupt {
			return &CorruptError{Segment: s.path, Offset: int64(r.good), LSN: r.next, Reason: r.bad}
		}
		if last && r.torn {
			l.log.Warn("wal: torn tail truncated (records never acknowledged)", "segment", s.path, "offset", r.good, "dropped_bytes", len(data)-r.good, "reason", r.bad)
		} else {
			l.log.Warn("wal: corrupt record: truncating the log there as Options.TruncateCorrupt asks; acknowledged records after it are lost", "segment", s.path, "offset", r.good, "lsn", r.next, "reason", r.bad, "later_segments_removed", len(segs)-i-1)
			for _, later := range segs[i+1:] {
				if err := os.Remove(later.path); err != nil {
					return fmt.Errorf("wal: %w", err)
				}
			}
		}
		if err := truncateSynced(s.path, int64(r.good), l.opt.NoSync); err != nil {
			return err
		}
		break
	}
	return nil
}

// truncateSynced truncates path to size and syncs it.
func truncateSynced(path string, size int64, noSync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	if !noSync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("wal: %w", err)
		}
	}
	return nil
}

// createSegment creates the segment whose first record is first (from a
// spare when there is one: recycle.go), makes it the one being written
// and syncs the directory.
func (l *Log) createSegment(first LSN) error {
	path := filepath.Join(l.dir, segmentName(first))
	f, err := l.reuseSpare(path)
	if err != nil {
		return err
	}
	if f == nil {
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
			return fmt.Errorf("wal: %w", err)
		}
	}
	if !l.opt.NoSync {
		if err := syncDir(l.dir); err != nil {
			f.Close()
			return err
		}
	}
	if l.file != nil {
		l.file.Close()
	}
	l.file, l.size = f, 0
	l.mu.Lock()
	l.segments = append(l.segments, segment{first: first, path: path})
	l.mu.Unlock()
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("wal: sync %s: %w", dir, err)
	}
	return nil
}

// Append adds payload to the log and returns its LSN once it is durable.
// Many concurrent Appends share one write and one sync. If ctx ends
// first, Append returns ctx.Err() and the record may or may not be in the
// log.
func (l *Log) Append(ctx context.Context, payload []byte) (LSN, error) {
	if len(payload) > MaxPayload {
		return 0, fmt.Errorf("wal: record of %d bytes over the limit %d", len(payload), MaxPayload)
	}
	pcrc := crc32.Checksum(payload, castagnoli)
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return 0, err
	}
	if l.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	b := l.cur
	lsn := l.next
	l.next++
	if b.n == 0 {
		b.first = lsn
	}
	b.buf = appendFrame(b.buf, lsn, uint32(lsn-b.first), pcrc, payload)
	b.n++
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	select {
	case <-b.done:
		if b.err != nil {
			return 0, b.err
		}
		return lsn, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// writer owns the segment file: it takes the filling batch, writes it
// with one call, syncs it, and answers its Appends; meanwhile the next
// batch fills.
func (l *Log) writer() {
	defer close(l.stopped)
	var spare []byte
	for {
		select {
		case <-l.kick:
		case <-l.stop:
		}
		l.mu.Lock()
		b := l.cur
		if b.n == 0 {
			closed := l.closed
			l.mu.Unlock()
			if closed {
				return
			}
			continue
		}
		l.cur = &batch{buf: spare[:0], done: make(chan struct{})}
		err := l.err
		l.mu.Unlock()
		if err == nil {
			err = l.write(b)
			if err != nil {
				err = fmt.Errorf("%w: %w; it refuses every append until reopened (a failed write or fsync is not retried: after a failed fsync Linux may have dropped the pages and cleared the error)", ErrFailed, err)
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
			}
		}
		if err == nil {
			l.appends.Add(uint64(b.n)) // before the answer: Stats after Append counts it
		}
		b.err = err
		close(b.done)
		spare = b.buf
		b.buf = nil
		// Another batch may have filled meanwhile; its kick is pending.
	}
}

// write writes and syncs one batch, cutting a new segment first when the
// batch would take the current one over SegmentBytes.
func (l *Log) write(b *batch) error {
	if l.size > 0 && l.size+int64(len(b.buf))+headerSize > l.opt.SegmentBytes {
		if err := l.createSegment(b.first); err != nil {
			return err
		}
	}
	// The end marker goes after the batch, in the same write: where the
	// records end in a recycled segment (the next batch overwrites it).
	batchLen := len(b.buf)
	b.buf = append(b.buf, endMarker[:]...)
	n, err := l.file.WriteAt(b.buf, l.size)
	b.buf = b.buf[:batchLen]
	l.size += int64(min(n, batchLen))
	l.batches.Add(1)
	if err != nil {
		return fmt.Errorf("write %s: %w", l.file.Name(), err)
	}
	if !l.opt.NoSync {
		l.syncs.Add(1)
		if err := l.opt.Sync(l.file); err != nil {
			return fmt.Errorf("fdatasync %s: %w", l.file.Name(), err)
		}
	}
	l.mu.Lock()
	l.durable = b.first + LSN(b.n) - 1
	l.mu.Unlock()
	return nil
}

// Release says every record up to lsn is applied elsewhere (the session
// files hold it, synced): segments whose records are all at or below lsn
// are deleted, and the mark is written so the next Open replays only the
// records after it. The segment being written is never deleted. Releasing
// beyond the last durable record is an error.
func (l *Log) Release(lsn LSN) error {
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	l.mu.Lock()
	if lsn > l.durable {
		d := l.durable
		l.mu.Unlock()
		return fmt.Errorf("wal: release of LSN %d beyond the last durable record %d", lsn, d)
	}
	if lsn <= l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = lsn
	var drop []segment
	// Segment i holds LSNs [first_i, first_{i+1}).
	for len(l.segments) > 1 && l.segments[1].first-1 <= lsn {
		drop = append(drop, l.segments[0])
		l.segments = l.segments[1:]
	}
	l.mu.Unlock()
	if err := writeReleaseMark(filepath.Join(l.dir, releaseFile), lsn); err != nil {
		return err
	}
	for _, s := range drop {
		if l.keepSpare(s.path) {
			continue
		}
		if err := os.Remove(s.path); err != nil {
			return fmt.Errorf("wal: release: %w", err)
		}
	}
	return nil
}

// The release mark is 8 bytes of LSN and a CRC-32C of them. It is
// advisory: a missing or damaged mark means replaying more.
func writeReleaseMark(path string, lsn LSN) error {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[0:8], uint64(lsn))
	binary.LittleEndian.PutUint32(b[8:12], crc32.Checksum(b[0:8], castagnoli))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b[:], 0o644); err != nil {
		return fmt.Errorf("wal: release mark: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("wal: release mark: %w", err)
	}
	return nil
}

func readReleaseMark(path string, log *slog.Logger) LSN {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil || len(b) != 12 || crc32.Checksum(b[0:8], castagnoli) != binary.LittleEndian.Uint32(b[8:12]) {
		log.Warn("wal: release mark unreadable; replaying every record on disk", "path", path, "err", err, "bytes", len(b))
		return 0
	}
	return LSN(binary.LittleEndian.Uint64(b[0:8]))
}

// Stats returns the counters since Open.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	n := len(l.segments)
	l.mu.Unlock()
	return Stats{Appends: l.appends.Load(), Batches: l.batches.Load(), Syncs: l.syncs.Load(), Segments: n}
}

// Close writes what is queued, stops the writer and closes the segment.
// Appends after Close fail with ErrClosed. It returns the log's failure,
// if any.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.stopped
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if cerr := l.file.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("wal: %w", cerr)
	}
	if l.lock != nil {
		l.lock.Close()
	}
	return err
}

// Next returns the LSN the next Append will get: every Append that starts
// after Next returns gets an LSN at least this.
func (l *Log) Next() LSN {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Durable returns the last LSN written and synced (the highest Release
// accepts).
func (l *Log) Durable() LSN {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.durable
}
