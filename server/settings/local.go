package settings

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"termlink/internal/durable"
)

// LocalStorage is one server's Storage: every channel's record in
// dir/settings.json, written whole, atomically (durable.WriteFile), before
// a change is answered. Its revisions are this process's: a counter
// that grows with every write (the file is read once, at open).
type LocalStorage struct {
	path   string
	noSync bool

	mu   sync.Mutex
	recs map[string]json.RawMessage // channel -> its record (compact JSON)
	revs map[string]uint64
	seq  uint64 // the last revision given
}

var _ Storage = (*LocalStorage)(nil)

// OpenLocal reads dir/settings.json (none: no documents). A file that
// does not parse (ParseFile) is an error naming the file and what is
// wrong: the operator's settings are not silently dropped.
func OpenLocal(dir string, noSync bool) (*LocalStorage, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	l := &LocalStorage{path: filepath.Join(dir, FileName), noSync: noSync, recs: map[string]json.RawMessage{}, revs: map[string]uint64{}}
	b, err := readBounded(l.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return l, nil
	case err != nil:
		return nil, fmt.Errorf("settings: %w", err)
	}
	if _, err := ParseFile(b); err != nil {
		return nil, fmt.Errorf("settings: %s: %w", l.path, err)
	}
	var raw struct {
		Channels map[string]json.RawMessage `json:"channels"`
	}
	if err := json.Unmarshal(b, &raw); err != nil { // ParseFile took it
		return nil, fmt.Errorf("settings: %s: %w", l.path, err)
	}
	for id, r := range raw.Channels {
		var c bytes.Buffer
		if err := json.Compact(&c, r); err != nil {
			return nil, fmt.Errorf("settings: %s: channels.%s: %w", l.path, id, err)
		}
		l.seq++
		l.recs[id], l.revs[id] = c.Bytes(), l.seq
	}
	return l, nil
}

func readBounded(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFileBytes)
	}
	return b, nil
}

// Follow implements Storage: the records read at open, then Loaded (no
// one else writes the file).
func (l *LocalStorage) Follow(_ context.Context, f Feed) error {
	l.mu.Lock()
	recs, revs := maps.Clone(l.recs), maps.Clone(l.revs)
	l.mu.Unlock()
	for id, r := range recs {
		f.Put(id, r, revs[id])
	}
	f.Loaded()
	return nil
}

// Get implements Storage.
func (l *LocalStorage) Get(_ context.Context, channelID string) ([]byte, uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recs[channelID], l.revs[channelID], nil
}

// Put implements Storage: the whole file written with channelID's new
// record; on a failed write the records stay as they were.
func (l *LocalStorage) Put(_ context.Context, channelID string, value []byte, rev uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.revs[channelID] != rev {
		return 0, ErrConflict
	}
	next := maps.Clone(l.recs)
	next[channelID] = bytes.Clone(value)
	if err := l.write(next); err != nil {
		return 0, err
	}
	l.seq++
	l.recs, l.revs[channelID] = next, l.seq
	return l.seq, nil
}

// write writes every channel's record, indented as an operator reads it.
func (l *LocalStorage) write(recs map[string]json.RawMessage) error {
	b, err := json.Marshal(struct {
		Channels map[string]json.RawMessage `json:"channels"`
	}{recs})
	if err != nil {
		return fmt.Errorf("settings: encoding %s: %w", l.path, err)
	}
	return durable.WriteFile(l.path, func(w *bufio.Writer) error {
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err := w.Write(out.Bytes())
		return err
	}, l.noSync)
}

// Info implements Storage: not shared, no bound past the documents'.
func (l *LocalStorage) Info() StorageInfo { return StorageInfo{} }

// Where implements Storage.
func (l *LocalStorage) Where(channelID string) string {
	return l.path + " (channels." + strconv.Quote(channelID) + ")"
}

// Close implements Storage: nothing held open.
func (l *LocalStorage) Close() error { return nil }
