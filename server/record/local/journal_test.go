package local

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
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

// openTestJournal opens a journal (no fsync) over a write-behind session
// store in a temporary directory; both close with the test.
func openTestJournal(t *testing.T) (*journal, *session.Store) {
	t.Helper()
	dir := t.TempDir()
	store, err := session.Open(filepath.Join(dir, "sessions"), session.Options{NoSync: true, SyncLater: true, WriteBehind: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	j, err := openJournal(filepath.Join(dir, "wal"), wal.Options{NoSync: true}, store, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.close() })
	return j, store
}

// An append (the write-ahead log, then the session store's pending
// lines) reuses its encoding buffer: at most the log's batch (its struct
// and done channel: one batch per append here, as nothing else appends)
// is allocated per append once the session's buffers have grown.
func TestJournalAppendAllocs(t *testing.T) {
	j, store := openTestJournal(t)
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

// The floor the checkpoint releases below is that of the oldest append
// in flight, whatever order appends end in: checked against a map of
// the appends in flight (what the journal kept before) over appends that
// begin and end out of order, the log's Next moving between them.
func TestJournalFloorIsOldestInFlight(t *testing.T) {
	j, _ := openTestJournal(t)
	model := map[uint64]wal.LSN{}
	var ids []uint64
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(step int) {
		t.Helper()
		j.fmu.Lock()
		got, ok := j.floor()
		j.fmu.Unlock()
		var want wal.LSN
		for _, f := range model {
			if want == 0 || f < want {
				want = f
			}
		}
		if ok != (len(model) > 0) || ok && got != want {
			t.Fatalf("step %d: floor %d (%v), want %d with %d in flight", step, got, ok, want, len(model))
		}
	}
	for step := range 5000 {
		switch {
		case rng.IntN(3) == 0: // the log moves on
			if _, err := j.wl.Append(context.Background(), []byte("k\n{}\n")); err != nil {
				t.Fatal(err)
			}
		case len(ids) < 600 && rng.IntN(2) == 0:
			next := j.wl.Next()
			id := j.begin()
			if _, dup := model[id]; dup {
				t.Fatalf("step %d: id %d given twice", step, id)
			}
			model[id] = next
			ids = append(ids, id)
		case len(ids) > 0:
			i := rng.IntN(len(ids))
			j.end(ids[i])
			delete(model, ids[i])
			ids = append(ids[:i], ids[i+1:]...)
		}
		check(step)
	}
	for _, id := range ids {
		j.end(id)
		delete(model, id)
	}
	check(-1)
	// 300 ended ahead of one still in flight: the slice is compacted and
	// the one left keeps its floor and its id.
	var first []uint64
	for range 300 {
		first = append(first, j.begin())
	}
	if _, err := j.wl.Append(context.Background(), []byte("k\n{}\n")); err != nil {
		t.Fatal(err)
	}
	want := j.wl.Next()
	last := j.begin()
	for _, id := range first {
		j.end(id)
	}
	j.fmu.Lock()
	got, ok := j.floor()
	n, live := len(j.flights), len(j.flights)-j.off
	j.fmu.Unlock()
	if !ok || got != want || live != 1 || n >= 300 {
		t.Fatalf("after 300 ended ahead of one: floor %d (%v), %d in flight of %d kept, want %d, 1 of fewer than 300 (compacted)",
			got, ok, live, n, want)
	}
	j.end(last)
	model = map[uint64]wal.LSN{}
	check(-2)
}
