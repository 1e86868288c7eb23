package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/throttle"
)

// What a stranger's flood of requests makes the server write (issue 36
// rows 3 and 7): a burst and a summary, through the server's one gate,
// never a line or an event per request.

// logByteCounter counts what a logger writes.
type logByteCounter struct {
	mu    sync.Mutex
	n     int
	lines int
	last  string
}

func (c *logByteCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += len(p)
	c.lines += strings.Count(string(p), "\n")
	c.last = string(p)
	return len(p), nil
}

func (c *logByteCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n, c.lines = 0, 0
}

func (c *logByteCounter) get() (bytes, lines int, last string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.lines, c.last
}

// countedLogServer starts a server whose log is counted.
func countedLogServer(t *testing.T, mutate func(*config.Config)) (*testServer, *logByteCounter) {
	t.Helper()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	mutate(cfg)
	logs := &logByteCounter{}
	ts := serve(t, cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	return ts, logs
}

// markBeforeFlood records an event before a flood; it must survive it.
func markBeforeFlood(ts *testServer) {
	ts.rt.Channels["terminal-dev"].Events.Add(events.Event{Event: "before_the_flood", Detail: "recorded before the flood"})
}

func markSurvived(ts *testServer) bool {
	for _, e := range ts.rt.Channels["terminal-dev"].Events.Recent(-1) {
		if e.Event == "before_the_flood" {
			return true
		}
	}
	return false
}

func channelEventCount(ts *testServer, name string) int {
	n := 0
	for _, e := range ts.rt.Channels["terminal-dev"].Events.Recent(-1) {
		if e.Event == name {
			n++
		}
	}
	return n
}

// gateBound is how many lines or events of a kind the server's gate lets
// through in a flood that took since start: burst at once, and burst
// more per interval (the bound grows with the time the flood took, not
// with its size).
func gateBound(burst int, start time.Time) int {
	return int(float64(burst) * (1 + float64(time.Since(start))/float64(throttle.DefaultEvery)))
}

// gateLineBound is gateBound for log lines: besides what the gate lets
// through, one summary line per interval begun since start (a flood
// that outlasts a minute on a busy machine writes two: stress run 24,
// 24 lines against a bound of 23 that left the summaries out).
func gateLineBound(burst int, start time.Time) int {
	return gateBound(burst, start) + 1 + int(time.Since(start)/throttle.DefaultEvery)
}

// A flood's lines are at most 1 KB each (a path is cut to 256 bytes).
const floodLineBytes = 1 << 10

// 2,000 refused downloads with 8 KB paths: a few lines and events (the
// gate's burst), the path cut in each, then one summary line; the event
// recorded before the flood is still in the channel's events.
func TestDownloadRefusalFloodIsGated(t *testing.T) {
	t.Parallel()
	tok := config.Tokens{ByPeer: map[string]string{"pi-1": "tok-pi-1"}}
	ts, logs := countedLogServer(t, channelTokens(tok, false))
	markBeforeFlood(ts)
	long := strings.Repeat("x", 8<<10)
	url := ts.http.URL + "/api/channels/terminal-dev/releases/v2.0.0/linux/" + long + "/binary"
	logs.reset()
	start := time.Now()
	client := ts.http.Client()
	for i := range 2000 {
		req, _ := http.NewRequest("GET", url, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	n, lines, _ := logs.get()
	bound := gateBound(throttle.DefaultBurst, start) // one network
	if lineBound := gateLineBound(throttle.DefaultBurst, start); lines > lineBound || n > lineBound*floodLineBytes {
		t.Errorf("2,000 refused downloads logged %d bytes in %d lines; want at most %d lines of at most %d bytes", n, lines, lineBound, floodLineBytes)
	}
	if ev := channelEventCount(ts, events.ReleaseDownloadRefused); ev == 0 || ev > bound {
		t.Errorf("%d %s events, want the gate's burst", ev, events.ReleaseDownloadRefused)
	}
	for _, e := range ts.rt.Channels["terminal-dev"].Events.Recent(-1) {
		if len(e.Detail) > 512 {
			t.Errorf("an event's detail is %d bytes: the path was not cut", len(e.Detail))
		}
	}
	if !markSurvived(ts) {
		t.Error("the event recorded before the flood was pushed out of the channel's events")
	}
	ts.rt.Outside.Flush()
	_, after, last := logs.get()
	if after <= lines || !strings.Contains(last, events.ReleaseDownloadRefused) || !strings.Contains(last, "summary") {
		t.Errorf("no summary of what was held back; last line %q", last)
	}
	// The answer to an 8 KB channel id repeats a bounded part of it.
	resp, err := client.Get(ts.http.URL + "/api/channels/" + long + "/releases/v2.0.0/linux/amd64/binary")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || len(body) > 300 {
		t.Errorf("an 8 KB channel id: %d, a %d-byte answer", resp.StatusCode, len(body))
	}
	t.Logf("2,000 refused downloads with 8 KB paths: %d bytes of log in %d lines (and a summary)", n, lines)
}

// 2,000 pairing codes asked for from 2,000 networks (each its own /24:
// the server trusts no X-Forwarded-For, so the remote address is set on
// the request): every code is issued, the log holds a few lines and a
// summary, the event recorded before the flood survives.
func TestPairingCodeFloodIsGated(t *testing.T) {
	t.Parallel()
	ts, logs := countedLogServer(t, channelTokens(config.Tokens{}, true))
	markBeforeFlood(ts)
	logs.reset()
	start := time.Now()
	h := ts.Handler()
	for i := range 2000 {
		req := httptest.NewRequest("POST", "/api/channels/terminal-dev/enroll", strings.NewReader(`{"device_name": "flood"}`))
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = fmt.Sprintf("10.%d.%d.7:40000", i/256, i%256)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("code %d from %s: %d %s", i, req.RemoteAddr, w.Code, w.Body)
		}
	}
	n, lines, _ := logs.get()
	bound := gateBound(throttle.DefaultKindBurst, start) // every network
	// The line when the codes' cap is reached (once a minute) besides.
	if lineBound := gateLineBound(throttle.DefaultKindBurst, start) + 1; lines > lineBound || n > lineBound*floodLineBytes {
		t.Errorf("2,000 pairing codes logged %d bytes in %d lines; want at most %d lines of at most %d bytes", n, lines, lineBound, floodLineBytes)
	}
	if ev := channelEventCount(ts, "enrollment_requested"); ev == 0 || ev > bound {
		t.Errorf("%d enrollment_requested events, want the gate's burst", ev)
	}
	if !markSurvived(ts) {
		t.Error("the event recorded before the flood was pushed out of the channel's events")
	}
	ts.rt.Outside.Flush()
	if _, _, last := logs.get(); !strings.Contains(last, "enrollment_requested") || !strings.Contains(last, "summary") {
		t.Errorf("no summary of what was held back; last line %q", last)
	}
	t.Logf("2,000 pairing codes from 2,000 networks: %d bytes of log in %d lines (and a summary)", n, lines)
}
