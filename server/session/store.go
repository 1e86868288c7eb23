package session

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"termlink/server/fdbudget"
)

// ErrClosed is returned (wrapped) by Append and UpdateMetadata after Close.
var ErrClosed = errors.New("session store closed")

// Options configures a [Store]. The zero value is ready to use.
type Options struct {
	MaxOpenFiles int // cached open append handles, default 4096 (least recently used closed first)
	// FDs, when set, is the share of the process's file descriptors
	// the store may hold (fdbudget.Files): every file it opens (append
	// handles, new files, readers) takes one from it. Open keeps a few
	// for good (readers and the writer's minimum); past those the writer
	// takes one more from the budget or, when the budget has none,
	// closes its least recently used append handle, so an append never
	// fails for lack of a descriptor (a batch that needs more files
	// than it can hold open is written in several rounds). The cache
	// holds at most the share's maximum. Nil: nothing is counted.
	FDs    *fdbudget.Pool
	NoSync bool // skip fsync (benchmarks only: Append no longer means durable)
	// SyncLater writes appends (and new files) without fsync: Append
	// returns once the lines are written, and [Store.Sync] makes every
	// append that returned before it durable. For a caller that keeps its
	// own write-ahead log (termserver). Metadata rewrites still fsync.
	SyncLater bool
	// WriteBehind (with SyncLater, where syncfs(2) exists) keeps appended
	// lines in memory: Append and AppendEncoded return once the lines are
	// taken, without a write. They are written to the files, one write
	// per file, by [Store.Sync] (before its syncfs), by [Store.Close], by
	// an append that finds MaxPending bytes pending, and before every
	// read of a file (Load, Tail, TailMessages, Scan, ScanTails,
	// UpdateMetadata), so every reader through the Store sees them; a
	// process reading the files directly sees them after the next Sync.
	// For a caller whose write-ahead log holds every record before it
	// appends it (termserver), which releases the log only after Sync.
	WriteBehind bool
	// MaxPending bounds the bytes WriteBehind keeps in memory, default
	// DefaultMaxPending: an append that would pass it first writes every
	// pending line, and fails (taking nothing) if that write fails and
	// leaves it over.
	MaxPending int
	Logger     *slog.Logger // default slog.Default()

	// FailWrite, when set, is called before the records of session key
	// are written to its file; a non-nil error fails that write as a
	// write error would (a full disk, say): the append, or with
	// WriteBehind the flush (the lines stay pending). For tests of
	// callers; nil in production.
	FailWrite func(key string) error

	// for tests in this package
	syncHook func(*os.File) error // replaces (*os.File).Sync for session files
	maxLine  int                  // replaces MaxLineSize
}

const (
	defaultMaxOpenFiles = 4096
	maxBatch            = 1024 // requests the writer takes at once
	writerKeep          = 2    // descriptors the writer keeps from FDs (a metadata rewrite reads one file and writes another)
	maxReaders          = 8    // readers with a file open at once, with FDs
	maxParallelSyncs    = 16   // fsyncs in flight at once within a batch
	syncFSThreshold     = 8    // files in one batch from which one syncfs replaces the fsyncs
	tempPattern         = ".session-*.tmp"
	// DefaultMaxPending is Options.MaxPending's default: 4 MiB, about
	// 0.7 s of lines at 10,000 messages/s (a message and its reply take
	// ~600 bytes), so at that rate the checkpoint's Sync writes them
	// before the bound does.
	DefaultMaxPending = 4 << 20
)

// Stats are counters since Open, for metrics and tests.
type Stats struct {
	Appends   int64 // Append calls written and fsynced
	Records   int64 // records in those appends
	Batches   int64 // group commits (writer wake-ups)
	FileSyncs int64 // fsyncs of session files
	DirSyncs  int64 // fsyncs of the directory (new files, rewrites)
	FSSyncs   int64 // syncfs calls, each standing in for the fsyncs of a batch of many files
	OpenFiles int64 // append handles open now
	Flushes   int64 // WriteBehind: writes of the pending lines (Sync, reads, the bound)
	Pending   int64 // WriteBehind: bytes pending now
}

// Store is the set of session files in one directory. Its methods are safe
// for concurrent use. One writer goroutine, started by Open and stopped by
// Close, does every write.
type Store struct {
	dir      string
	log      *slog.Logger
	maxOpen  int
	noSync   bool
	later    bool // Options.SyncLater
	syncHook func(*os.File) error
	failHook func(key string) error
	maxLine  int
	dirFile  *os.File
	fds      *fdbudget.Pool
	readers  chan struct{} // with fds: a slot per reader with a file open

	// WriteBehind: lines taken and not yet written, by session key.
	wb         bool
	maxPending int
	pmu        sync.Mutex              // guards pend, pendBytes, pclosed
	pend       map[string]*pendingFile // by session key
	pendBytes  int
	pclosed    bool     // Close began: no more lines taken
	free       [][]byte // buffers of written lines, reused by take
	freeBytes  int      // their capacity in all (at most maxPending)
	// flushMu is held by every flush from taking lines out of pend until
	// they are written or put back, so a reader that flushes (and then
	// reads) never runs beside another goroutine's flush of its file.
	flushMu sync.Mutex

	mu       sync.RWMutex // guards closed, final
	closed   bool
	final    bool           // the queue is about to close: no more requests, flushes included
	senders  sync.WaitGroup // Appends between the closed check and the enqueue
	reqs     chan *request
	done     chan struct{} // closed when the writer has exited
	closeErr error         // set by the writer before done is closed

	// ioMu is held for writing while the writer writes to session files and
	// for reading while a reader opens a file and takes its size, so readers
	// never see a half-written batch.
	ioMu sync.RWMutex

	// owned by the writer goroutine
	files    map[string]*handle
	lru      *list.List // of *handle, most recently used first
	slots    int        // descriptors the writer holds from fds (keep + taken since)
	maxSlots int        // the most it takes
	inUse    int        // of them, open now (append handles, temporary files, a rewrite's read)

	appends, records, batches, fileSyncs, dirSyncs, fsSyncs, openFiles, flushes, pending atomic.Int64
}

// pendingFile is the lines of one file taken by WriteBehind appends and
// not yet written.
type pendingFile struct {
	key      string
	data     []byte
	n, calls int // records, appends
}

type opKind int

const (
	opAppend opKind = iota
	opUpdate
	opFlush // WriteBehind: the appends in batch, written as one run
)

func (o opKind) String() string {
	switch o {
	case opUpdate:
		return "update metadata"
	case opFlush:
		return "flush"
	}
	return "append"
}

// request is one Append or UpdateMetadata waiting for the writer.
type request struct {
	ctx    context.Context
	op     opKind
	key    string // the session key (the writer derives the file name when it opens the file)
	data   []byte // opAppend: encoded lines
	n      int    // opAppend: number of records
	calls  int    // opAppend: Append calls it stands for (0: one)
	update func(map[string]any)
	batch  []*request // opFlush: its appends, answered in err
	err    error      // a flush's append: the result (done is nil)
	done   chan error // buffered: the writer never blocks on it
}

// finish answers r.
func (r *request) finish(err error) {
	if r.done == nil {
		r.err = err
		return
	}
	r.done <- err
}

// handle is an open append handle of one session file.
type handle struct {
	key  string
	path string
	f    *os.File
	size int64
	torn bool // the file does not end in '\n'
	pin  bool // in the round of a batch being written: not closed to make room
	elem *list.Element
}

// Open opens (creating it with mode 0700 if needed) the session directory
// dir and starts the writer goroutine. Temporary files left by a crash are
// removed.
func Open(dir string, opt Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("session: open %s: %w", dir, err)
	}
	dirFile, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("session: open %s: %w", dir, err)
	}
	s := &Store{
		dir:        dir,
		log:        opt.Logger,
		maxOpen:    opt.MaxOpenFiles,
		noSync:     opt.NoSync,
		later:      opt.SyncLater && haveSyncFS, // elsewhere Sync could not cover closed handles: fsync as usual
		wb:         opt.WriteBehind && opt.SyncLater && haveSyncFS,
		maxPending: opt.MaxPending,
		pend:       map[string]*pendingFile{},
		syncHook:   opt.syncHook,
		failHook:   opt.FailWrite,
		maxLine:    opt.maxLine,
		dirFile:    dirFile,
		fds:        opt.FDs,
		reqs:       make(chan *request, maxBatch),
		done:       make(chan struct{}),
		files:      make(map[string]*handle),
		lru:        list.New(),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.maxOpen <= 0 {
		s.maxOpen = defaultMaxOpenFiles
	}
	s.maxSlots = int(^uint(0) >> 1)
	if s.fds != nil {
		// Readers and the writer's minimum come out of the floor, which
		// the budget keeps for the store whatever else is open.
		nr := max(1, min(maxReaders, s.fds.Floor()-writerKeep-2))
		if !s.fds.TryAcquire(writerKeep + nr) { // kept until closeAll
			dirFile.Close()
			return nil, fmt.Errorf("session: open %s: no file descriptors left for the session files (%s)", dir, s.fds.Budget())
		}
		s.readers = make(chan struct{}, nr)
		s.slots = writerKeep
		s.maxSlots = max(writerKeep, s.fds.Max()-nr)
		s.maxOpen = min(s.maxOpen, s.maxSlots)
	}
	if s.maxLine <= 0 {
		s.maxLine = MaxLineSize
	}
	if s.maxPending <= 0 {
		s.maxPending = DefaultMaxPending
	}
	stale, _ := filepath.Glob(filepath.Join(dir, tempPattern))
	for _, p := range stale {
		if err := os.Remove(p); err != nil {
			s.log.Warn("session: cannot remove stale temporary file", "file", p, "err", err)
		} else {
			s.log.Info("session: removed stale temporary file", "file", p)
		}
	}
	go s.run()
	return s, nil
}

// Dir returns the directory of the store.
func (s *Store) Dir() string { return s.dir }

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Appends:   s.appends.Load(),
		Records:   s.records.Load(),
		Batches:   s.batches.Load(),
		FileSyncs: s.fileSyncs.Load(),
		DirSyncs:  s.dirSyncs.Load(),
		FSSyncs:   s.fsSyncs.Load(),
		OpenFiles: s.openFiles.Load(),
		Flushes:   s.flushes.Load(),
		Pending:   s.pending.Load(),
	}
}

// Append adds recs to the end of the session key, creating the file (with
// its metadata line) if needed. An empty Timestamp is set to now. It returns
// once the records are written and fsynced, or with an error: the store is
// closed ([ErrClosed]), ctx is done (the records may or may not have been
// written), or the write failed. Appends from one goroutine land in call
// order; appends to many sessions from many goroutines share fsyncs.
func (s *Store) Append(ctx context.Context, key string, recs ...Record) error {
	if key == "" {
		return fmt.Errorf("session: append %s: %w", key, errEmptyKey)
	}
	if len(recs) == 0 {
		s.mu.RLock()
		closed := s.closed
		s.mu.RUnlock()
		if closed {
			return fmt.Errorf("session: append %s: %w", key, ErrClosed)
		}
		return nil
	}
	data, err := encodeRecords(recs, s.maxLine)
	if err != nil {
		return fmt.Errorf("session: append %s: %w", key, err)
	}
	if s.wb {
		return s.take(key, data, len(recs))
	}
	return s.submit(ctx, &request{ctx: ctx, op: opAppend, key: key, data: data, n: len(recs)})
}

// AppendEncoded is Append for n records already encoded by
// [EncodeRecords] (timestamps set), so a caller that logs the same bytes
// elsewhere encodes them once. Neither it nor Append derives the file
// name: the writer does when it opens the file, and keeps it with the
// open handle while the session's file stays open.
func (s *Store) AppendEncoded(ctx context.Context, key string, data []byte, n int) error {
	if key == "" {
		return fmt.Errorf("session: append %s: %w", key, errEmptyKey)
	}
	if n == 0 {
		return s.Append(ctx, key)
	}
	if s.wb {
		return s.take(key, data, n)
	}
	return s.submit(ctx, &request{ctx: ctx, op: opAppend, key: key, data: data, n: n})
}

// EncodeRecords encodes recs as session file lines ('\n'-terminated),
// setting an empty Timestamp to now (in recs too, so the caller sees
// what was written).
func EncodeRecords(recs []Record) ([]byte, error) {
	return AppendEncodeRecords(nil, recs)
}

// EncodeRecordsAfter is EncodeRecords with prefix before the lines, in
// one allocation (the only one): the write-ahead log's record is the
// session key, a newline and the lines. Unlike EncodeRecords it leaves
// recs as they are: a record without a Timestamp gets now's in the lines
// only (the same for every record of the call), so no string is made
// for it. Decode the lines to see what was written.
func EncodeRecordsAfter(prefix string, recs []Record) ([]byte, error) {
	dst := make([]byte, 0, len(prefix)+encodedSize(recs))
	return appendRecords(append(dst, prefix...), recs, MaxLineSize)
}

// AppendRecordLines is EncodeRecordsAfter appending to dst (a caller's
// reused buffer, holding the prefix): recs are left as they are.
func AppendRecordLines(dst []byte, recs []Record) ([]byte, error) {
	return appendRecords(dst, recs, MaxLineSize)
}

// AppendEncodeRecords is EncodeRecords appending to dst (grown at most
// once, to the usual size of the lines).
func AppendEncodeRecords(dst []byte, recs []Record) ([]byte, error) {
	now := ""
	for i := range recs {
		if recs[i].Timestamp == "" {
			if now == "" {
				now = Now()
			}
			recs[i].Timestamp = now
		}
	}
	return appendRecords(dst, recs, MaxLineSize)
}

func encodeRecords(recs []Record, maxLine int) ([]byte, error) {
	return appendRecords(nil, recs, maxLine)
}

// encodedSize is about the size of recs' lines (usually a little more).
func encodedSize(recs []Record) int {
	size := 0
	for _, r := range recs {
		size += 128 + len(r.Content) + len(r.MessageID) + len(r.RunID)
	}
	return size
}

// appendRecords appends the lines of recs to data. A record without a
// Timestamp gets now's, formatted once for all of them and written
// straight into the line (recs are not changed).
func appendRecords(data []byte, recs []Record, maxLine int) ([]byte, error) {
	data = slices.Grow(data, encodedSize(recs)) // usually no allocation after the first
	var nowBuf [len(TimeLayout)]byte
	var now []byte
	var err error
	for i, r := range recs {
		if r.Timestamp == "" && now == nil {
			now = appendTimestamp(nowBuf[:0], time.Now())
		}
		start := len(data)
		data, err = r.appendJSONAt(data, now)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		if n := len(data) - start; n > maxLine {
			return nil, fmt.Errorf("record %d is %d bytes, over the %d-byte line limit", i, n, maxLine)
		}
		data = append(data, '\n')
	}
	return data, nil
}

// DecodeRecords reads lines written by [EncodeRecords].
func DecodeRecords(data []byte) ([]Record, error) {
	var recs []Record
	for len(data) > 0 {
		line, rest, ok := bytes.Cut(data, []byte{'\n'})
		if !ok {
			return nil, errors.New("session: encoded records: last line has no newline")
		}
		data = rest
		var r Record
		if err := r.UnmarshalJSON(line); err != nil {
			return nil, fmt.Errorf("session: encoded records: %w", err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// Sync makes every append that returned before it durable (with
// [Options.SyncLater]; otherwise they already are): with
// [Options.WriteBehind] it first writes every pending line (one write
// per file; a failed write keeps the lines pending and fails Sync), then
// one syncfs(2) of the file system holding the directory, which also
// covers new files' names.
func (s *Store) Sync() error {
	if s.wb {
		if err := s.flush(""); err != nil {
			return fmt.Errorf("session: sync: %w", err)
		}
	}
	if !s.later || s.noSync {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("session: sync: %w", ErrClosed)
	}
	s.fsSyncs.Add(1)
	if err := syncFS(s.dirFile); err != nil {
		return fmt.Errorf("session: sync: %w", err)
	}
	return nil
}

// UpdateMetadata changes the metadata map of session key: fn gets the map
// read from the file (numbers as json.Number) and changes it in place;
// updated_at is set to now. The file is rewritten atomically (temporary
// file, fsync, rename, directory fsync) with every other line kept as it
// was; this reads the whole file, so it is meant for rare changes. A missing
// file is created with just the metadata line. fn runs on the writer
// goroutine, in order with appends: it must be quick and must not call the
// Store. A panic in fn is returned as an error.
func (s *Store) UpdateMetadata(ctx context.Context, key string, fn func(m map[string]any)) error {
	if _, err := FileName(key); err != nil {
		return fmt.Errorf("session: update metadata %s: %w", key, err)
	}
	if err := s.catchUp(key); err != nil { // the rewrite reads the file
		return fmt.Errorf("session: update metadata %s: %w", key, err)
	}
	return s.submit(ctx, &request{ctx: ctx, op: opUpdate, key: key, update: fn})
}

// submit queues r for the writer and waits for its result.
func (s *Store) submit(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("session: %s %s: %w", r.op, r.key, err)
	}
	r.done = make(chan error, 1)
	s.mu.RLock()
	if s.closed && r.op != opFlush || s.final {
		s.mu.RUnlock()
		return fmt.Errorf("session: %s %s: %w", r.op, r.key, ErrClosed)
	}
	s.senders.Add(1)
	s.mu.RUnlock()
	select {
	case s.reqs <- r:
		s.senders.Done()
	case <-ctx.Done():
		s.senders.Done()
		return fmt.Errorf("session: %s %s: %w", r.op, r.key, ctx.Err())
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("session: %s %s: %w", r.op, r.key, ctx.Err())
	}
}

// Close writes and fsyncs every queued append, stops the writer and closes
// all files. Append and UpdateMetadata after Close return ErrClosed. Close
// may be called more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	var flushErr error
	if s.wb {
		s.pmu.Lock()
		s.pclosed = true // every line taken is in pend
		s.pmu.Unlock()
		if flushErr = s.flush(""); flushErr != nil {
			flushErr = fmt.Errorf("session: close: %w", flushErr)
		}
	}
	s.mu.Lock()
	s.final = true
	s.mu.Unlock()
	s.senders.Wait() // every sender has enqueued or given up
	close(s.reqs)
	<-s.done
	return errors.Join(flushErr, s.closeErr)
}

// run is the writer goroutine.
func (s *Store) run() {
	defer close(s.done)
	batch := make([]*request, 0, maxBatch)
	for r := range s.reqs {
		batch = append(batch[:0], r)
	drain:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		s.process(batch)
		clear(batch)
	}
	s.closeErr = s.closeAll()
}

// process runs one batch in queue order: runs of appends are group-committed,
// a metadata update is done alone between them.
func (s *Store) process(batch []*request) {
	s.batches.Add(1)
	seg := make([]*request, 0, len(batch))
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- fmt.Errorf("session: %s %s: %w", r.op, r.key, err)
			continue
		}
		if r.op == opFlush {
			seg = append(seg, r.batch...)
			s.commit(seg)
			seg = seg[:0]
			r.done <- nil // each append of the batch has its err
			continue
		}
		if r.op == opUpdate {
			s.commit(seg)
			seg = seg[:0]
			r.done <- s.rewrite(r)
			continue
		}
		seg = append(seg, r)
	}
	s.commit(seg)
	for s.lru.Len() > s.maxOpen {
		h := s.lru.Back().Value.(*handle)
		if err := s.drop(h); err != nil {
			s.log.Warn("session: closing session file", "file", h.path, "err", err)
		}
	}
}

// group is the part of a batch that goes to one file.
type group struct {
	key     string
	path    string // set only when the file is opened (no cached handle)
	reqs    []*request
	data    []byte
	h       *handle  // existing file
	tmp     *os.File // new file, renamed to path once fsynced
	syncErr error
	err     error
}

// syncAll fsyncs the file of each group, several at a time: the file
// system can then merge them into fewer journal commits.
func (s *Store) syncAll(gs []*group) {
	file := func(g *group) *os.File {
		if g.h != nil {
			return g.h.f
		}
		return g.tmp
	}
	if s.later {
		return // Sync makes them durable
	}
	if !s.noSync && s.syncHook == nil && haveSyncFS && len(gs) >= syncFSThreshold {
		// Many files: one syncfs(2) of the whole file system is cheaper
		// than one fsync each and just as durable.
		s.fsSyncs.Add(1)
		err := syncFS(s.dirFile)
		for _, g := range gs {
			g.syncErr = err
		}
		return
	}
	workers := min(len(gs), maxParallelSyncs)
	if s.noSync || workers <= 1 {
		for _, g := range gs {
			g.syncErr = s.sync(file(g))
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	wg.Add(workers)
	for range workers {
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(gs)) {
					return
				}
				gs[i].syncErr = s.sync(file(gs[i]))
			}
		}()
	}
	wg.Wait()
}

// commit writes a run of appends: one write per file, one fsync per file,
// one directory fsync if files were created; then answers every request.
func (s *Store) commit(seg []*request) {
	if len(seg) == 0 {
		return
	}
	// The groups in one allocation (at most one per request, so the
	// slice never moves and the pointers into it stay valid).
	all := make([]group, 0, len(seg))
	groups := make([]*group, 0, len(seg))
	byKey := make(map[string]*group, len(seg))
	for _, r := range seg {
		g := byKey[r.key]
		if g == nil {
			all = append(all, group{key: r.key})
			g = &all[len(all)-1]
			byKey[r.key] = g
			groups = append(groups, g)
		}
		g.reqs = append(g.reqs, r)
	}
	for _, g := range groups {
		if len(g.reqs) == 1 {
			g.data = g.reqs[0].data
		} else {
			for _, r := range g.reqs {
				g.data = append(g.data, r.data...)
			}
		}
	}
	// Each round opens the files of as many groups as it can hold open
	// (all of them unless the descriptor budget is short), writes them and
	// closes what it created.
	for len(groups) > 0 {
		n := s.openRound(groups)
		s.writeRound(groups[:n])
		groups = groups[n:]
	}
}

func fail(g *group, err error) { g.err = fmt.Errorf("session: append %s: %w", g.key, err) }

// openRound opens the files of the first groups: an existing file's
// append handle (cached, or opened), a new file's temporary file. It
// stops before a group it finds no descriptor for, which only happens
// once every descriptor the store may take is open for an earlier group
// of the round, and returns how many groups it handled (at least one).
func (s *Store) openRound(groups []*group) int {
	for i, g := range groups {
		if s.failHook != nil {
			if err := s.failHook(g.key); err != nil {
				fail(g, err)
				continue
			}
		}
		if h, ok := s.files[g.key]; ok {
			s.lru.MoveToFront(h.elem)
			h.pin = true
			g.h = h
			continue
		}
		name, err := FileName(g.key) // only here, once per open of the file: the handle keeps its path
		if err != nil {
			fail(g, err)
			continue
		}
		g.path = filepath.Join(s.dir, name)
		if !s.takeSlot() {
			if i > 0 {
				return i
			}
			// Cannot happen: the writer keeps writerKeep descriptors and
			// nothing is pinned yet.
			fail(g, fmt.Errorf("no file descriptor left for session files (%s)", s.fds.Budget()))
			continue
		}
		h, err := s.handleFor(g.key, g.path)
		if err != nil {
			s.giveSlot()
			fail(g, err)
			continue
		}
		if h != nil {
			h.pin = true
			g.h = h
			continue
		}
		// A new file: its temporary file uses the descriptor taken.
		now := Now()
		meta, err := Metadata{Key: g.key, CreatedAt: now, UpdatedAt: now}.appendJSON(nil)
		if err != nil {
			s.giveSlot()
			fail(g, err)
			continue
		}
		meta = append(meta, '\n')
		g.tmp, err = s.writeTemp(append(meta, g.data...))
		if err != nil {
			s.giveSlot()
			fail(g, fmt.Errorf("create %s: %w", g.path, err))
		}
	}
	return len(groups)
}

// writeRound writes the groups openRound opened: one write per file, one
// fsync per file, one directory fsync if files were created; then answers
// every request.
func (s *Store) writeRound(groups []*group) {
	// Append to existing files, one write each.
	s.ioMu.Lock()
	for _, g := range groups {
		if g.err != nil || g.h == nil {
			continue
		}
		h, data := g.h, g.data
		if h.torn {
			data = append([]byte{'\n'}, data...)
		}
		n, err := h.f.Write(data)
		if err != nil {
			if n > 0 {
				_ = h.f.Truncate(h.size) // best effort: leave no partial line
			}
			_ = s.drop(h)
			fail(g, err)
			continue
		}
		h.size += int64(n)
		h.torn = false
	}
	s.ioMu.Unlock()

	// fsync each touched file once (in parallel), then put new files in place.
	var touched []*group
	for _, g := range groups {
		if g.err == nil {
			touched = append(touched, g)
		}
	}
	s.syncAll(touched)
	created := false
	for _, g := range touched {
		if g.h != nil {
			if g.syncErr != nil {
				_ = s.drop(g.h)
				fail(g, g.syncErr)
			}
			continue
		}
		err := g.syncErr
		if err == nil {
			err = os.Rename(g.tmp.Name(), g.path)
		}
		g.tmp.Close()
		s.giveSlot()
		if err != nil {
			os.Remove(g.tmp.Name())
			fail(g, fmt.Errorf("create %s: %w", g.path, err))
			continue
		}
		created = true
	}
	if created && !s.later {
		if err := s.syncDir(); err != nil {
			for _, g := range groups {
				if g.err == nil && g.tmp != nil {
					fail(g, err)
				}
			}
		}
	}

	for _, g := range groups {
		if g.h != nil {
			g.h.pin = false
		}
		if g.err == nil {
			for _, r := range g.reqs {
				s.appends.Add(int64(max(r.calls, 1)))
				s.records.Add(int64(r.n))
			}
		}
		for _, r := range g.reqs {
			r.finish(g.err)
		}
	}
}

// takeSlot finds a descriptor for one more file the writer opens: one it
// holds and does not use, one more from the budget, or that of the least
// recently used append handle not pinned, which it closes. False when
// none of them is left.
func (s *Store) takeSlot() bool {
	if s.inUse < s.slots {
		s.inUse++
		return true
	}
	if s.slots < s.maxSlots && s.fds.TryAcquire(1) {
		s.slots++
		s.inUse++
		return true
	}
	for e := s.lru.Back(); e != nil; e = e.Prev() {
		if h := e.Value.(*handle); !h.pin {
			if err := s.closeHandle(h); err != nil { // its descriptor is ours again
				s.log.Warn("session: closing session file", "file", h.path, "err", err)
			}
			return true
		}
	}
	return false
}

// giveSlot is called once a file the writer opened is closed: its
// descriptor goes back to the budget unless it is one the writer keeps.
func (s *Store) giveSlot() {
	s.inUse--
	if s.slots > writerKeep && s.slots > s.inUse {
		s.fds.Release(1)
		s.slots--
	}
}

// handleFor opens an append handle of a session file that is not cached,
// with a descriptor taken by takeSlot. It returns nil, nil if the file
// must be created: it does not exist or is empty (and so has no metadata
// line).
func (s *Store) handleFor(key, path string) (*handle, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open %s: not a regular file", path)
	}
	if fi.Size() == 0 {
		f.Close()
		return nil, nil
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], fi.Size()-1); err != nil {
		f.Close()
		return nil, err
	}
	h := &handle{key: key, path: path, f: f, size: fi.Size(), torn: last[0] != '\n'}
	h.elem = s.lru.PushFront(h)
	s.files[key] = h
	s.openFiles.Add(1)
	return h, nil
}

// drop closes a cached handle and forgets it.
func (s *Store) drop(h *handle) error {
	err := s.closeHandle(h)
	s.giveSlot()
	return err
}

// closeHandle is drop keeping the descriptor's slot in use, for takeSlot.
func (s *Store) closeHandle(h *handle) error {
	s.lru.Remove(h.elem)
	delete(s.files, h.key)
	s.openFiles.Add(-1)
	return h.f.Close()
}

// writeTemp writes data to a new temporary file in the directory; the caller
// fsyncs, renames and closes it.
func (s *Store) writeTemp(data []byte) (*os.File, error) {
	f, err := os.CreateTemp(s.dir, tempPattern)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

func (s *Store) sync(f *os.File) error {
	if s.noSync {
		return nil
	}
	s.fileSyncs.Add(1)
	if s.syncHook != nil {
		return s.syncHook(f)
	}
	return f.Sync()
}

func (s *Store) syncDir() error {
	if s.noSync {
		return nil
	}
	s.dirSyncs.Add(1)
	return s.dirFile.Sync()
}

// closeAll closes every file; run calls it when the queue is closed.
func (s *Store) closeAll() error {
	var errs []error
	for s.lru.Len() > 0 {
		h := s.lru.Front().Value.(*handle)
		if err := s.drop(h); err != nil {
			errs = append(errs, fmt.Errorf("session: close: %w", err))
		}
	}
	if err := s.dirFile.Close(); err != nil {
		errs = append(errs, fmt.Errorf("session: close: %w", err))
	}
	if s.fds != nil {
		s.fds.Release(s.slots + cap(s.readers))
		s.slots = 0
	}
	return errors.Join(errs...)
}
