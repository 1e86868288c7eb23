package session

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// MaxLineSize is the longest line Load and Scan read (16 MiB, without the
// newline); a longer line is skipped with a warning. Append refuses a record
// whose line would be longer.
const MaxLineSize = 16 << 20

// lineReader reads '\n'-terminated lines of at most max bytes; a longer line
// is consumed and reported as too long instead of failing the whole read.
type lineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// next returns the next line without its '\n'. newline says whether the line
// was terminated (false only for the last line of the input). At the end of
// the input it returns io.EOF.
func (lr *lineReader) next() (line []byte, tooLong, newline bool, err error) {
	lr.buf = lr.buf[:0]
	seen := 0
	for {
		frag, err := lr.r.ReadSlice('\n')
		seen += len(frag)
		if !tooLong {
			if len(lr.buf)+len(frag) > lr.max+1 {
				tooLong = true
				lr.buf = lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, frag...)
			}
		}
		switch {
		case err == nil:
			if !tooLong {
				line = lr.buf[:len(lr.buf)-1]
			}
			return line, tooLong, true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if seen == 0 {
				return nil, false, false, io.EOF
			}
			if !tooLong && len(lr.buf) > lr.max {
				tooLong = true
			}
			if !tooLong {
				line = lr.buf
			}
			return line, tooLong, false, nil
		default:
			return nil, false, false, err
		}
	}
}

// loaded is the result of parsing one session file.
type loaded struct {
	sess  *Session
	empty bool // no non-blank line at all
}

// parse reads a session file. Content problems become warnings (logged and
// kept in Session.Warnings); only read errors are returned. fileKey is the
// key the file name stands for, used when the file has no metadata line.
func parse(r io.Reader, path, fileKey string, maxLine int, log *slog.Logger) (loaded, error) {
	sess := &Session{}
	warn := func(line int, msg string, args ...any) {
		text := fmt.Sprintf(msg, args...)
		if line > 0 {
			sess.Warnings = append(sess.Warnings, fmt.Sprintf("%s:%d: %s", path, line, text))
			log.Warn("session: "+text, "file", path, "line", line)
		} else {
			sess.Warnings = append(sess.Warnings, fmt.Sprintf("%s: %s", path, text))
			log.Warn("session: "+text, "file", path)
		}
	}
	lr := &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: maxLine}
	var (
		n         int
		firstLine int // number of the first non-blank line
		haveMeta  bool
		sawRecord bool
	)
	for {
		line, tooLong, newline, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return loaded{}, err
		}
		n++
		torn := ""
		if !newline {
			torn = " (torn last line)"
		}
		if !tooLong {
			line = bytes.TrimSpace(line)
			if len(line) == 0 {
				continue
			}
		}
		if firstLine == 0 {
			firstLine = n
		}
		if tooLong {
			warn(n, "line longer than %d bytes skipped%s", maxLine, torn)
			continue
		}
		obj, err := decodeObject(line)
		if err != nil {
			warn(n, "invalid line skipped%s: %v", torn, err)
			continue
		}
		if isMetadataLine(obj) {
			if haveMeta || sawRecord {
				warn(n, "metadata record after the first record ignored")
				continue
			}
			if n != firstLine {
				warn(n, "metadata record is not the first line")
			}
			sess.Meta.fromObject(obj)
			haveMeta = true
			continue
		}
		var rec Record
		rec.fromObject(obj)
		sess.Records = append(sess.Records, rec)
		sawRecord = true
	}
	switch {
	case firstLine == 0:
		warn(0, "empty session file")
	case !haveMeta:
		warn(firstLine, "first line is not a metadata record; key taken from the file name")
	}
	if sess.Meta.Key == "" {
		if haveMeta {
			warn(1, "metadata record has no key; key taken from the file name")
		}
		sess.Meta.Key = fileKey
	} else if fileKey != "" && sess.Meta.Key != fileKey {
		warn(0, "metadata key %q differs from the key of the file name %q; using the metadata key", sess.Meta.Key, fileKey)
	}
	if sess.Meta.Metadata == nil {
		sess.Meta.Metadata = map[string]any{}
	}
	return loaded{sess: sess, empty: firstLine == 0}, nil
}

// Load reads the session stored under key. Content problems (torn or invalid
// lines, a missing metadata line, an empty file) are skipped with a warning
// in Session.Warnings and the log, never an error. If there is no file the
// error wraps [os.ErrNotExist]. Load may run concurrently with appends; it
// sees only whole lines.
func (s *Store) Load(key string) (*Session, error) {
	name, err := FileName(key)
	if err != nil {
		return nil, fmt.Errorf("session: load %s: %w", key, err)
	}
	l, err := s.loadPath(filepath.Join(s.dir, name), key, key)
	if err != nil {
		return nil, fmt.Errorf("session: load %s: %w", key, err)
	}
	return l.sess, nil
}

// loadPath parses one file. Only the bytes present when it was opened are
// read (see openSnapshot), after the pending lines of session pendKey.
func (s *Store) loadPath(path, fileKey, pendKey string) (loaded, error) {
	f, size, err := s.openSnapshot(path, pendKey)
	if err != nil {
		return loaded{}, err
	}
	defer s.closeSnapshot(f)
	l, err := parse(io.LimitReader(f, size), path, fileKey, s.maxLine, s.log)
	if err != nil {
		return loaded{}, fmt.Errorf("read %s: %w", path, err)
	}
	return l, nil
}

// openSnapshot opens a session file for reading and returns its size.
// With WriteBehind it first writes the pending lines of session pendKey
// (catchUp; path is that session's file): every read of a session file
// goes through here or scan, which writes every pending line first and
// passes "" for a file whose name does not give its key. The
// open and the size are taken while no append is writing, so a reader that
// reads only that many bytes never sees a concurrent append half-written.
//
// With a descriptor budget (Options.FDs) a reader first takes one of the
// store's reader slots, waiting while every slot is taken (each is held
// for one read of one file); closeSnapshot gives it back.
func (s *Store) openSnapshot(path, pendKey string) (*os.File, int64, error) {
	if pendKey != "" {
		if err := s.catchUp(pendKey); err != nil {
			return nil, 0, err
		}
	}
	if s.readers != nil {
		s.readers <- struct{}{}
	}
	s.ioMu.RLock()
	f, err := os.Open(path)
	var fi fs.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	s.ioMu.RUnlock()
	if err != nil {
		if f != nil {
			s.closeSnapshot(f)
		} else if s.readers != nil {
			<-s.readers
		}
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		s.closeSnapshot(f)
		return nil, 0, fmt.Errorf("read %s: not a regular file", path)
	}
	return f, fi.Size(), nil
}

// closeSnapshot closes a file openSnapshot opened.
func (s *Store) closeSnapshot(f *os.File) {
	f.Close()
	if s.readers != nil {
		<-s.readers
	}
}

// Scan loads every session file in the directory, one at a time, in file
// name order, and calls fn for each; an empty file is skipped with a
// warning. The key is the metadata line's, or the decoded file name's if the
// file has none (a file with a hashed name and no metadata line is skipped
// with a warning). Content problems are warnings, as in Load; a file that
// cannot be read, or an error from fn, stops the scan and is returned.
func (s *Store) Scan(fn func(*Session) error) error {
	return s.scan(func(path, fileKey, pendKey string) (loaded, error) { return s.loadPath(path, fileKey, pendKey) }, fn)
}

// scan runs fn on every session file, read by read.
func (s *Store) scan(read func(path, fileKey, pendKey string) (loaded, error), fn func(*Session) error) error {
	if err := s.catchUp(""); err != nil { // files that exist only as pending lines, and the rest in one run
		return fmt.Errorf("session: scan: %w", err)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("session: scan: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, fileExt) {
			continue
		}
		path := filepath.Join(s.dir, name)
		fileKey, err := KeyFromFileName(name)
		hashed := errors.Is(err, ErrHashedName)
		if err != nil && !hashed {
			fileKey = strings.TrimSuffix(name, fileExt)
			s.log.Warn("session: file name is not an encoded key; using it as the key if the file has no metadata", "file", path, "err", err)
		}
		pendKey := fileKey // lines appended since the scan began
		if err != nil {
			pendKey = "" // hashed or not a key: those were written at its start
		}
		l, err := read(path, fileKey, pendKey)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since ReadDir
		}
		if err != nil {
			return fmt.Errorf("session: scan: %w", err)
		}
		if l.empty {
			continue // warned by parse
		}
		if hashed {
			if l.sess.Meta.Key == "" {
				s.log.Warn("session: file with a hashed name has no key in its metadata line; skipped", "file", path)
				continue
			}
			if canon, _ := FileName(l.sess.Meta.Key); canon != name {
				s.log.Warn("session: metadata key does not hash to the file name; using the metadata key", "file", path, "key", l.sess.Meta.Key)
			}
		}
		if err := fn(l.sess); err != nil {
			return fmt.Errorf("session: scan %s: %w", path, err)
		}
	}
	return nil
}
