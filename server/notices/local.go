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
	recs      map[string]*localRecord
	rev       uint64
	sinceSnap int // payload bytes logged since the last snapshot
	failed    error
}

// localRecord is one record of the store, and one write of the log
// (Del: the key removed at Rev).
type localRecord struct {
	Key   string          `json:"k"`
	Value json.RawMessage `json:"v,omitempty"`
	Rev   uint64          `json:"r"`
	Del   bool            `json:"del,omitempty"`
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
		snapBytes: opt.SnapshotBytes, recs: map[string]*localRecord{}}
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
	ls.log.Info("notice mailboxes opened", "records", len(ls.recs), "replayed", replayed, "took", time.Since(t0).Round(time.Millisecond))
	return ls, nil
}

// applyRecord takes a logged record into the map (a replay may bring it
// twice: an older revision changes nothing).
func (ls *LocalStorage) applyRecord(r localRecord) {
	ls.rev = max(ls.rev, r.Rev)
	if cur := ls.recs[r.Key]; cur != nil && cur.Rev >= r.Rev {
		return
	}
	if r.Del {
		delete(ls.recs, r.Key)
		return
	}
	ls.recs[r.Key] = &localRecord{Key: r.Key, Value: r.Value, Rev: r.Rev}
}

// Info implements Storage: one writer, and records go only when deleted.
func (ls *LocalStorage) Info() StorageInfo { return StorageInfo{} }

// Follow implements Storage: the whole store, the notices first (oldest
// first), then the deliveries; nothing else writes it.
func (ls *LocalStorage) Follow(ctx context.Context, f Feed) error {
	ls.mu.Lock()
	recs := make([]localRecord, 0, len(ls.recs))
	for _, r := range ls.recs {
		recs = append(recs, *r)
	}
	ls.mu.Unlock()
	// A delivery sorts by its notice's revision (created order), then
	// its own: the state numbers them in the order it takes them. The
	// notices' revisions come from a map of the notices alone (a few
	// hundred), keyed by the id inside the delivery's key: no key built
	// and no look-up in the whole store per delivery (BenchmarkNoticesOpen).
	nrev := map[string]uint64{}
	for i := range recs {
		if id, ok := strings.CutPrefix(recs[i].Key, "n."); ok {
			nrev[id] = recs[i].Rev
		}
	}
	type ordered struct {
		notice    bool
		nrev, rev uint64
		i         int
	}
	keys := make([]ordered, len(recs))
	for i := range recs {
		k := recs[i].Key
		o := ordered{i: i, nrev: recs[i].Rev, rev: recs[i].Rev}
		if strings.HasPrefix(k, "n.") {
			o.notice = true
		} else if j := strings.LastIndexByte(k, '.'); strings.HasPrefix(k, "d.") && j > 0 {
			if r, ok := nrev[k[j+1:]]; ok {
				o.nrev = r
			}
		}
		keys[i] = o
	}
	slices.SortFunc(keys, func(a, b ordered) int {
		switch {
		case a.notice != b.notice:
			if a.notice {
				return -1
			}
			return 1
		case a.nrev != b.nrev:
			return cmp.Compare(a.nrev, b.nrev)
		}
		return cmp.Compare(a.rev, b.rev)
	})
	f.Begin()
	for _, k := range keys {
		r := &recs[k.i]
		f.Put(r.Key, r.Value, r.Rev)
	}
	f.Loaded()
	return nil
}

// Get implements Storage.
func (ls *LocalStorage) Get(_ context.Context, key string) ([]byte, uint64, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if r := ls.recs[key]; r != nil {
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
	ls.logMu.RLock()
	defer ls.logMu.RUnlock()
	ls.mu.Lock()
	if ls.failed != nil {
		err := ls.failed
		ls.mu.Unlock()
		return 0, err
	}
	cur := ls.recs[key]
	switch {
	case cur == nil && del:
		ls.mu.Unlock()
		return 0, nil
	case cur == nil && rev != 0, cur != nil && (rev != cur.Rev && !(del && rev == 0)):
		ls.mu.Unlock()
		return 0, ErrConflict
	}
	ls.rev++
	r := localRecord{Key: key, Value: json.RawMessage(value), Rev: ls.rev, Del: del}
	if del {
		delete(ls.recs, key)
	} else {
		ls.recs[key] = &localRecord{Key: key, Value: r.Value, Rev: r.Rev}
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
		if x := ls.recs[key]; (x != nil && x.Rev == r.Rev) || (del && x == nil) { // not logged: as it was
			if cur != nil {
				ls.recs[key] = cur
			} else {
				delete(ls.recs, key)
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
	ls.logMu.Lock() // no write in flight: the map holds every durable record
	lsn := ls.wl.Durable()
	ls.mu.Lock()
	h := localSnapshotHeader{Format: 1, LSN: uint64(lsn), Rev: ls.rev, Records: len(ls.recs)}
	recs := make([]localRecord, 0, len(ls.recs))
	for _, r := range ls.recs {
		recs = append(recs, *r)
	}
	ls.sinceSnap = 0
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
	h, err := ls.readSnapshot(bufio.NewReaderSize(f, 256<<10))
	if err != nil {
		return 0, false, fmt.Errorf("reading the notice snapshot %s: %w (move it away to start with empty mailboxes)", ls.snap, err)
	}
	ls.rev = max(ls.rev, h.Rev)
	return h.LSN, false, nil
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

// readSnapshot reads records.snap into the map; it returns the header.
// A line that does not parse is an error (the file is written whole and
// renamed into place: it is never torn).
func (ls *LocalStorage) readSnapshot(br *bufio.Reader) (localSnapshotHeader, error) {
	var h localSnapshotHeader
	head, err := br.ReadSlice('\n')
	if err != nil {
		return h, fmt.Errorf("its header: %w", err)
	}
	if err := json.Unmarshal(head, &h); err != nil {
		return h, fmt.Errorf("its header: %w", err)
	}
	if h.Format != 1 {
		return h, fmt.Errorf("format %d (this termserver reads format 1)", h.Format)
	}
	if len(ls.recs) == 0 && h.Records > 0 {
		ls.recs = make(map[string]*localRecord, min(h.Records, 1<<22)) // a hint only: the lines say what is there
	}
	var last json.RawMessage
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if err == io.EOF && len(line) == 0 {
			break
		}
		if err != nil {
			return h, fmt.Errorf("line %d: %w", n+1, err)
		}
		line = line[:len(line)-1]
		rev, rest, ok1 := bytes.Cut(line, []byte{'\t'})
		key, val, ok2 := bytes.Cut(rest, []byte{'\t'})
		r, perr := strconv.ParseUint(string(rev), 10, 64)
		if !ok1 || !ok2 || perr != nil || len(key) == 0 || len(val) == 0 || (string(val) == "=" && last == nil) {
			return h, fmt.Errorf("line %d: not a record (revision, tab, key, tab, value)", n+1)
		}
		if string(val) != "=" {
			last = append(json.RawMessage(nil), val...)
		}
		ls.applyRecord(localRecord{Key: string(key), Value: last, Rev: r})
	}
	return h, nil
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
	ls.recs[key] = &localRecord{Key: key, Value: mustJSON(v), Rev: ls.rev}
}

func (ls *LocalStorage) legacyCreate(r legacyRecord) bool {
	if r.Created == nil || r.Expires == nil || ls.recs[NoticeKey(r.ID)] != nil || !ValidID(r.ID) {
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
	n := ls.recs[NoticeKey(id)]
	if n == nil {
		return
	}
	var nv noticeValue
	if json.Unmarshal(n.Value, &nv) != nil {
		return
	}
	key := DeliveryKey(ch, peer, id)
	v := deliveryValue{State: Pending, Expires: nv.ExpiresAt}
	if d := ls.recs[key]; d != nil {
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
