package notices

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"termlink/internal/durable"
	"termlink/server/wal"
)

// LocalStorage is the Storage of a single termserver, in the workspace
// (the package doc's Durability): every write is a record of the
// write-ahead log, durable before Put returns, and the whole store is
// written to a snapshot once enough was logged.
type LocalStorage struct {
	dir       string
	snap      string
	log       *slog.Logger
	wl        *wal.Log
	noSync    bool
	snapBytes int

	logMu sync.RWMutex // a write (map, then log) holds it for reading; a snapshot for writing

	mu        sync.Mutex
	recs      localRecs
	rev       uint64
	sinceSnap int // payload bytes logged since the last snapshot
	failed    error

	// fresh is records.snap's records as read, in revision order, for
	// the first Follow while the store is as read (freshRev: its
	// revision then): the map's records need neither be copied nor
	// sorted (BenchmarkNoticesOpen).
	fresh    []loadItem
	freshRev uint64

	// built is closed once recs holds records.snap's records: a
	// snapshot in revision order is indexed in the background
	// (buildIndex) while the first Follow feeds it from fresh;
	// everything else that reads or writes recs waits for it
	// (waitBuilt). A key twice in fresh (not a snapshot this store
	// writes) is fed twice, older first, as a feed may.
	built chan struct{}
}

// waitBuilt waits until recs holds the snapshot.
func (ls *LocalStorage) waitBuilt() {
	if ls.built != nil {
		<-ls.built
	}
}

// localRecord is one record of the store, and one write of the log
// (Del: the key removed at Rev).
type localRecord struct {
	Key   string          `json:"k"`
	Value json.RawMessage `json:"v,omitempty"`
	Rev   uint64          `json:"r"`
	Del   bool            `json:"del,omitempty"`
}

// localEntry is a record of the store (its key is the map's, or the base
// record's: localRecs): a value, not a pointer, so a load of 500,000
// records makes no object per record.
type localEntry struct {
	Value json.RawMessage
	Rev   uint64
}

// localSnapshotHeader is records.snap's first line (JSON): the last LSN
// the snapshot holds and the store's revision. Each line after it is a
// record: its revision, a tab, its key, a tab, its value (compact JSON,
// which has no raw tab or newline), or "=" for the value of the line
// before (a broadcast's deliveries are alike). Read and written without
// a JSON decoder for the records: a store of 500,000 deliveries loads in
// a fraction of the time (BenchmarkNoticesOpen).
type localSnapshotHeader struct {
	Format  int    `json:"format"`
	LSN     uint64 `json:"lsn"`
	Rev     uint64 `json:"rev"`
	Records int    `json:"records"`
}

const (
	localSnapshotFile = "records.snap"
	// legacySnapshotFile is the snapshot of the store before the rules
	// moved above Storage (notices and their peers by state); it is read
	// once, and removed by the first snapshot written after.
	legacySnapshotFile = "snapshot.json"
	// localSegmentBytes is the log's segment size: released segments are
	// deleted, so the log holds at most about this much beyond what the
	// snapshot holds.
	localSegmentBytes = 16 << 20
)

var _ Storage = (*LocalStorage)(nil)

// Open opens (or creates) the mailboxes kept in dir: the Service over a
// LocalStorage. Start runs their sweeper.
func Open(dir string, opt Options) (*Service, error) {
	st, err := OpenLocal(dir, opt)
	if err != nil {
		return nil, err
	}
	return New(context.Background(), st, opt)
}

// OpenLocal opens (or creates) the store in dir; of opt it takes NoSync,
// SnapshotBytes and Logger.
func OpenLocal(dir string, opt Options) (*LocalStorage, error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.SnapshotBytes <= 0 {
		opt.SnapshotBytes = 8 << 20
	}
	ls := &LocalStorage{dir: dir, snap: filepath.Join(dir, localSnapshotFile), log: opt.Logger, noSync: opt.NoSync,
		snapBytes: opt.SnapshotBytes, recs: newLocalRecs(0)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("opening the notice mailboxes: %w", err)
	}
	t0 := time.Now()
	snapLSN, legacy, err := ls.loadSnapshot()
	if err != nil {
		return nil, err
	}
	replayed := 0
	wl, err := wal.Open(filepath.Join(dir, "wal"), wal.Options{NoSync: opt.NoSync, Logger: opt.Logger, SegmentBytes: localSegmentBytes}, func(lsn wal.LSN, p []byte) error {
		if uint64(lsn) <= snapLSN {
			return nil // the snapshot holds it
		}
		if replayed == 0 {
			ls.waitBuilt()
			ls.fresh = nil // the store is no longer as read
		}
		replayed++
		var r localRecord
		if err := json.Unmarshal(p, &r); err != nil || r.Key == "" {
			if ls.applyLegacy(p) {
				legacy = true
				return nil
			}
			ls.log.Warn("notice log: skipping a record", "lsn", lsn, "err", err)
			return nil
		}
		ls.applyRecord(r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("opening the notice log: %w", err)
	}
	ls.wl = wl
	if replayed > 0 || legacy {
		ls.sinceSnap = ls.snapBytes // the sweeper's first round writes a snapshot
	}
	records := len(ls.fresh) // the index may be building
	if ls.fresh == nil {
		records = ls.recs.len()
	}
	ls.log.Info("notice mailboxes opened", "records", records, "replayed", replayed, "took", time.Since(t0).Round(time.Millisecond))
	return ls, nil
}

// applyRecord takes a logged record into the map (a replay may bring it
// twice: an older revision changes nothing).
func (ls *LocalStorage) applyRecord(r localRecord) {
	ls.rev = max(ls.rev, r.Rev)
	if cur, ok := ls.recs.get(r.Key); ok && cur.Rev >= r.Rev {
		return
	}
	if r.Del {
		ls.recs.del(r.Key)
		return
	}
	ls.recs.set(r.Key, localEntry{Value: r.Value, Rev: r.Rev})
}

// Info implements Storage: one writer, and records go only when deleted.
func (ls *LocalStorage) Info() StorageInfo { return StorageInfo{} }

// Follow implements Storage: the whole store, the notices first (oldest
// first), then the deliveries by notice, then any other record, each
// group in revision order; nothing else writes it.
func (ls *LocalStorage) Follow(ctx context.Context, f Feed) error {
	ls.mu.Lock()
	recs := ls.fresh
	ls.fresh = nil
	fresh := recs != nil && ls.freshRev == ls.rev
	ls.mu.Unlock()
	if fresh {
		ls.feed(f, recs)
		f.Loaded()
		return nil
	}
	ls.waitBuilt()
	ls.mu.Lock()
	recs = make([]loadItem, 0, ls.recs.len())
	ls.recs.each(func(k string, e localEntry) { recs = append(recs, loadItem{k, e.Value, e.Rev}) })
	ls.mu.Unlock()
	ls.feed(f, sortByRev(recs))
	f.Loaded()
	return nil
}

// feed begins a load of recs (in revision order) in loadOrder.
func (ls *LocalStorage) feed(f Feed, recs []loadItem) {
	f.Begin()
	for _, i := range loadOrder(recs) {
		r := &recs[i]
		f.Put(r.key, r.value, r.rev)
	}
}

type loadItem struct {
	key   string
	value []byte
	rev   uint64
}

// loadOrder is the order Follow feeds recs (in revision order) in. The
// notices (a few hundred) number the buckets, and each delivery goes to
// its notice's bucket, found by the id inside its key (no key built, no
// look-up in the whole store). Bucket 0 is the notices, the last one
// every other record. A load in this order finds its records, and the
// mailboxes they go to, in the order they were written, and reads recs
// forward (BenchmarkNoticesOpen).
func loadOrder(recs []loadItem) []int32 {
	bucketOf := map[string]int32{}
	for i := range recs {
		if id, ok := strings.CutPrefix(recs[i].key, "n."); ok {
			bucketOf[id] = int32(len(bucketOf) + 1)
		}
	}
	other := int32(len(bucketOf) + 1)
	bucket := make([]int32, len(recs))
	start := make([]int32, other+2)
	for i := range recs {
		k := recs[i].key
		b := other
		switch {
		case strings.HasPrefix(k, "n."):
			b = 0
		case strings.HasPrefix(k, "d."):
			if j := strings.LastIndexByte(k, '.'); j > 1 {
				if n, ok := bucketOf[k[j+1:]]; ok {
					b = n
				}
			}
		}
		bucket[i] = b
		start[b+1]++
	}
	for b := 1; b < len(start); b++ {
		start[b] += start[b-1]
	}
	order := make([]int32, len(recs))
	for i, b := range bucket {
		order[start[b]] = int32(i)
		start[b]++
	}
	return order
}

// sortByRev sorts recs by revision, with a radix sort (no comparison):
// it returns them in recs or in a slice of the same length.
func sortByRev(recs []loadItem) []loadItem {
	const bits = 11
	top := uint64(0)
	for i := range recs {
		top = max(top, recs[i].rev)
	}
	var tmp []loadItem
	var count [1 << bits]int
	for shift := uint(0); shift < 64 && top>>shift > 0; shift += bits {
		if tmp == nil {
			tmp = make([]loadItem, len(recs))
		}
		clear(count[:])
		for i := range recs {
			count[(recs[i].rev>>shift)&(1<<bits-1)]++
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for i := range recs {
			d := (recs[i].rev >> shift) & (1<<bits - 1)
			tmp[count[d]] = recs[i]
			count[d]++
		}
		recs, tmp = tmp, recs
	}
	return recs
}

// Get implements Storage.
func (ls *LocalStorage) Get(_ context.Context, key string) ([]byte, uint64, error) {
	ls.waitBuilt()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if r, ok := ls.recs.get(key); ok {
		return append([]byte(nil), r.Value...), r.Rev, nil
	}
	return nil, 0, nil
}

// Put implements Storage: durable when it returns.
func (ls *LocalStorage) Put(_ context.Context, key string, value []byte, rev uint64, _ time.Time) (uint64, error) {
	return ls.write(key, value, rev, false)
}

// Delete implements Storage.
func (ls *LocalStorage) Delete(_ context.Context, key string, rev uint64) error {
	_, err := ls.write(key, nil, rev, true)
	return err
}

// write checks key's revision, takes the write into the map and logs it
// (the map is ahead of the log only while the write holds logMu, so a
// snapshot holds only what is logged).
func (ls *LocalStorage) write(key string, value []byte, rev uint64, del bool) (uint64, error) {
	ls.waitBuilt()
	ls.logMu.RLock()
	defer ls.logMu.RUnlock()
	ls.mu.Lock()
	if ls.failed != nil {
		err := ls.failed
		ls.mu.Unlock()
		return 0, err
	}
	cur, had := ls.recs.get(key)
	switch {
	case !had && del:
		ls.mu.Unlock()
		return 0, nil
	case !had && rev != 0, had && (rev != cur.Rev && !(del && rev == 0)):
		ls.mu.Unlock()
		return 0, ErrConflict
	}
	ls.rev++
	r := localRecord{Key: key, Value: json.RawMessage(value), Rev: ls.rev, Del: del}
	if del {
		ls.recs.del(key)
	} else {
		ls.recs.set(key, localEntry{Value: r.Value, Rev: r.Rev})
	}
	ls.mu.Unlock()
	p, err := json.Marshal(&r)
	if err == nil {
		// Not cancellable: a record whose Append was abandoned may still
		// be logged, and would then appear after a restart.
		_, err = ls.wl.Append(context.Background(), p)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err != nil {
		if errors.Is(err, wal.ErrFailed) {
			ls.failed = fmt.Errorf("the notice log failed and takes no more writes until termserver restarts: %w", err)
		}
		if x, ok := ls.recs.get(key); (ok && x.Rev == r.Rev) || (del && !ok) { // not logged: as it was
			if had {
				ls.recs.set(key, cur)
			} else {
				ls.recs.del(key)
			}
		}
		return 0, fmt.Errorf("writing the notice log: %w", err)
	}
	ls.sinceSnap += len(p)
	return r.Rev, nil
}

// Maintain implements Storage: a snapshot once enough was logged.
func (ls *LocalStorage) Maintain() error {
	ls.mu.Lock()
	due := ls.sinceSnap >= ls.snapBytes
	ls.mu.Unlock()
	if !due {
		return nil
	}
	return ls.snapshot()
}

// Close implements Storage: a snapshot, and the log closed.
func (ls *LocalStorage) Close() error {
	err := ls.snapshot()
	return errors.Join(err, ls.wl.Close())
}

// snapshot writes the store to records.snap and releases the log up to it.
func (ls *LocalStorage) snapshot() error {
	ls.waitBuilt()
	ls.logMu.Lock() // no write in flight: the map holds every durable record
	lsn := ls.wl.Durable()
	ls.mu.Lock()
	ls.recs.compact()
	h := localSnapshotHeader{Format: 1, LSN: uint64(lsn), Rev: ls.rev, Records: ls.recs.len()}
	recs := make([]localRecord, 0, h.Records)
	ls.recs.each(func(k string, e localEntry) { recs = append(recs, localRecord{Key: k, Value: e.Value, Rev: e.Rev}) })
	ls.sinceSnap = 0
	ls.fresh = nil
	ls.mu.Unlock()
	ls.logMu.Unlock()
	slices.SortFunc(recs, func(a, b localRecord) int { return cmp.Compare(a.Rev, b.Rev) })
	if err := durable.WriteFile(ls.snap, func(w *bufio.Writer) error { return writeSnapshot(w, h, recs) }, ls.noSync); err != nil {
		return fmt.Errorf("writing the notice snapshot: %w", err)
	}
	if err := ls.wl.Release(lsn); err != nil {
		return fmt.Errorf("releasing the notice log: %w", err)
	}
	if err := os.Remove(filepath.Join(ls.dir, legacySnapshotFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the old notice snapshot: %w", err)
	}
	return nil
}

// loadSnapshot reads records.snap (or the legacy snapshot.json), if
// any, and returns its LSN.
func (ls *LocalStorage) loadSnapshot() (lsn uint64, legacy bool, err error) {
	f, err := os.Open(ls.snap)
	if errors.Is(err, os.ErrNotExist) {
		lsn, err := ls.loadLegacySnapshot()
		return lsn, lsn > 0, err
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading the notice snapshot: %w", err)
	}
	defer f.Close()
	h, recs, inOrder, err := readSnapshot(bufio.NewReaderSize(f, 256<<10))
	if err != nil {
		return 0, false, fmt.Errorf("reading the notice snapshot %s: %w (move it away to start with empty mailboxes)", ls.snap, err)
	}
	ls.rev = max(ls.rev, h.Rev)
	if !inOrder || len(recs) == 0 {
		ls.take(recs)
		return h.LSN, false, nil
	}
	ls.rev = max(ls.rev, recs[len(recs)-1].rev)
	ls.fresh, ls.freshRev = recs, ls.rev // a replayed record or a write makes fresh stale
	ls.built = make(chan struct{})
	go ls.buildIndex(recs)
	return h.LSN, false, nil
}

// take puts a snapshot's records in the store's map (not in revision
// order: no base).
func (ls *LocalStorage) take(recs []loadItem) {
	if ls.recs.len() == 0 {
		ls.recs = newLocalRecs(len(recs))
	}
	for _, r := range recs {
		ls.applyRecord(localRecord{Key: r.key, Value: r.value, Rev: r.rev})
	}
}

// buildIndex makes a snapshot's records (in revision order: a later one
// of a key is newer) the store's base (localRecs), then closes built.
func (ls *LocalStorage) buildIndex(recs []loadItem) {
	ls.recs.setBase(recs)
	close(ls.built)
}

// writeSnapshot writes h and recs in records.snap's format.
func writeSnapshot(w *bufio.Writer, h localSnapshotHeader, recs []localRecord) error {
	head, err := json.Marshal(h)
	if err != nil {
		return err
	}
	w.Write(head)
	w.WriteByte('\n')
	var last []byte
	num := make([]byte, 0, 20)
	for i := range recs {
		r := &recs[i]
		if strings.ContainsAny(r.Key, "\t\n") || bytes.ContainsAny(r.Value, "\t\n") || len(r.Value) == 0 {
			return fmt.Errorf("record %q: a key or value the snapshot cannot hold", r.Key)
		}
		w.Write(strconv.AppendUint(num[:0], r.Rev, 10))
		w.WriteByte('\t')
		w.WriteString(r.Key)
		w.WriteByte('\t')
		if i > 0 && bytes.Equal(r.Value, last) {
			w.WriteByte('=')
		} else {
			w.Write(r.Value)
		}
		w.WriteByte('\n')
		last = r.Value
	}
	return nil
}

// readSnapshot reads records.snap: its header, its records, and
// whether they are in strictly growing revision order (as written). A
// line that does not parse is an error (the file is written whole and
// renamed into place: it is never torn).
//
// The keys are cut from strings of about 64 KB, each made once for the
// lines it holds, rather than one string per key: a load of 500,000
// records allocates a few hundred strings (BenchmarkNoticesOpen). Such a
// string stays in memory while any key cut from it does.
func readSnapshot(br *bufio.Reader) (h localSnapshotHeader, recs []loadItem, inOrder bool, err error) {
	head, err := br.ReadSlice('\n')
	if err != nil {
		return h, nil, false, fmt.Errorf("its header: %w", err)
	}
	if err := json.Unmarshal(head, &h); err != nil {
		return h, nil, false, fmt.Errorf("its header: %w", err)
	}
	if h.Format != 1 {
		return h, nil, false, fmt.Errorf("format %d (this termserver reads format 1)", h.Format)
	}
	recs = make([]loadItem, 0, max(0, min(h.Records, 1<<22))) // a hint only: the lines say what is there
	const chunk = 64 << 10
	type pending struct {
		end   int // the key is keys[previous end:end]
		value json.RawMessage
		rev   uint64
	}
	var (
		keys []byte
		held []pending
		last json.RawMessage
		prev uint64
	)
	inOrder = true
	flush := func() {
		all, from := string(keys), 0
		for _, p := range held {
			recs = append(recs, loadItem{all[from:p.end], p.value, p.rev})
			inOrder = inOrder && p.rev > prev
			prev, from = p.rev, p.end
		}
		keys, held = keys[:0], held[:0]
	}
	var long []byte
	for n := 2; ; n++ {
		line, err := readLine(br, &long)
		if err == io.EOF && len(line) == 0 {
			break
		}
		if err != nil {
			return h, nil, false, fmt.Errorf("line %d: %w", n, err)
		}
		line = line[:len(line)-1]
		rev, rest, ok1 := bytes.Cut(line, []byte{'\t'})
		key, val, ok2 := bytes.Cut(rest, []byte{'\t'})
		r, ok3 := parseRev(rev)
		if !ok1 || !ok2 || !ok3 || len(key) == 0 || len(val) == 0 || (string(val) == "=" && last == nil) {
			return h, nil, false, fmt.Errorf("line %d: not a record (revision, tab, key, tab, value)", n)
		}
		if string(val) != "=" {
			last = append(json.RawMessage(nil), val...)
		}
		if len(keys)+len(key) > chunk && len(held) > 0 {
			flush()
		}
		if keys == nil {
			keys = make([]byte, 0, max(chunk, len(key)))
		}
		keys = append(keys, key...)
		held = append(held, pending{end: len(keys), value: last, rev: r})
	}
	flush()
	return h, recs, inOrder, nil
}

// maxSnapshotLine bounds a line of records.snap (a record's value).
const maxSnapshotLine = 64 << 20

// readLine reads a line with its newline: in br's buffer, or in *long
// when it is longer.
func readLine(br *bufio.Reader, long *[]byte) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return line, err
	}
	*long = append((*long)[:0], line...)
	for err == bufio.ErrBufferFull {
		if len(*long) > maxSnapshotLine {
			return nil, fmt.Errorf("longer than %d MB", maxSnapshotLine>>20)
		}
		line, err = br.ReadSlice('\n')
		*long = append(*long, line...)
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // a last line without its newline
	}
	return *long, err
}

// parseRev reads a revision: decimal digits only, at most 2^64-1.
func parseRev(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var r uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if r > (1<<64-1-d)/10 {
			return 0, false
		}
		r = r*10 + d
	}
	return r, true
}

// The store before the rules moved above Storage logged operations
// (create, ack, withdraw) and snapshotted notices with their peers by
// state; both are read into records once.

type legacyRecord struct {
	Op       string     `json:"op"` // "create", "ack", "withdraw"
	Channel  string     `json:"ch"`
	ID       string     `json:"id"`
	Peers    []string   `json:"peers,omitempty"`
	At       *time.Time `json:"at,omitempty"`
	Text     string     `json:"text,omitempty"`
	Priority string     `json:"priority,omitempty"`
	Display  int        `json:"display,omitempty"`
	Source   string     `json:"source,omitempty"`
	Created  *time.Time `json:"created,omitempty"`
	Expires  *time.Time `json:"expires,omitempty"`
}

type legacySnapshot struct {
	LSN     uint64 `json:"lsn"`
	Notices []struct {
		legacyRecord
		Open  []string `json:"open,omitempty"`
		Acked []struct {
			Peer string `json:"p"`
			At   int64  `json:"at"` // Unix milliseconds
		} `json:"acked,omitempty"`
		Withdrawn []string `json:"withdrawn,omitempty"`
		Expired   []string `json:"expired,omitempty"`
	} `json:"notices"`
}

func (ls *LocalStorage) loadLegacySnapshot() (uint64, error) {
	path := filepath.Join(ls.dir, legacySnapshotFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the notice snapshot: %w", err)
	}
	var s legacySnapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return 0, fmt.Errorf("reading the notice snapshot %s: %w (move it away to start with empty mailboxes)", path, err)
	}
	for _, it := range s.Notices {
		r := it.legacyRecord
		r.Peers = it.Open
		if !ls.legacyCreate(r) {
			continue
		}
		for _, a := range it.Acked {
			at := time.UnixMilli(a.At).UTC()
			ls.legacyFinish(r.Channel, r.ID, a.Peer, Acked, &at, true)
		}
		for _, p := range it.Withdrawn {
			ls.legacyFinish(r.Channel, r.ID, p, Withdrawn, nil, true)
		}
		for _, p := range it.Expired {
			ls.legacyFinish(r.Channel, r.ID, p, Expired, nil, true)
		}
	}
	return max(s.LSN, 1), nil
}

// applyLegacy takes a record of the old log; false if it is not one.
func (ls *LocalStorage) applyLegacy(p []byte) bool {
	var r legacyRecord
	if json.Unmarshal(p, &r) != nil || r.Op == "" {
		return false
	}
	switch r.Op {
	case "create":
		ls.legacyCreate(r)
	case "ack":
		at := r.At
		for _, p := range r.Peers[:min(1, len(r.Peers))] {
			ls.legacyFinish(r.Channel, r.ID, p, Acked, at, false)
		}
	case "withdraw":
		for _, p := range r.Peers {
			ls.legacyFinish(r.Channel, r.ID, p, Withdrawn, nil, false)
		}
	}
	return true
}

func (ls *LocalStorage) legacyPut(key string, v any) {
	ls.rev++
	ls.recs.set(key, localEntry{Value: mustJSON(v), Rev: ls.rev})
}

func (ls *LocalStorage) legacyCreate(r legacyRecord) bool {
	if r.Created == nil || r.Expires == nil || ls.has(NoticeKey(r.ID)) || !ValidID(r.ID) {
		return false
	}
	exp := r.Expires.UTC()
	ls.legacyPut(NoticeKey(r.ID), noticeValue{Channel: r.Channel, Content: Content{NoticeID: r.ID, Text: r.Text, Priority: r.Priority,
		DisplaySeconds: r.Display, ExpiresAt: exp, CreatedAt: r.Created.UTC(), Source: r.Source}})
	for _, p := range r.Peers {
		ls.legacyPut(DeliveryKey(r.Channel, p, r.ID), deliveryValue{State: Pending, Expires: exp})
	}
	return true
}

// legacyFinish ends peer's delivery (made when create, the snapshot's
// finished peers).
func (ls *LocalStorage) legacyFinish(ch, id, peer, state string, at *time.Time, create bool) {
	n, ok := ls.recs.get(NoticeKey(id))
	if !ok {
		return
	}
	var nv noticeValue
	if json.Unmarshal(n.Value, &nv) != nil {
		return
	}
	key := DeliveryKey(ch, peer, id)
	v := deliveryValue{State: Pending, Expires: nv.ExpiresAt}
	if d, ok := ls.recs.get(key); ok {
		if json.Unmarshal(d.Value, &v) != nil {
			return
		}
	} else if !create {
		return
	}
	if !v.open() {
		return
	}
	v.State = state
	if state == Acked {
		if at == nil {
			now := time.Now().UTC()
			at = &now
		}
		v.AckedAt = at
	}
	ls.legacyPut(key, v)
}

func (ls *LocalStorage) has(key string) bool {
	_, ok := ls.recs.get(key)
	return ok
}
