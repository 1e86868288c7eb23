package local

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"termlink/server/session"
	"termlink/server/wal"
	"testing"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A crash that loses session-file writes the write-ahead log holds: the
// next open writes back exactly what each file lacks (a missing file, lost
// last lines, a torn last line), nothing twice, in order; a clean close
// releases the log, so the open after it replays nothing.
func TestJournalReplayFillsSessionFiles(t *testing.T) {
	dir := t.TempDir()
	sdir, wdir := filepath.Join(dir, "sessions"), filepath.Join(dir, "wal")
	open := func() (*session.Store, *journal) {
		t.Helper()
		store, err := session.Open(sdir, session.Options{NoSync: true, SyncLater: true, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		j, err := openJournal(wdir, wal.Options{NoSync: true}, store, quietLog(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return store, j
	}
	store, j := open()
	close(j.stop) // no checkpoint: everything stays in the log
	<-j.done
	const sessions, messages = 4, 3
	key := func(i int) string { return fmt.Sprintf("terminal-dev:local:dev-%d", i) }
	for m := range messages {
		for i := range sessions {
			id := fmt.Sprintf("m-%d", m)
			if err := j.append(context.Background(), key(i), []session.Record{{Role: "user", Content: "hi", MessageID: id}}); err != nil {
				t.Fatal(err)
			}
			if err := j.append(context.Background(), key(i), []session.Record{{Role: "assistant", Content: "You said: hi", MessageID: id}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := make([]string, sessions)
	path := func(i int) string {
		name, _ := session.FileName(key(i))
		return filepath.Join(sdir, name)
	}
	for i := range sessions {
		b, err := os.ReadFile(path(i))
		if err != nil {
			t.Fatal(err)
		}
		want[i] = string(b)
	}
	// The crash: the log is left as it is, the session files lose writes.
	if err := j.wl.Close(); err != nil {
		t.Fatal(err)
	}
	store.Close()
	lines := func(s string) []string { return strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n") }
	os.Remove(path(0))
	l1 := lines(want[1])
	os.WriteFile(path(1), []byte(strings.Join(l1[:len(l1)-2], "")), 0o600)
	l2 := lines(want[2])
	os.WriteFile(path(2), []byte(strings.Join(l2[:len(l2)-1], "")+l2[len(l2)-1][:10]), 0o600)

	store, j = open()
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	store.Close()
	for i := range sessions {
		b, err := os.ReadFile(path(i))
		if err != nil {
			t.Fatal(err)
		}
		got := lines(string(b))
		for _, role := range []string{"user", "assistant"} {
			for m := range messages {
				needle := fmt.Sprintf(`"role":%q,"content":`, role)
				n := 0
				for _, l := range got {
					if strings.Contains(l, needle) && strings.Contains(l, fmt.Sprintf(`"message_id":"m-%d"`, m)) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("session %d: %d %s records of m-%d, want 1:\n%s", i, n, role, m, b)
				}
			}
		}
		if i == 3 && string(b) != want[3] {
			t.Errorf("session 3 was whole and changed:\n%s\nwant\n%s", b, want[3])
		}
	}
	// Released: a further open writes nothing.
	before, _ := os.ReadFile(path(1))
	store, j = open()
	j.close()
	store.Close()
	if after, _ := os.ReadFile(path(1)); string(after) != string(before) {
		t.Errorf("open after a clean close changed the file:\n%s\nwas\n%s", after, before)
	}
}

// An append (the write-ahead log, then the session store's pending
// lines) reuses its encoding buffer: at most the log's batch (its struct
// and done channel: one batch per append here, as nothing else appends)
// is allocated per append once the session's buffers have grown.
func TestJournalAppendAllocs(t *testing.T) {
	dir := t.TempDir()
	store, err := session.Open(filepath.Join(dir, "sessions"), session.Options{NoSync: true, SyncLater: true, WriteBehind: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	j, err := openJournal(filepath.Join(dir, "wal"), wal.Options{NoSync: true}, store, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	const key = "terminal-dev:local:allocs"
	recs := []session.Record{{Role: "user", Content: "hello", MessageID: "m1", RunID: "run-1", Timestamp: "2026-01-02T03:04:05.000000"}}
	for range 200 { // the pending buffer and the log's batch buffers grow
		if err := j.append(context.Background(), key, recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Sync(); err != nil { // the pending buffer back to the free list
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(50, func() {
		if err := j.append(context.Background(), key, recs); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("%.1f allocations per append, want at most 2 (the log's batch)", allocs)
	}
}
