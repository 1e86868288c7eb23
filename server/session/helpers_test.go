package session

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// logBuffer collects log output from any goroutine.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// openTest opens a store in a fresh directory and closes it at the end of
// the test.
func openTest(t testing.TB, opt Options) *Store {
	t.Helper()
	if opt.Logger == nil {
		opt.Logger = quietLogger()
	}
	s, err := Open(filepath.Join(t.TempDir(), "sessions"), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func pathOf(t testing.TB, s *Store, key string) string {
	t.Helper()
	name, err := FileName(key)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(s.Dir(), name)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// rawLines returns the file's lines; a final line without '\n' is included.
func rawLines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func contents(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Content
	}
	return out
}

const metaLine = `{"_type":"metadata","key":"t:k","created_at":"2026-03-01T10:00:00.000000","updated_at":"2026-03-01T10:00:00.000000","metadata":{},"last_consolidated":0}`

func recLine(content string) string {
	return `{"role":"user","content":"` + content + `","timestamp":"2026-03-15T14:30:00.123456"}`
}
