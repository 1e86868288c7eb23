package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/config"
	"termlink/server/session"
	"termlink/server/wal"
)

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
		j, err := openJournal(wdir, wal.Options{NoSync: true}, store, quietLog())
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

// A failed write-ahead log (fsync error) refuses new messages and holds
// the reply; /healthz says unwritable; once the disk works again the log
// is reopened, the reply reaches the device and is recorded once.
func TestReplyWaitsForTheWAL(t *testing.T) {
	testReplyWaits(t, func(opt *Options, failing *atomic.Bool) {
		opt.wal.Sync = func(f *os.File) error {
			if failing.Load() {
				return errors.New("input/output error (injected)")
			}
			return f.Sync()
		}
	})
}

// testReplyWaits runs a reply into a write failure that inject turns on
// with failing: the reply is held (a resend is pending), a new message is
// refused, /healthz says unwritable; once writes work again the reply
// reaches the device, is recorded once, and the refused message is not.
func testReplyWaits(t *testing.T, inject func(opt *Options, failing *atomic.Bool)) {
	var failing atomic.Bool
	runner := newCountingRunner(true)
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	opt := Options{Logger: quietLog(), Runners: map[string]agent.Runner{"echo": runner}}
	inject(&opt, &failing)
	ts := serve(t, cfg, opt)
	c := dial(t, ts.ws, nil)
	c.connect("dev")
	c.send(&link.Message{MessageID: "m-1", Text: "hi"})
	readAs[*link.Ack](c)
	<-runner.started
	failing.Store(true)
	close(runner.gate)
	waitHealth(t, ts, http.StatusServiceUnavailable, "workspace unwritable")
	c.send(&link.Message{MessageID: "m-1", Text: "hi"})
	if ack := readAs[*link.Ack](c); !ack.Duplicate || !ack.Pending {
		t.Fatalf("resend while the log refuses the reply: %+v, want pending", ack)
	}
	c.send(&link.Message{MessageID: "m-2", Text: "refused"})
	if e := readAs[*link.Error](c); e.MessageID != "m-2" {
		t.Fatalf("new message while the log refuses writes: %+v, want an error", e)
	}
	failing.Store(false)
	if m := readAs[*link.Message](c); m.MessageID != "m-1" || m.Text != "You said: hi" {
		t.Fatalf("reply %+v", m)
	}
	waitHealth(t, ts, http.StatusOK, "ok")
	if log := sessionLog(t, ts, "terminal-dev:local:dev"); strings.Count(log, `"role":"assistant"`) != 1 || strings.Contains(log, "m-2") {
		t.Fatalf("session log:\n%s", log)
	}
}
