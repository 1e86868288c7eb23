package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"termlink/server/session"
	"termlink/server/wal"
)

// With the session files written behind: a checkpoint that cannot write
// them fails, /healthz says unwritable and the log keeps the records
// (until a checkpoint succeeds); a crash then loses the lines held in
// memory, and the next open replays them from the log: every record
// once, in order.
func TestJournalWriteBehindCheckpointFailureAndCrash(t *testing.T) {
	dir := t.TempDir()
	sdir, wdir := filepath.Join(dir, "sessions"), filepath.Join(dir, "wal")
	var failing atomic.Bool
	open := func() (*session.Store, *journal) {
		t.Helper()
		store, err := session.Open(sdir, session.Options{NoSync: true, SyncLater: true, WriteBehind: true, Logger: quietLog(),
			FailWrite: func(string) error {
				if failing.Load() {
					return errors.New("no space left on device (injected)")
				}
				return nil
			}})
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
	close(j.stop) // checkpoints by hand
	<-j.done
	s := &Store{journal: j}
	const sessions = 3
	key := func(i int) string { return fmt.Sprintf("terminal-dev:local:dev-%d", i) }
	path := func(i int) string {
		name, _ := session.FileName(key(i))
		return filepath.Join(sdir, name)
	}
	appendAll := func(m int) {
		t.Helper()
		for i := range sessions {
			id := fmt.Sprintf("m-%d", m)
			for _, role := range []string{"user", "assistant"} {
				if err := j.append(context.Background(), key(i), []session.Record{{Role: role, Content: id, MessageID: id}}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	ids := func(i int) string {
		t.Helper()
		data, err := os.ReadFile(path(i))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(data), "\n") {
			if r, err := session.DecodeRecords([]byte(l + "\n")); err == nil && len(r) == 1 && r[0].MessageID != "" {
				out = append(out, r[0].Role[:1]+r[0].MessageID)
			}
		}
		return strings.Join(out, ",")
	}

	appendAll(0)
	if got := ids(0); got != "" {
		t.Fatalf("appends wrote the file before a checkpoint: %s", got)
	}
	if err := j.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := ids(0); got != "um-0,am-0" {
		t.Fatalf("after a checkpoint: %s", got)
	}
	appendAll(1)
	failing.Store(true)
	if err := j.checkpoint(); err == nil {
		t.Fatal("a checkpoint that cannot write the session files succeeded")
	}
	if ok, reason := s.Health(); ok || !strings.Contains(reason, "workspace unwritable") || !strings.Contains(reason, "injected") {
		t.Fatalf("health after a failed checkpoint: %v %q", ok, reason)
	}
	failing.Store(false)
	if err := j.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if ok, reason := s.Health(); !ok {
		t.Fatalf("health after a checkpoint succeeded again: %q", reason)
	}
	if got := ids(1); got != "um-0,am-0,um-1,am-1" {
		t.Fatalf("after the retried checkpoint: %s", got)
	}
	appendAll(2)
	appendAll(3)
	failing.Store(true)
	if err := j.checkpoint(); err == nil {
		t.Fatal("a checkpoint that cannot write the session files succeeded")
	}
	// The crash: the log is left as it is, the lines in memory are lost.
	if err := j.wl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err == nil {
		t.Fatal("Close wrote the pending lines through the failing disk")
	}
	for i := range sessions {
		if got := ids(i); got != "um-0,am-0,um-1,am-1" {
			t.Fatalf("session %d after the crash: %s", i, got)
		}
	}
	failing.Store(false)
	store, j = open()
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range sessions {
		if got, want := ids(i), "um-0,am-0,um-1,am-1,um-2,am-2,um-3,am-3"; got != want {
			t.Errorf("session %d after the replay: %s, want %s", i, got, want)
		}
	}
}
