package link

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Files a FileOutbox keeps in its state dir.
const (
	OutboxFile     = "outbox.jsonl" // append-only log of add and done records
	OutboxBootFile = "outbox.boot"  // boot counter, one decimal number
	outboxLockFile = "outbox.lock"  // flock(2): one process per state dir
)

// maxOutboxID bounds a message id read back from the file (the server
// refuses ids over 256 bytes).
const maxOutboxID = 256

// compaction: the file is rewritten when it has at least compactMinLines
// records and fewer than one in compactRatio is a pending message.
const (
	compactMinLines = 64
	compactRatio    = 4
)

// FileOutboxOptions tune OpenFileOutbox.
type FileOutboxOptions struct {
	// NoSync skips fsync (benchmarks only: a power cut may lose messages).
	NoSync bool
	// SyncDone also fsyncs done records. Off by default: a done record
	// lost to a power cut only makes the device resend an answered
	// message, which the server answers from its dedupe table.
	SyncDone bool
	// Logger receives warnings about skipped lines (nil: slog.Default()).
	Logger *slog.Logger
}

// FileOutbox is the durable Outbox: an append-only JSON-lines file in the
// device's state dir, one record per line:
//
//	{"op":"add","id":"3-9f2ac41d-1","text":"hello","at":"2026-06-01T10:00:00.123Z"}
//	{"op":"done","id":"3-9f2ac41d-1"}
//
// Add appends and fsyncs before it returns. Done appends without fsync
// (see FileOutboxOptions.SyncDone). When most records are answered the file
// is compacted: the pending adds are written to a temp file, fsynced and
// renamed over it. A torn last line (power cut mid-write) is dropped at
// open, and any other line that does not parse is skipped with a warning:
// opening never fails because of the file's content.
//
// Message ids are "<boot>-<random>-<seq>": boot is a counter kept in
// outbox.boot and raised at every open, random is fresh per open (so ids
// stay unique even if the state dir is wiped), seq counts up from 1.
//
// One process at a time may open a state dir (flock on outbox.lock where
// the platform has it).
type FileOutbox struct {
	dir  string
	path string
	opt  FileOutboxOptions
	log  *slog.Logger
	lock *os.File

	mu      sync.Mutex
	f       *os.File
	size    int64 // bytes of complete records in the file
	lines   int   // records in the file
	pending *pendingList
	prefix  string
	seq     uint64
	boot    uint64
	skipped int   // lines skipped at open
	broken  error // set when a failed write could not be undone
	closed  bool
}

// OpenFileOutbox opens (creating it if needed) the outbox in dir.
func OpenFileOutbox(dir string, opt FileOutboxOptions) (*FileOutbox, error) {
	if dir == "" {
		return nil, errors.New("link: outbox: state dir is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("link: outbox: creating state dir: %w", err)
	}
	o := &FileOutbox{dir: dir, path: filepath.Join(dir, OutboxFile), opt: opt, log: opt.Logger, pending: newPendingList()}
	if o.log == nil {
		o.log = slog.Default()
	}
	lock, err := lockFile(filepath.Join(dir, outboxLockFile))
	if err != nil {
		return nil, fmt.Errorf("link: outbox: %w", err)
	}
	o.lock = lock
	if err := o.open(); err != nil {
		unlockFile(o.lock)
		return nil, err
	}
	return o, nil
}

func (o *FileOutbox) open() error {
	boot, err := o.nextBoot()
	if err != nil {
		return err
	}
	o.boot = boot
	o.prefix = strconv.FormatUint(boot, 10) + "-" + idPrefix()

	data, err := os.ReadFile(o.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("link: outbox: reading %s: %w", o.path, err)
	}
	var complete, torn []byte
	o.pending, o.lines, o.skipped, complete, torn = loadOutbox(data, o.path, o.log)
	if o.skipped > 0 || o.shouldCompact() {
		// A rewrite also drops the skipped lines and the torn tail.
		return o.rewrite()
	}
	if len(torn) > 0 {
		if err := truncateSync(o.path, int64(len(complete))); err != nil {
			return fmt.Errorf("link: outbox: cutting the torn last line off %s: %w", o.path, err)
		}
	}
	return o.openAppend(int64(len(complete)))
}

// loadOutbox replays the records of an outbox file: the pending entries
// in order, the records read and skipped, the complete lines and a torn
// last line (dropped, with a warning).
func loadOutbox(data []byte, path string, log *slog.Logger) (pending *pendingList, lines, skipped int, complete, torn []byte) {
	pending = newPendingList()
	complete, torn = splitComplete(data)
	if len(torn) > 0 {
		log.Warn("outbox: dropping a torn last line (power cut while writing?)", "file", path, "bytes", len(torn))
	}
	lineNo := 0
	for line := range bytes.Lines(complete) {
		lineNo++
		rec, err := parseOutboxRecord(line)
		if err != nil {
			skipped++
			log.Warn("outbox: skipping a line that does not parse", "file", path, "line", lineNo, "err", err)
			continue
		}
		lines++
		switch rec.Op {
		case opAdd, opAnswer:
			pending.add(OutboxEntry{ID: rec.ID, Text: rec.Text, Added: rec.At, QuestionID: rec.QuestionID, OptionID: rec.OptionID})
		case opDone:
			pending.remove(rec.ID)
		}
	}
	return pending, lines, skipped, complete, torn
}

// splitComplete splits data after its last newline.
func splitComplete(data []byte) (complete, torn []byte) {
	i := bytes.LastIndexByte(data, '\n')
	return data[:i+1], data[i+1:]
}

func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

func (o *FileOutbox) openAppend(size int64) error {
	f, err := os.OpenFile(o.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("link: outbox: opening %s: %w", o.path, err)
	}
	if size == 0 {
		// A new file: make its directory entry durable too.
		if err := syncDir(o.dir); err != nil && !o.opt.NoSync {
			f.Close()
			return fmt.Errorf("link: outbox: %w", err)
		}
	}
	o.f, o.size = f, size
	return nil
}

// nextBoot reads the boot counter, raises it and writes it back durably.
func (o *FileOutbox) nextBoot() (uint64, error) {
	path := filepath.Join(o.dir, OutboxBootFile)
	var boot uint64
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		boot, err = strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			// The random part of the ids keeps them unique anyway.
			o.log.Warn("outbox: boot counter unreadable; starting again from 1", "file", path, "err", err)
			boot = 0
		}
	case !errors.Is(err, os.ErrNotExist):
		return 0, fmt.Errorf("link: outbox: reading the boot counter: %w", err)
	}
	boot++
	if err := writeFileAtomic(o.dir, path, []byte(strconv.FormatUint(boot, 10)+"\n"), !o.opt.NoSync); err != nil {
		return 0, fmt.Errorf("link: outbox: writing the boot counter: %w", err)
	}
	return boot, nil
}

// writeFileAtomic writes data to path through a temp file: write, fsync,
// rename, fsync the directory.
func writeFileAtomic(dir, path string, data []byte, sync bool) error {
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename this fails harmlessly
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if sync {
		return syncDir(dir)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync of directory %s: %w", dir, err)
	}
	return nil
}

// Add implements Outbox: the add record is on disk when it returns.
func (o *FileOutbox) Add(text string) (OutboxEntry, error) {
	return o.add(OutboxEntry{Text: text})
}

// AddAnswer implements Outbox: the answer record is on disk when it
// returns.
func (o *FileOutbox) AddAnswer(questionID, optionID string) (OutboxEntry, error) {
	return o.add(OutboxEntry{QuestionID: questionID, OptionID: optionID})
}

func (o *FileOutbox) add(e OutboxEntry) (OutboxEntry, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.usable(); err != nil {
		return OutboxEntry{}, err
	}
	o.seq++
	e.ID, e.Added = o.prefix+"-"+strconv.FormatUint(o.seq, 10), time.Now()
	line, err := encodeOutboxLine(recordOf(e))
	if err != nil {
		return OutboxEntry{}, err
	}
	if err := o.append(line, !o.opt.NoSync); err != nil {
		return OutboxEntry{}, fmt.Errorf("link: outbox: storing message: %w", err)
	}
	o.pending.add(e)
	return e, nil
}

// importEntries stores entries kept elsewhere meanwhile (by a
// FallbackOutbox in memory) with their ids, durably, after the others.
func (o *FileOutbox) importEntries(entries []OutboxEntry) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.usable(); err != nil {
		return err
	}
	var buf bytes.Buffer
	var added []OutboxEntry
	for _, e := range entries {
		if _, dup := o.pending.index[e.ID]; dup {
			continue
		}
		line, err := encodeOutboxLine(recordOf(e))
		if err != nil {
			return err
		}
		buf.Write(line)
		added = append(added, e)
	}
	if len(added) == 0 {
		return nil
	}
	if err := o.append(buf.Bytes(), !o.opt.NoSync); err != nil {
		return fmt.Errorf("link: outbox: storing messages kept in memory: %w", err)
	}
	o.lines += len(added) - 1 // append counted one record
	for _, e := range added {
		o.pending.add(e)
	}
	return nil
}

// Pending implements Outbox.
func (o *FileOutbox) Pending() []OutboxEntry {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pending.list()
}

// Done implements Outbox; it may compact the file.
func (o *FileOutbox) Done(id string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.usable(); err != nil {
		return err
	}
	if _, ok := o.pending.index[id]; !ok {
		return nil
	}
	line, err := encodeOutboxLine(outboxRecord{Op: opDone, ID: id})
	if err != nil {
		return err
	}
	if err := o.append(line, o.opt.SyncDone && !o.opt.NoSync); err != nil {
		return fmt.Errorf("link: outbox: marking %s answered: %w", id, err)
	}
	o.pending.remove(id)
	if o.shouldCompact() {
		if err := o.rewrite(); err != nil {
			return err
		}
	}
	return nil
}

func (o *FileOutbox) usable() error {
	switch {
	case o.closed:
		return ErrOutboxClosed
	case o.broken != nil:
		return o.broken
	}
	return nil
}

// append writes one record; a failed write is cut off again so that the
// next record does not land behind half a line.
func (o *FileOutbox) append(line []byte, sync bool) error {
	n, err := o.f.Write(line)
	if err == nil && sync {
		err = o.f.Sync()
	}
	if err != nil {
		if n > 0 {
			if terr := o.f.Truncate(o.size); terr != nil {
				o.broken = fmt.Errorf("link: outbox: a failed write left half a record in %s: %v (then %v)", o.path, err, terr)
			}
		}
		return err
	}
	o.size += int64(n)
	o.lines++
	return nil
}

func (o *FileOutbox) shouldCompact() bool {
	return o.lines >= compactMinLines && o.lines > compactRatio*o.pending.len()
}

// rewrite replaces the file by one holding only the pending adds.
func (o *FileOutbox) rewrite() error {
	var buf bytes.Buffer
	entries := o.pending.list()
	for _, e := range entries {
		line, err := encodeOutboxLine(recordOf(e))
		if err != nil {
			return err
		}
		buf.Write(line)
	}
	if o.f != nil {
		o.f.Close()
		o.f = nil
	}
	if err := writeFileAtomic(o.dir, o.path, buf.Bytes(), !o.opt.NoSync); err != nil {
		o.broken = fmt.Errorf("link: outbox: compacting %s: %w", o.path, err)
		return o.broken
	}
	o.lines, o.skipped = len(entries), 0
	return o.openAppend(int64(buf.Len()))
}

// Close implements Outbox.
func (o *FileOutbox) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	var err error
	if o.f != nil {
		err = o.f.Close()
	}
	unlockFile(o.lock)
	return err
}

// Boot is the boot counter of this open (1 for the first).
func (o *FileOutbox) Boot() uint64 { return o.boot }

// Dir is the state dir.
func (o *FileOutbox) Dir() string { return o.dir }

// Outbox file records. An answer (capability "choice") has a record of
// its own, which a termd from before answers skips with a warning:
//
//	{"op":"answer","id":"3-9f2ac41d-2","question_id":"q-1","option_id":"allow_once","at":"..."}
const (
	opAdd    = "add"
	opAnswer = "answer"
	opDone   = "done"
)

type outboxRecord struct {
	Op         string    `json:"op"`
	ID         string    `json:"id"`
	Text       string    `json:"text,omitempty"`
	QuestionID string    `json:"question_id,omitempty"`
	OptionID   string    `json:"option_id,omitempty"`
	At         time.Time `json:"at,omitzero"`
}

// recordOf is the record that stores e: an add, or an answer.
func recordOf(e OutboxEntry) outboxRecord {
	if e.IsAnswer() {
		return outboxRecord{Op: opAnswer, ID: e.ID, QuestionID: e.QuestionID, OptionID: e.OptionID, At: e.Added}
	}
	return outboxRecord{Op: opAdd, ID: e.ID, Text: e.Text, At: e.Added}
}

func encodeOutboxLine(r outboxRecord) ([]byte, error) {
	var v any = r
	if r.Op == opAdd {
		// text is required in an add record, even when empty.
		v = struct {
			Op   string    `json:"op"`
			ID   string    `json:"id"`
			Text string    `json:"text"`
			At   time.Time `json:"at,omitzero"`
		}{r.Op, r.ID, r.Text, r.At}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("link: outbox: encoding record: %w", err)
	}
	return append(b, '\n'), nil
}

// parseOutboxRecord parses one line of an outbox file (with or without its
// newline). It is strict: a JSON object with op "add" (id, text, optional
// at), "answer" (id, question_id and option_id of 1-256 bytes, optional
// at) or "done" (id); an id of 1-256 bytes; valid UTF-8.
func parseOutboxRecord(line []byte) (outboxRecord, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	var r outboxRecord
	if len(bytes.TrimSpace(line)) == 0 {
		return r, errors.New("empty line")
	}
	if !utf8.Valid(line) {
		return r, errors.New("not valid UTF-8")
	}
	var raw struct {
		Op   *string `json:"op"`
		ID   *string `json:"id"`
		Text *string `json:"text"`
		At   *string `json:"at"`
		QID  *string `json:"question_id"`
		OID  *string `json:"option_id"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&raw); err != nil {
		return r, fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return r, errors.New("more than one JSON value on the line")
	}
	if raw.Op == nil {
		return r, errors.New(`missing "op"`)
	}
	if raw.ID == nil || *raw.ID == "" {
		return r, errors.New(`missing or empty "id"`)
	}
	if len(*raw.ID) > maxOutboxID {
		return r, fmt.Errorf(`"id" is %d bytes, more than %d`, len(*raw.ID), maxOutboxID)
	}
	r.Op, r.ID = *raw.Op, *raw.ID
	switch r.Op {
	case opAdd:
		if raw.Text == nil {
			return outboxRecord{}, errors.New(`add record without "text"`)
		}
		r.Text = *raw.Text
	case opAnswer:
		for _, f := range []struct {
			name string
			v    *string
		}{{"question_id", raw.QID}, {"option_id", raw.OID}} {
			switch {
			case f.v == nil || *f.v == "":
				return outboxRecord{}, fmt.Errorf(`answer record without %q`, f.name)
			case len(*f.v) > maxOutboxID:
				return outboxRecord{}, fmt.Errorf(`%q is %d bytes, more than %d`, f.name, len(*f.v), maxOutboxID)
			}
		}
		r.QuestionID, r.OptionID = *raw.QID, *raw.OID
	case opDone:
	default:
		return outboxRecord{}, fmt.Errorf("unknown op %q", r.Op)
	}
	if r.Op != opDone && raw.At != nil {
		at, err := time.Parse(time.RFC3339Nano, *raw.At)
		if err != nil {
			return outboxRecord{}, fmt.Errorf(`"at": %w`, err)
		}
		r.At = at
	}
	return r, nil
}
