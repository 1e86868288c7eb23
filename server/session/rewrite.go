package session

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// rewrite does one UpdateMetadata on the writer goroutine: it reads the
// file, replaces (or adds) the metadata line, and puts the new file in place
// atomically. Every other non-blank line is kept byte for byte; a torn last
// line gets its newline.
func (s *Store) rewrite(r *request) error {
	wrap := func(err error) error { return fmt.Errorf("session: update metadata %s: %w", r.key, err) }
	name, err := FileName(r.key)
	if err != nil {
		return wrap(err)
	}
	path := filepath.Join(s.dir, name)

	// The append handle would point at the old file after the rename.
	if h, ok := s.files[r.key]; ok {
		if err := s.drop(h); err != nil {
			s.log.Warn("session: closing session file", "file", h.path, "err", err)
		}
	}
	if !s.takeSlot() { // cannot happen: the writer keeps writerKeep descriptors, none pinned
		return wrap(fmt.Errorf("no file descriptor left for session files (%s)", s.fds.Budget()))
	}
	data, err := os.ReadFile(path)
	s.giveSlot()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wrap(err)
	}
	var lines [][]byte
	for _, l := range bytes.Split(data, []byte{'\n'}) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines = append(lines, l)
		}
	}
	now := Now()
	meta, at := findMetadata(lines, s.maxLine)
	if at < 0 {
		meta = Metadata{Key: r.key, CreatedAt: now}
	}
	if meta.Key == "" {
		meta.Key = r.key
	}
	if meta.Metadata == nil {
		meta.Metadata = map[string]any{}
	}
	if r.update != nil {
		if err := callUpdate(r.update, meta.Metadata); err != nil {
			return wrap(err)
		}
	}
	meta.UpdatedAt = now
	out, err := meta.appendJSON(make([]byte, 0, len(data)+256))
	if err != nil {
		return wrap(err)
	}
	if len(out) > s.maxLine {
		return wrap(fmt.Errorf("metadata line is %d bytes, over the %d-byte line limit", len(out), s.maxLine))
	}
	out = append(out, '\n')
	for i, l := range lines {
		if i != at {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	if !s.takeSlot() {
		return wrap(fmt.Errorf("no file descriptor left for session files (%s)", s.fds.Budget()))
	}
	tmp, err := s.writeTemp(out)
	if err != nil {
		s.giveSlot()
		return wrap(fmt.Errorf("rewrite %s: %w", path, err))
	}
	err = s.sync(tmp)
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	tmp.Close()
	s.giveSlot()
	if err != nil {
		os.Remove(tmp.Name())
		return wrap(fmt.Errorf("rewrite %s: %w", path, err))
	}
	if err := s.syncDir(); err != nil {
		return wrap(err)
	}
	return nil
}

// findMetadata finds the metadata line as parse does: the first valid line
// (not longer than maxLine) if it is a metadata record. It returns -1 if
// there is none.
func findMetadata(lines [][]byte, maxLine int) (Metadata, int) {
	for i, l := range lines {
		if len(l) > maxLine {
			continue
		}
		obj, err := decodeObject(l)
		if err != nil {
			continue
		}
		if !isMetadataLine(obj) {
			break
		}
		var m Metadata
		m.fromObject(obj)
		return m, i
	}
	return Metadata{}, -1
}

func callUpdate(fn func(map[string]any), m map[string]any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("metadata update function panicked: %v", p)
		}
	}()
	fn(m)
	return nil
}
