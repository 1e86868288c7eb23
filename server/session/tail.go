package session

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
)

// tailChunk is how much Tail reads at a time, walking back from the end.
const tailChunk = 256 << 10

// TailSettled is how many answered messages in a row (walking back from the
// end: a user record whose assistant record with the same message id comes
// after it) end a tail early. A session runs its messages in order, so
// past that run every earlier message is answered too, and a device only
// resends its last few unanswered messages (link.Client's window): start-up
// needs neither their records nor more of the file.
const TailSettled = 64

// Tail reads the session stored under key as [Store.Load] does, but only
// its metadata line and its last records: walking back from the end of the
// file, it stops once it holds n records that carry a message id (or 8n
// records in all), once it has seen [TailSettled] answered messages in a
// row, or at the metadata line. Records are in file order. Its
// cost is that of the tail, not of the whole file, which is what start-up
// needs. A missing file wraps [os.ErrNotExist]. [Session.Partial] says
// whether it stopped before the first record.
func (s *Store) Tail(key string, n int) (*Session, error) {
	return s.tail(key, tailOpts{want: n, settle: TailSettled})
}

// TailMessages reads the session stored under key as [Store.Tail] does, but
// walks back until it holds the records of the last n messages (n user
// records with a message id; or 8n records in all) and every record after
// them, with no early stop at [TailSettled]: what a dedupe table that
// remembers n answered ids per session needs (the server's on-demand
// reloads), and what replaying n records of a write-ahead log into the
// file must compare with. maxBytes > 0 also stops it once the lines it
// read take that many bytes (the last line read may end past it).
func (s *Store) TailMessages(key string, n int, maxBytes int64) (*Session, error) {
	return s.tail(key, tailOpts{want: n, messages: true, maxBytes: maxBytes})
}

// tailOpts say when a tail walk stops.
type tailOpts struct {
	want     int  // records with a message id to collect (messages: user records)
	messages bool // count user records with a message id only
	settle   int  // stop after this many answered messages in a row (0: never)
	maxBytes int64
}

func (s *Store) tail(key string, o tailOpts) (*Session, error) {
	name, err := FileName(key)
	if err != nil {
		return nil, fmt.Errorf("session: tail %s: %w", key, err)
	}
	fileKey := key
	if IsHashedName(name) {
		fileKey = ""
	}
	l, err := s.tailPath(filepath.Join(s.dir, name), fileKey, key, o, nil)
	if err != nil {
		return nil, fmt.Errorf("session: tail %s: %w", key, err)
	}
	if l.sess.Meta.Key == "" {
		l.sess.Meta.Key = key
	}
	return l.sess, nil
}

// ScanTails is [Store.Scan] reading each file as [Store.Tail] does.
func (s *Store) ScanTails(n int, fn func(*Session) error) error {
	buf := make([]byte, tailChunk) // one read buffer for every file
	o := tailOpts{want: n, settle: TailSettled}
	return s.scan(func(path, fileKey, pendKey string) (loaded, error) { return s.tailPath(path, fileKey, pendKey, o, buf) }, fn)
}

// tailPath reads the metadata line and the last records of one file. As
// loadPath, it reads only the bytes present when it opened the file.
// buf, if not nil, is the read buffer (nothing read keeps it).
func (s *Store) tailPath(path, fileKey, pendKey string, o tailOpts, buf []byte) (loaded, error) {
	f, size, err := s.openSnapshot(path, pendKey)
	if err != nil {
		return loaded{}, err
	}
	defer s.closeSnapshot(f)
	t := &tailReader{path: path, f: f, size: size, max: s.maxLine, want: o.want, sess: &Session{}, buf: buf,
		settleAfter: o.settle, messages: o.messages, maxBytes: o.maxBytes}
	if err := t.read(); err != nil {
		return loaded{}, fmt.Errorf("read %s: %w", path, err)
	}
	sess := t.sess
	for _, w := range sess.Warnings {
		s.log.Warn("session: " + w)
	}
	empty := !t.haveMeta && len(sess.Records) == 0 && !t.sawLine
	if empty {
		sess.Warnings = append(sess.Warnings, path+": empty session file")
		s.log.Warn("session: empty session file", "file", path)
	}
	if sess.Meta.Key == "" {
		sess.Meta.Key = fileKey
	} else if fileKey != "" && sess.Meta.Key != fileKey {
		sess.Warnings = append(sess.Warnings, fmt.Sprintf("%s: metadata key %q differs from the key of the file name %q; using the metadata key", path, sess.Meta.Key, fileKey))
	}
	if sess.Meta.Metadata == nil {
		sess.Meta.Metadata = map[string]any{}
	}
	return loaded{sess: sess, empty: empty}, nil
}

// tailReader walks one file back from its end, line by line.
type tailReader struct {
	path string
	f    io.ReaderAt
	size int64
	max  int // longest line kept
	want int // records with a message id to collect
	// messages counts only user records with a message id toward want
	// (the records of the last want messages).
	messages bool
	maxBytes int64  // stop once the lines read from the end take this many bytes (0: no bound)
	walked   int64  // bytes from the start of the last line taken to the end of the file
	chunk    int    // bytes read at a time; default tailChunk
	buf      []byte // read buffer to use, if not nil

	sess     *Session
	haveMeta bool
	sawLine  bool // a non-blank line other than the metadata line
	withID   int

	settleAfter int             // stop after this many answered messages in a row (0: never)
	answered    map[string]bool // message ids with an assistant record seen so far
	settled     int             // answered user records in a row, newest first
}

func (t *tailReader) warn(off int64, msg string, args ...any) {
	t.sess.Warnings = append(t.sess.Warnings, fmt.Sprintf("%s@%d: %s", t.path, off, fmt.Sprintf(msg, args...)))
}

// done reports whether enough records are collected.
func (t *tailReader) done() bool {
	return t.withID >= t.want || len(t.sess.Records) >= 8*t.want ||
		(t.settleAfter > 0 && t.settled >= t.settleAfter) ||
		(t.maxBytes > 0 && t.walked >= t.maxBytes)
}

func (t *tailReader) read() error {
	head, err := t.readHead()
	if err != nil {
		return err
	}
	// Walk back from the end to head. pieces hold the bytes of the line
	// being assembled, last piece first; tooLong drops them once the line
	// is known to be over the limit.
	var (
		pieces  [][]byte
		length  int
		tooLong bool
		torn    bool // the last line is torn unless the file ends in '\n'
	)
	if t.chunk <= 0 {
		t.chunk = tailChunk
	}
	buf := t.buf
	if len(buf) == 0 || len(buf) > t.chunk {
		buf = make([]byte, min(int64(t.chunk), max(t.size-head, 1)))
	}
	if t.size > head {
		if _, err := t.f.ReadAt(buf[:1], t.size-1); err != nil {
			return err
		}
		torn = buf[0] != '\n'
	}
	emit := func(lineEnd int64) {
		line := make([]byte, 0, length)
		for i := len(pieces) - 1; i >= 0; i-- {
			line = append(line, pieces[i]...)
		}
		t.line(line, lineEnd-int64(length), tooLong, torn)
		pieces, length, tooLong, torn = pieces[:0], 0, false, false
	}
	pos := t.size
	lineEnd := t.size // end offset of the line being assembled
	for pos > head && !t.done() {
		m := min(int64(len(buf)), pos-head)
		pos -= m
		data := buf[:m]
		if _, err := t.f.ReadAt(data, pos); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		// add puts b (earlier bytes of the line being assembled) in front.
		add := func(b []byte) {
			if !tooLong {
				if length+len(b) > t.max {
					tooLong, pieces = true, pieces[:0]
				} else {
					pieces = append(pieces, slices.Clone(b))
				}
			}
			length += len(b)
		}
		for !t.done() {
			i := bytes.LastIndexByte(data, '\n')
			if i < 0 {
				add(data)
				break
			}
			seg := data[i+1:]
			if length == 0 && !tooLong && len(seg) <= t.max {
				// The whole line is in buf: no copy (line does not keep it).
				t.line(seg, lineEnd-int64(len(seg)), false, torn)
				torn = false
			} else {
				add(seg)
				emit(lineEnd)
			}
			lineEnd = pos + int64(i)
			data = data[:i]
		}
	}
	if pos <= head && !t.done() && (length > 0 || tooLong) {
		emit(lineEnd) // the first line after the metadata line
	}
	// Stopped early (or just at the first record: then a reader that
	// wants more reads once more for nothing).
	t.sess.Partial = t.done()
	slices.Reverse(t.sess.Records)
	return nil
}

// readHead reads the first line and returns where the records start: after
// it if it is the metadata line, else 0.
func (t *tailReader) readHead() (int64, error) {
	lr := &lineReader{r: bufio.NewReaderSize(io.NewSectionReader(t.f, 0, t.size), 4<<10), max: t.max}
	var off int64
	for {
		line, tooLong, newline, err := lr.next()
		if errors.Is(err, io.EOF) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		next := off + int64(len(line)) + 1
		if tooLong || !newline {
			return 0, nil // read as a record (and warned about) by the walk
		}
		if len(bytes.TrimSpace(line)) == 0 {
			off = next
			continue
		}
		obj, err := decodeObject(line)
		if err != nil || !isMetadataLine(obj) {
			t.warn(0, "first line is not a metadata record; key taken from the file name")
			return 0, nil
		}
		t.sess.Meta.fromObject(obj)
		t.haveMeta = true
		return next, nil
	}
}

// line takes one line found by the walk (start is its offset).
func (t *tailReader) line(line []byte, start int64, tooLong, torn bool) {
	t.walked = t.size - start
	tornNote := ""
	if torn {
		tornNote = " (torn last line)"
	}
	if tooLong {
		t.sawLine = true
		t.warn(start, "line longer than %d bytes skipped%s", t.max, tornNote)
		return
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	t.sawLine = true
	rec, ok := fastRecord(line)
	if !ok {
		obj, err := decodeObject(line)
		if err != nil {
			t.warn(start, "invalid line skipped%s: %v", tornNote, err)
			return
		}
		if isMetadataLine(obj) {
			t.warn(start, "metadata record after the first record ignored")
			return
		}
		rec.fromObject(obj)
	}
	if rec.MessageID != "" {
		if !t.messages || rec.Role == "user" {
			t.withID++
		}
		switch rec.Role {
		case "assistant":
			if t.answered == nil {
				t.answered = map[string]bool{}
			}
			t.answered[rec.MessageID] = true
		case "user":
			if t.answered[rec.MessageID] {
				t.settled++
			} else {
				t.settled = 0
			}
		}
	}
	t.sess.Records = append(t.sess.Records, rec)
}
