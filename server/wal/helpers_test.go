package wal

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// rec is a replayed record.
type rec struct {
	lsn     LSN
	payload string
}

// quiet discards the log's warnings; logs writes them to a buffer.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// open opens dir and returns the log and what it replayed.
func open(t testing.TB, dir string, opt Options) (*Log, []rec) {
	t.Helper()
	l, recs, err := tryOpen(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, recs
}

func tryOpen(dir string, opt Options) (*Log, []rec, error) {
	if opt.Logger == nil {
		opt.Logger = quiet
	}
	var recs []rec
	l, err := Open(dir, opt, func(lsn LSN, p []byte) error {
		recs = append(recs, rec{lsn, string(p)})
		return nil
	})
	return l, recs, err
}

// appendN appends payloads "<prefix>-<i>" one at a time (one batch each)
// and returns them.
func appendN(t testing.TB, l *Log, prefix string, n int) []rec {
	t.Helper()
	var out []rec
	for i := range n {
		p := fmt.Sprintf("%s-%d", prefix, i)
		lsn, err := l.Append(context.Background(), []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec{lsn, p})
	}
	return out
}

func equalRecs(t testing.TB, got, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("record %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

// segmentFiles lists the segment paths in dir, oldest first.
func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range segs {
		out = append(out, s.path)
	}
	return out
}

// copyDir copies the files of src into a new temporary directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// logBuffer is a logger whose output a test reads.
func logBuffer() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}
