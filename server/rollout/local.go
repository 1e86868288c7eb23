package rollout

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"termlink/internal/durable"
)

// LocalStorage is one server's Storage: each rollout in dir/<id>.json,
// replaced atomically (durable.WriteFile) on every write. Its revisions
// and its lease are this process's (the files are read once, at open;
// the lease is always there to take).
type LocalStorage struct {
	dir    string
	noSync bool

	mu       sync.Mutex
	revs     map[string]uint64
	seq      uint64
	holder   string
	leaseRev uint64
}

var _ Storage = (*LocalStorage)(nil)

// OpenLocal makes dir if needed; the rollouts are read by Follow.
func OpenLocal(dir string, noSync bool) (*LocalStorage, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("rollouts: %w", err)
	}
	l := &LocalStorage{dir: dir, noSync: noSync, revs: map[string]uint64{}}
	names, err := filepath.Glob(filepath.Join(dir, "ro-*.json"))
	if err != nil {
		return nil, fmt.Errorf("rollouts: %w", err)
	}
	for _, name := range names {
		l.seq++
		l.revs[strings.TrimSuffix(filepath.Base(name), ".json")] = l.seq
	}
	return l, nil
}

func (l *LocalStorage) path(id string) string { return filepath.Join(l.dir, id+".json") }

// Follow implements Storage: every ro-*.json file of dir, then Loaded
// (no one else writes the files). A file that cannot be read is moved
// aside as <name>.bad, as one the Manager refuses is (Quarantine).
func (l *LocalStorage) Follow(_ context.Context, f Feed) error {
	l.mu.Lock()
	revs := maps.Clone(l.revs)
	l.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(revs)) {
		b, err := readBounded(l.path(id))
		if err != nil {
			l.Quarantine(id)
			continue
		}
		f.Put(id, b, revs[id])
	}
	f.Loaded()
	return nil
}

func readBounded(name string) ([]byte, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxFileBytes)
	}
	return b, nil
}

// Quarantine moves id's file aside as <file>.bad: the Manager refused it.
func (l *LocalStorage) Quarantine(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.revs, id)
	_ = os.Rename(l.path(id), l.path(id)+".bad")
}

// Get implements Storage.
func (l *LocalStorage) Get(_ context.Context, id string) ([]byte, uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rev := l.revs[id]
	if rev == 0 {
		return nil, 0, nil
	}
	b, err := readBounded(l.path(id))
	if err != nil {
		return nil, 0, fmt.Errorf("rollouts: %w", err)
	}
	return b, rev, nil
}

// Put implements Storage: the file replaced; on a failed write the
// revision stays.
func (l *LocalStorage) Put(_ context.Context, id string, value []byte, rev uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.revs[id] != rev {
		return 0, ErrConflict
	}
	if len(value) > maxFileBytes {
		return 0, fmt.Errorf("%w: %s: %d bytes, more than %d", ErrFull, l.path(id), len(value), maxFileBytes)
	}
	if err := durable.WriteFile(l.path(id), func(w *bufio.Writer) error { _, err := w.Write(value); return err }, l.noSync); err != nil {
		return 0, err
	}
	l.seq++
	l.revs[id] = l.seq
	return l.seq, nil
}

// Delete implements Storage.
func (l *LocalStorage) Delete(_ context.Context, id string, rev uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.revs[id] == 0 {
		return nil
	}
	if l.revs[id] != rev {
		return ErrConflict
	}
	if err := os.Remove(l.path(id)); err != nil && !os.IsNotExist(err) {
		return err
	}
	delete(l.revs, id)
	return nil
}

// Lease implements Storage: in this process's memory.
func (l *LocalStorage) Lease(context.Context) (string, uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holder, l.leaseRev, nil
}

// TakeLease implements Storage.
func (l *LocalStorage) TakeLease(_ context.Context, holder string, rev uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leaseRev != rev {
		return 0, ErrConflict
	}
	l.seq++
	l.holder, l.leaseRev = holder, l.seq
	return l.seq, nil
}

// Info implements Storage: not shared.
func (l *LocalStorage) Info() StorageInfo { return StorageInfo{MaxRecordBytes: maxFileBytes} }

// Where implements Storage.
func (l *LocalStorage) Where(id string) string { return l.path(id) }

// Close implements Storage: nothing held open.
func (l *LocalStorage) Close() error { return nil }
