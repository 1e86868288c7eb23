package server

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/config"
)

// A failed write-ahead log (fsync error) refuses new messages and holds
// the reply; /healthz says unwritable; once the disk works again the log
// is reopened, the reply reaches the device and is recorded once.
func TestReplyWaitsForTheWAL(t *testing.T) {
	t.Parallel()
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
