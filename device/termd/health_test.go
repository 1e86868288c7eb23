package termd

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"termlink/device/health"
	"termlink/link"
)

type fakeHealthClient struct {
	sessions atomic.Int64
	mu       sync.Mutex
	reports  []link.Health
	at       []time.Time
}

func (c *fakeHealthClient) Stats() link.ClientStats {
	return link.ClientStats{Sessions: c.sessions.Load(), HeartbeatRTT: 42 * time.Millisecond}
}

func (c *fakeHealthClient) Report(f link.Frame) error {
	if c.sessions.Load() == 0 {
		return link.ErrNotConnected
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports = append(c.reports, *f.(*link.Health))
	c.at = append(c.at, time.Now())
	return nil
}

func (c *fakeHealthClient) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reports)
}

func (c *fakeHealthClient) sentAt(i int) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[i]
}

func (c *fakeHealthClient) last() link.Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reports[len(c.reports)-1]
}

// The reporter's timing: nothing before a connection, a report at
// connect, a disk going low reported at once but not within 30 s of the
// last, then once a minute, and at once on a reconnect.
func TestHealthReporterTiming(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{"proc/uptime": "100.0 1\n", "proc/loadavg": "0.5 0 0 1/1 1\n", "proc/meminfo": "MemAvailable: 1000 kB\n"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(root, name), []byte(body), 0o644)
	}
	var free atomic.Uint64
	free.Store(50)
	src := health.Sources{Root: root, StateDir: "/state", Statfs: func(string) (uint64, uint64, error) { return free.Load(), 100, nil }}
	boot := health.Boot{LastStop: link.StopPowerLoss, RestartsLastHour: 2}
	synctest.Test(t, func(t *testing.T) {
		c := &fakeHealthClient{}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			runHealth(ctx, c, src, boot, slog.New(slog.NewTextHandler(io.Discard, nil)))
		}()
		time.Sleep(5 * time.Second)
		if n := c.count(); n != 0 {
			t.Fatalf("%d reports before any connection", n)
		}
		c.sessions.Store(1)
		time.Sleep(healthPoll)
		synctest.Wait()
		if n := c.count(); n != 1 {
			t.Fatalf("%d reports after the connect, want 1", n)
		}
		h := c.last()
		if h.LastStop != link.StopPowerLoss || h.RestartsLastHour != 2 || h.DiskFreePercent != 50 || h.HeartbeatRTTMillis != 42 || h.Reconnects != 0 || h.MemAvailable != 1000<<10 {
			t.Fatalf("report %+v", h)
		}
		if _, err := link.Decode(link.MustEncode(&h)); err != nil {
			t.Fatalf("the report does not decode: %v", err)
		}
		sent := c.sentAt(0)
		free.Store(5) // the disk fills
		time.Sleep(25 * time.Second)
		if n := c.count(); n != 1 {
			t.Fatalf("%d reports within 30 s of the last, want 1", n)
		}
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if n := c.count(); n != 2 || c.last().DiskFreePercent != 5 {
			t.Fatalf("%d reports past 30 s with the disk low (last %+v), want 2", n, c.last())
		}
		if d := c.sentAt(1).Sub(sent); d < health.MinInterval || d > health.MinInterval+healthCollect+healthPoll {
			t.Fatalf("the disk-low report came %v after the last", d)
		}
		time.Sleep(health.Interval + healthPoll)
		synctest.Wait()
		if n := c.count(); n != 3 {
			t.Fatalf("%d reports after a quiet minute, want 3", n)
		}
		c.sessions.Store(2) // a reconnect
		time.Sleep(healthPoll)
		synctest.Wait()
		if n := c.count(); n != 4 || c.last().Reconnects != 1 {
			t.Fatalf("%d reports after a reconnect (last %+v), want 4 with reconnects 1", n, c.last())
		}
		cancel()
		<-done
	})
}
