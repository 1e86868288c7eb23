package server

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/throttle"
)

// lockedLog is a log the server writes and the test reads.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines are the log's lines holding every one of subs.
func (l *lockedLog) lines(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// Issue 40 row 6: the operator's log says when a device connects and
// leaves (INFO, with its peer id, remote and the reason it left), and a
// device that reconnects in a loop writes a burst of those lines, not
// one per connection (the one throttle rule, per peer id).
func TestConnectsAndDisconnectsLogged(t *testing.T) {
	t.Parallel()
	var log lockedLog
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	ts := serve(t, cfg, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})

	c := dial(t, ts.ws, nil)
	c.connect("kiosk-1")
	testwait.Until(t, "kiosk-1's connect logged", func() bool {
		return len(log.lines("level=INFO", `msg="device connected"`, "peer_id=kiosk-1", "remote=127.0.0.1")) == 1
	})
	_ = c.ws.Close()
	testwait.Until(t, "kiosk-1's disconnect logged with a reason", func() bool {
		return len(log.lines("level=INFO", `msg="device disconnected"`, "peer_id=kiosk-1", "reason=")) == 1
	})

	// A device reconnecting in a loop.
	const loops = 3 * throttle.DefaultBurst
	for range loops {
		c := dial(t, ts.ws, nil)
		c.connect("looper")
		_ = c.ws.Close()
	}
	testwait.Until(t, "the looper's last disconnect seen by the server", func() bool { return ts.devicesOnline() == 0 })
	if n := len(log.lines(`msg="device connected"`, "peer_id=looper")); n == 0 || n > throttle.DefaultBurst {
		t.Errorf("a device that connected %d times: %d connect lines, want 1-%d (a burst, then held back)", loops, n, throttle.DefaultBurst)
	}
	if n := len(log.lines(`msg="device disconnected"`, "peer_id=looper")); n == 0 || n > throttle.DefaultBurst {
		t.Errorf("a device that left %d times: %d disconnect lines, want 1-%d", loops, n, throttle.DefaultBurst)
	}
}
