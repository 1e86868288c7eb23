package durable

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	for _, content := range []string{"first", "second"} {
		if err := WriteFile(path, func(w *bufio.Writer) error { _, err := w.WriteString(content); return err }, false); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != content {
			t.Fatalf("content %q, want %q", b, content)
		}
	}
	// A failed write leaves the old content and no temporary file.
	boom := errors.New("boom")
	if err := WriteFile(path, func(w *bufio.Writer) error { _, _ = w.WriteString("half"); return boom }, false); !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "second" {
		t.Fatalf("content after a failed write %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("files left: %v", ents)
	}
}
