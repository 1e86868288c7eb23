package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/record"
	"termlink/server/record/local"
	"termlink/server/runtime"
	"termlink/server/session"
	"termlink/server/wschannel"
)

// readBusy reads the answer to a message refused by a bound: an error
// frame naming the bound, and no ack.
func (c *client) readBusy(messageID, bound string) {
	c.t.Helper()
	f := c.read()
	e, ok := f.(*link.Error)
	if !ok {
		c.t.Fatalf("message %s past %s: got %s frame %+v, want an error frame and no ack", messageID, bound, f.FrameType(), f)
	}
	if e.MessageID != messageID || !strings.Contains(e.Error, bound) || e.Code != link.CodeBusy {
		c.t.Fatalf("message %s past %s: error %+v", messageID, bound, e)
	}
}

func sessionLog(t *testing.T, ts *testServer, key string) string {
	t.Helper()
	flushSessions(t, ts)
	return sessionFile(t, ts, key)
}

// flushSessions writes the session lines the server holds in memory
// (its session files are written behind) to the files, so a test can
// read them directly.
func flushSessions(t *testing.T, ts *testServer) {
	t.Helper()
	if err := ts.rt.Sessions.Sync(); err != nil {
		t.Fatal(err)
	}
}

// sessionFile is the session file of key as it is on disk now.
func sessionFile(t *testing.T, ts *testServer, key string) string {
	t.Helper()
	name, err := session.FileName(key)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(ts.cfg.Workspace, "sessions", name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(data)
}

// setSessionBound sets maxWaitingPerSession of channel terminal-dev.
func setSessionBound(c *config.Config, n int) {
	ch := c.Channels["terminal-dev"]
	ch.Config.MaxWaitingPerSession = n
	c.Channels["terminal-dev"] = ch
}

// shortHolds makes channel terminal-dev hold a message a full bound
// refused for 1 s (half its heartbeat) before it answers busy.
func shortHolds(c *config.Config) { setHeartbeat(c, 2) }

// setHeartbeat sets heartbeatSeconds of channel terminal-dev.
func setHeartbeat(c *config.Config, seconds int) {
	ch := c.Channels["terminal-dev"]
	ch.Config.HeartbeatSeconds = seconds
	c.Channels["terminal-dev"] = ch
}

func (ts *testServer) waiting(t *testing.T) int {
	t.Helper()
	var st struct {
		RunsWaiting int `json:"runs_waiting"`
	}
	getJSON(t, ts.http.URL+"/api/status", &st)
	return st.RunsWaiting
}

// A session with maxWaitingPerSession messages waiting refuses the next
// one (once its connection's hold runs out) before logging or acking it; a duplicate is still answered; once the
// queue drains the refused message is taken, and the count is back to 0.
func TestSessionQueueBound(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts := startServer(t, func(c *config.Config) { setSessionBound(c, 3); shortHolds(c) }, runner)
	c := dial(t, ts.ws, nil)
	c.connect("dev")
	for i := range 4 { // m-0 runs, m-1..m-3 wait
		c.send(&link.Message{MessageID: fmt.Sprintf("m-%d", i), Text: "hi"})
		readAs[*link.Ack](c)
		if i == 0 {
			<-runner.started
		}
	}
	c.send(&link.Message{MessageID: "m-4", Text: "one too many"})
	c.readBusy("m-4", "maxWaitingPerSession")
	if log := sessionLog(t, ts, "terminal-dev:local:dev"); strings.Contains(log, `"m-4"`) {
		t.Fatalf("refused message m-4 is in the session log:\n%s", log)
	}
	c.send(&link.Message{MessageID: "m-2", Text: "hi"}) // a resend while busy
	if ack := readAs[*link.Ack](c); !ack.Duplicate || !ack.Pending {
		t.Fatalf("duplicate while busy: %+v, want duplicate pending", ack)
	}
	if n := ts.waiting(t); n != 3 {
		t.Fatalf("runs_waiting %d, want 3", n)
	}
	close(runner.gate)
	for range 4 {
		readAs[*link.Message](c)
	}
	c.send(&link.Message{MessageID: "m-4", Text: "one too many"})
	readAs[*link.Ack](c)
	readAs[*link.Message](c)
	if n := ts.waiting(t); n != 0 {
		t.Fatalf("runs_waiting %d after the queue drained, want 0", n)
	}
}

// The server-wide bound refuses a message of any session once
// maxWaitingRuns are waiting.
func TestServerWaitingBound(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts := startServer(t, func(c *config.Config) { c.MaxWaitingRuns = 2; shortHolds(c) }, runner)
	a := dial(t, ts.ws, nil)
	a.connect("a")
	b := dial(t, ts.ws, nil)
	b.connect("b")
	a.send(&link.Message{MessageID: "a-0", Text: "runs"})
	readAs[*link.Ack](a)
	<-runner.started
	a.send(&link.Message{MessageID: "a-1", Text: "waits"})
	readAs[*link.Ack](a)
	b.send(&link.Message{MessageID: "b-0", Text: "runs"}) // another session: runs at once
	readAs[*link.Ack](b)
	<-runner.started
	b.send(&link.Message{MessageID: "b-1", Text: "waits"})
	readAs[*link.Ack](b)
	c := dial(t, ts.ws, nil)
	c.connect("c")
	c.send(&link.Message{MessageID: "c-0", Text: "refused"})
	c.readBusy("c-0", "maxWaitingRuns")
	close(runner.gate)
	readAs[*link.Message](a)
	readAs[*link.Message](b)
	c.send(&link.Message{MessageID: "c-0", Text: "taken now"})
	readAs[*link.Ack](c)
	if m := readAs[*link.Message](c); m.Text != "You said: taken now" {
		t.Fatalf("reply %+v", m)
	}
}

// Messages injected into a running turn are running, not waiting: they do
// not hold places of the session's bound.
func TestInjectedMessagesDoNotCountAsWaiting(t *testing.T) {
	t.Parallel()
	runner := &injectingRunner{started: make(chan struct{}, 4), gate: make(chan struct{})}
	ts := startServer(t, func(c *config.Config) { setSessionBound(c, 1) }, runner)
	runner.releaseOnCleanup(t)
	c := dial(t, ts.ws, nil)
	c.connect("dev")
	c.send(&link.Message{MessageID: "a", Text: "first"})
	readAs[*link.Ack](c)
	<-runner.started
	for _, id := range []string{"b", "c", "d"} {
		c.send(&link.Message{MessageID: id, Text: id})
		if ack := readAs[*link.Ack](c); ack.MessageID != id {
			t.Fatalf("ack %+v", ack)
		}
		// The next offer waits for this one to settle; wait for it.
		deadline := time.Now().Add(10 * time.Second)
		for ts.waiting(t) != 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if n := ts.waiting(t); n != 0 {
		t.Fatalf("runs_waiting %d with every message injected, want 0", n)
	}
	runner.release()
	for range 4 {
		readAs[*link.Message](c)
	}
}

// Dedupe is bounded by dedupeCacheBytes: idle sessions are dropped from
// memory and reloaded from the session log when their device resends, and
// the resend still gets the cached reply.
func TestDedupeBoundedAndReloaded(t *testing.T) {
	t.Parallel()
	const budget = 64 << 10
	ts := startServer(t, func(c *config.Config) { c.DedupeCacheBytes = budget }, nil)
	text := strings.Repeat("x", 8000)
	for i := range 30 {
		c := dial(t, ts.ws, nil)
		c.connect(fmt.Sprintf("dev-%d", i))
		c.send(&link.Message{MessageID: "m-1", Text: text})
		readAs[*link.Ack](c)
		readAs[*link.Message](c)
		c.ws.Close()
	}
	st := ts.rt.Records.Store.(*local.Store).DedupeStats()
	if st.Bytes > budget+20000 || st.Evictions == 0 {
		t.Fatalf("dedupe after 30 sessions of 8 kB replies: %+v, want at most ~%d bytes and evictions", st, budget)
	}
	c := dial(t, ts.ws, nil)
	c.connect("dev-0")
	c.send(&link.Message{MessageID: "m-1", Text: text})
	ack := readAs[*link.Ack](c)
	if !ack.Duplicate || ack.Reply == nil || ack.Reply.Text != "You said: "+text {
		t.Fatalf("resend to an evicted session: duplicate=%v reply=%v, want the cached reply", ack.Duplicate, ack.Reply != nil)
	}
	if after := ts.rt.Records.Store.(*local.Store).DedupeStats(); after.Reloads <= st.Reloads {
		t.Fatalf("reloads %d -> %d: the evicted session was not read back", st.Reloads, after.Reloads)
	}
}

// Ids that pass validation but whose session key is too long for a plain
// file name (finding 8) connect, get answers and keep dedupe across a
// restart.
func TestLongIdsCanSend(t *testing.T) {
	t.Parallel()
	workspace := t.TempDir()
	cases := []struct{ peer, thread string }{
		{"a" + strings.Repeat("@", 100), ""},
		{strings.Repeat("p", 128), strings.Repeat("t", 128)},
	}
	var replies []*link.Message
	for round := range 2 {
		ts := startServer(t, func(c *config.Config) { c.Workspace = workspace }, nil)
		for i, tc := range cases {
			c := dial(t, ts.ws, nil)
			c.connect(tc.peer)
			c.send(&link.Message{MessageID: "m-1", ThreadID: tc.thread, Text: "long ids"})
			ack := readAs[*link.Ack](c)
			if round == 0 {
				if ack.Duplicate {
					t.Fatalf("case %d: first send acked as duplicate", i)
				}
				replies = append(replies, readAs[*link.Message](c))
				continue
			}
			if !ack.Duplicate || ack.Reply == nil || *ack.Reply != *replies[i] {
				t.Fatalf("case %d after restart: %+v, want duplicate with reply %+v", i, ack, replies[i])
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := ts.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}

// A message whose run started and was cut short is run again once, and the
// log says so; found unanswered a second time (the re-run was cut short
// too), it is answered with an error instead of a third run.
func TestInterruptedRunRunsAgainOnce(t *testing.T) {
	t.Parallel()
	workspace := t.TempDir()
	const key = "terminal-dev:local:dev"
	store, err := session.Open(filepath.Join(workspace, "sessions"), session.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Append(context.Background(), key, session.Record{Role: "user", Content: "cut short", MessageID: "m-1", RunID: "run-1"},
		session.Record{Role: "system", MessageID: "m-1", RunID: "run-1", Extra: map[string]any{"event": record.EventStarted}}); err != nil {
		t.Fatal(err)
	}
	store.Close()
	cfg := config.Default()
	cfg.Workspace = workspace
	slow := agent.Echo{Delay: time.Hour} // every run is cut short by the stop
	newServer := func() *Server {
		s, err := New(cfg, Options{Logger: quietLog(), Runners: map[string]agent.Runner{"echo": slow}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	logText := func() string {
		data, _ := os.ReadFile(filepath.Join(workspace, "sessions", key+".jsonl"))
		return string(data)
	}
	// First start, stopped before the re-run begins: m-1 never ran in this
	// life, so nothing counts against it.
	s := newServer()
	if len(s.recovered) != 1 || s.recovered[0].MessageID != "m-1" {
		t.Fatalf("first start recovered %+v, want m-1", s.recovered)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logText(), `"event":"run_interrupted"`) {
		t.Fatalf("a message that never started is recorded as re-run:\n%s", logText())
	}
	// Second start: the re-run starts (and is recorded), then a hard stop
	// cuts it short.
	s = newServer()
	if len(s.recovered) != 1 {
		t.Fatalf("second start recovered %+v, want m-1 again", s.recovered)
	}
	s.Start()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logText(), `"event":"run_interrupted"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the re-run's start is not recorded:\n%s", logText())
		}
		time.Sleep(10 * time.Millisecond)
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(expired); err != nil {
		t.Fatal(err)
	}
	// Third start: not run a third time, answered with an error.
	s = newServer()
	if len(s.recovered) != 0 {
		t.Fatalf("second start re-runs %+v, want none", s.recovered)
	}
	s.Start()
	var got runtime.AcceptResult
	in := bus.Inbound{ChannelID: "terminal-dev", AccountID: "local", PeerID: "dev", SessionKey: key, MessageID: "m-1", Text: "cut short"}
	if err := s.rt.AcceptInbound(context.Background(), in, func(r runtime.AcceptResult) { got = r }); err != nil {
		t.Fatal(err)
	}
	if !got.Duplicate || got.Reply == nil || got.Reply.FinishReason != link.FinishError || !strings.Contains(got.Reply.Text, "interrupted twice") {
		t.Fatalf("resend after two interruptions: %+v", got)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logText(), `"role":"assistant"`); n != 1 {
		t.Fatalf("%d assistant records, want the one error reply:\n%s", n, logText())
	}
}

// A session file the disk refuses (injected): the reply is durable in
// the write-ahead log, so it reaches the device (the session files are
// written behind, at the checkpoint); the checkpoint cannot write the
// file, so /healthz says the workspace is unwritable and the log keeps
// the records; once the disk works again the file gets the reply, once,
// and /healthz is ok.
func TestSessionFileFailureKeepsTheWAL(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	runner := newCountingRunner(true)
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	opt := Options{Logger: quietLog(), Runners: map[string]agent.Runner{"echo": runner}}
	opt.session.FailWrite = func(string) error {
		if failing.Load() {
			return errors.New("no space left on device (injected)")
		}
		return nil
	}
	ts := serve(t, cfg, opt)
	c := dial(t, ts.ws, nil)
	c.connect("dev")
	c.send(&link.Message{MessageID: "m-1", Text: "hi"})
	readAs[*link.Ack](c)
	<-runner.started
	failing.Store(true)
	close(runner.gate)
	if m := readAs[*link.Message](c); m.MessageID != "m-1" || m.Text != "You said: hi" {
		t.Fatalf("reply %+v", m)
	}
	waitHealth(t, ts, http.StatusServiceUnavailable, "workspace unwritable")
	if log := sessionFile(t, ts, "terminal-dev:local:dev"); strings.Contains(log, `"role":"assistant"`) {
		t.Fatalf("the reply was written through the failing disk:\n%s", log)
	}
	failing.Store(false)
	waitHealth(t, ts, http.StatusOK, "ok")
	if log := sessionLog(t, ts, "terminal-dev:local:dev"); strings.Count(log, `"role":"assistant"`) != 1 {
		t.Fatalf("session log:\n%s", log)
	}
}

func waitHealth(t *testing.T, ts *testServer, code int, body string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got string
	var gotCode int
	for time.Now().Before(deadline) {
		resp, err := http.Get(ts.http.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got, gotCode = string(b), resp.StatusCode
		if gotCode == code && strings.Contains(got, body) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("/healthz: %d %q, want %d with %q", gotCode, got, code, body)
}

// closedAdapter stands in for the terminal adapter once Shutdown has
// closed it: Send takes nothing. The methods it does not override are not
// called by this test (the embedded nil interface would panic).
type closedAdapter struct {
	wschannel.Adapter
	mu    sync.Mutex
	sends []string
}

func (a *closedAdapter) Send(out bus.Outbound) bool {
	a.mu.Lock()
	a.sends = append(a.sends, out.MessageID)
	a.mu.Unlock()
	return false
}
func (a *closedAdapter) ConnectedPeers() int { return 0 }
func (a *closedAdapter) Close()              {}

// Every reply of the runs that end during Shutdown's grace is dispatched
// (here: recorded unclaimed, the connections being closed) before
// Shutdown returns.
func TestShutdownDrainsReplies(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	s, err := New(cfg, Options{Logger: quietLog(), NoSync: true, Runners: map[string]agent.Runner{"echo": runner}})
	if err != nil {
		t.Fatal(err)
	}
	ad := &closedAdapter{}
	s.rt.Channels["terminal-dev"].Adapter = ad
	s.Start()
	const n = 40
	for i := range n {
		in := bus.Inbound{ChannelID: "terminal-dev", AccountID: "local", PeerID: fmt.Sprintf("dev-%d", i), MessageID: "m-1", Text: "hi"}
		in.SessionKey = runtime.SessionKey(in.ChannelID, in.AccountID, in.PeerID, "")
		if err := s.rt.AcceptInbound(context.Background(), in, func(runtime.AcceptResult) {}); err != nil {
			t.Fatal(err)
		}
		<-runner.started
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	// Let the runs end during the grace period.
	for !s.router.IsStopped() {
		time.Sleep(time.Millisecond)
	}
	close(runner.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := s.rt.Metrics.Unclaimed.Value("terminal-dev") + s.rt.Metrics.Delivered.Value("terminal-dev")
	ad.mu.Lock()
	sent := len(ad.sends)
	ad.mu.Unlock()
	if got != n || sent != n {
		t.Fatalf("%d of %d replies dispatched or recorded unclaimed (%d handed to the adapter) before Shutdown returned", got, n, sent)
	}
}

// The start-up re-queue respects the waiting bounds: recovered messages
// are published only as places free.
func TestRecoveredMessagesRespectBounds(t *testing.T) {
	t.Parallel()
	workspace := t.TempDir()
	const key = "terminal-dev:local:dev"
	store, err := session.Open(filepath.Join(workspace, "sessions"), session.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		if err := store.Append(context.Background(), key, session.Record{Role: "user", Content: id, MessageID: id, RunID: "r-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	store.Close()
	cfg := config.Default()
	cfg.Workspace = workspace
	setSessionBound(cfg, 2)
	var s *Server
	var peak atomic.Int64
	runner := &stepRunner{step: make(chan struct{}), onRun: func() {
		if _, w := s.router.Load(); int64(w) > peak.Load() {
			peak.Store(int64(w))
		}
	}}
	s, err = New(cfg, Options{Logger: quietLog(), NoSync: true, Runners: map[string]agent.Runner{"echo": runner}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer s.Shutdown(context.Background())
	for range n {
		runner.step <- struct{}{}
	}
	if p := peak.Load(); p > 2 {
		t.Fatalf("%d recovered messages waiting at once, want at most maxWaitingPerSession=2", p)
	}
}

// stepRunner runs one message per value sent on step, calling onRun first
// (after a short pause that lets queues fill up if nothing bounds them).
type stepRunner struct {
	step  chan struct{}
	onRun func()
}

func (r *stepRunner) Run(ctx context.Context, req agent.Request, p agent.Progress) agent.Result {
	select {
	case <-r.step:
	case <-ctx.Done():
		return agent.Result{Text: "cancelled", FinishReason: link.FinishCancelled}
	}
	time.Sleep(20 * time.Millisecond)
	r.onRun()
	return agent.Echo{}.Run(ctx, req, p)
}

func (r *stepRunner) Close() error { return nil }

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
