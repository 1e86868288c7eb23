package link_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server"
	"termlink/server/agent"
	"termlink/server/config"
)

var discard = slog.New(slog.DiscardHandler)

// countingRunner is the echo agent with a run counter per message id, an
// optional delay, and an optional gate that holds every run until it is
// opened.
type countingRunner struct {
	delay time.Duration

	mu    sync.Mutex
	runs  map[string]int
	total int
	gate  chan struct{} // nil: open
}

func newCountingRunner(delay time.Duration) *countingRunner {
	return &countingRunner{delay: delay, runs: map[string]int{}}
}

func (r *countingRunner) closeGate() {
	r.mu.Lock()
	r.gate = make(chan struct{})
	r.mu.Unlock()
}

func (r *countingRunner) openGate() {
	r.mu.Lock()
	if r.gate != nil {
		close(r.gate)
		r.gate = nil
	}
	r.mu.Unlock()
}

func (r *countingRunner) Run(ctx context.Context, req agent.Request, p agent.Progress) agent.Result {
	r.mu.Lock()
	r.runs[req.MessageID]++
	r.total++
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return agent.Result{Text: "cancelled", FinishReason: link.FinishCancelled}
		}
	}
	if r.delay > 0 {
		if p != nil {
			p("thinking")
		}
		select {
		case <-time.After(r.delay):
		case <-ctx.Done():
			return agent.Result{Text: "cancelled", FinishReason: link.FinishCancelled}
		}
	}
	return agent.Result{Text: agent.EchoReply(req.Text), FinishReason: link.FinishStop}
}

func (r *countingRunner) Close() error { return nil }

// duplicatedRuns is the number of runs beyond one per message id.
func (r *countingRunner) duplicatedRuns() (dups int, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.runs {
		if n > 1 {
			dups += n - 1
		}
	}
	return dups, r.total
}

func (r *countingRunner) runsOf(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

// testServer is the real server on a fixed loopback port that can be
// stopped and started again on the same workspace and port.
type testServer struct {
	t      testing.TB
	cfg    *config.Config
	runner *countingRunner
	addr   string
	grace  time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
	srv    *server.Server
}

// newTestServer starts a server; mutate changes the default config.
func newTestServer(t testing.TB, runner *countingRunner, mutate func(*config.Config)) *testServer {
	t.Helper()
	ts := prepareTestServer(t, runner, mutate)
	ts.start()
	return ts
}

// prepareTestServer picks a port and a workspace but does not start.
func prepareTestServer(t testing.TB, runner *countingRunner, mutate func(*config.Config)) *testServer {
	t.Helper()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	if mutate != nil {
		mutate(cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ts := &testServer{t: t, cfg: cfg, runner: runner, addr: addr, grace: 10 * time.Second}
	t.Cleanup(ts.stop)
	return ts
}

func withHeartbeat(seconds int) func(*config.Config) {
	return func(cfg *config.Config) {
		ch := cfg.Channels["terminal-dev"]
		ch.Config.HeartbeatSeconds = seconds
		cfg.Channels["terminal-dev"] = ch
	}
}

func (ts *testServer) url() string { return "ws://" + ts.addr + "/api/channels/terminal-dev/ws" }

// start runs server.New on the workspace and Serve on the port.
func (ts *testServer) start() {
	ts.t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.srv != nil {
		ts.t.Fatal("server already running")
	}
	opt := server.Options{Logger: discard}
	if ts.runner != nil {
		opt.Runners = map[string]agent.Runner{"echo": ts.runner}
	}
	srv, err := server.New(ts.cfg, opt)
	if err != nil {
		ts.t.Fatalf("server.New: %v", err)
	}
	var ln net.Listener
	for i := 0; ; i++ {
		ln, err = net.Listen("tcp", ts.addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || i == 100 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		ts.t.Fatalf("listen %s: %v", ts.addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, ts.grace) }()
	ts.srv, ts.cancel, ts.done = srv, cancel, done
}

// stop shuts the server down (Serve's graceful path) and waits for it.
func (ts *testServer) stop() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.srv == nil {
		return
	}
	ts.cancel()
	if err := <-ts.done; err != nil {
		ts.t.Errorf("Serve: %v", err)
	}
	ts.srv = nil
}

func (ts *testServer) restart() {
	ts.t.Helper()
	ts.stop()
	ts.start()
}

// device is a Client under test with its events collected.
type device struct {
	t *testing.T
	*link.Client
	runErr  chan error
	confirm bool // call Delivered for every final answer as it arrives

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every event
	replies map[string][]*link.Message
	order   []string // message ids in reply order
	states  []link.Event
	acks    []*link.Ack
	errs    []link.Event
	deltas  []link.Event
	all     []link.Event // every event but the state ones, in order
	events  int
}

func newDevice(t *testing.T, cfg link.ClientConfig) *device {
	t.Helper()
	return startDevice(t, cfg, true)
}

// startDevice runs a Client and collects its events; confirm: call
// Delivered for every final answer as it arrives.
func startDevice(t *testing.T, cfg link.ClientConfig, confirm bool) *device {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	if cfg.PeerID == "" {
		cfg.PeerID = "dev-1"
	}
	if cfg.Outbox == nil && cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	c, err := link.NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	d := &device{t: t, Client: c, runErr: make(chan error, 1), confirm: confirm, changed: make(chan struct{}),
		replies: map[string][]*link.Message{}}
	go d.collect()
	go func() { d.runErr <- c.Run(context.Background()) }()
	t.Cleanup(func() {
		c.Close()
		<-d.runErr
	})
	return d
}

func (d *device) collect() {
	for e := range d.Events() {
		d.mu.Lock()
		d.events++
		switch e.Kind {
		case link.EventReply:
			if len(d.replies[e.MessageID]) == 0 {
				d.order = append(d.order, e.MessageID)
			}
			d.replies[e.MessageID] = append(d.replies[e.MessageID], e.Reply)
		case link.EventState:
			d.states = append(d.states, e)
		case link.EventAck:
			d.acks = append(d.acks, e.Ack)
		case link.EventError:
			d.errs = append(d.errs, e)
		case link.EventDelta:
			d.deltas = append(d.deltas, e)
		}
		if e.Kind != link.EventState {
			d.all = append(d.all, e)
		}
		close(d.changed)
		d.changed = make(chan struct{})
		d.mu.Unlock()
		if e.Final && d.confirm {
			// ErrClosed: the test has its reply and ended (its cleanup
			// closed the client) before this goroutine confirmed it.
			if err := d.Delivered(e.MessageID); err != nil && !errors.Is(err, link.ErrClosed) {
				d.t.Errorf("Delivered(%s): %v", e.MessageID, err)
			}
		}
	}
}

// waitFor polls cond (under the event lock) after each event until it
// holds or timeout passes; timeout is at least testwait.Deadline (a
// loaded machine is slow, never that slow).
func (d *device) waitFor(what string, timeout time.Duration, cond func() bool) {
	d.t.Helper()
	timeout = max(timeout, testwait.Deadline)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		d.mu.Lock()
		ok := cond()
		ch := d.changed
		d.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			d.mu.Lock()
			defer d.mu.Unlock()
			d.t.Fatalf("timed out after %v waiting for %s; status %+v; states %v; errors %v", timeout, what, d.Status(), stateNames(d.states), d.errs)
		}
	}
}

func stateNames(es []link.Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.String())
	}
	if len(out) > 12 {
		out = append(out[:4], append([]string{"..."}, out[len(out)-8:]...)...)
	}
	return out
}

// waitReplies waits until every id has a reply.
func (d *device) waitReplies(ids []string, timeout time.Duration) {
	d.t.Helper()
	d.waitFor(fmt.Sprintf("replies to %d messages", len(ids)), timeout, func() bool {
		for _, id := range ids {
			if len(d.replies[id]) == 0 {
				return false
			}
		}
		return true
	})
}

// stateSince returns the i-th (from 0) event of state s at or after
// since, or the zero Event.
func (d *device) stateSince(s link.State, since time.Time, i int) link.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stateSinceLocked(s, since, i)
}

func (d *device) stateSinceLocked(s link.State, since time.Time, i int) link.Event {
	for _, e := range d.states {
		if e.State == s && !e.Time.Before(since) {
			if i == 0 {
				return e
			}
			i--
		}
	}
	return link.Event{}
}

// waitState waits for a state event after since; it returns its time.
func (d *device) waitState(s link.State, since time.Time, timeout time.Duration) time.Time {
	d.t.Helper()
	var at time.Time
	d.waitFor("state "+s.String(), timeout, func() bool {
		for _, e := range d.states {
			if e.State == s && !e.Time.Before(since) {
				at = e.Time
				return true
			}
		}
		return false
	})
	return at
}

func (d *device) send(text string) string {
	d.t.Helper()
	id, err := d.Send(context.Background(), text)
	if err != nil {
		d.t.Fatalf("Send: %v", err)
	}
	return id
}

// checkExactlyOnce fails unless each id got exactly one reply, the echo of
// its text.
func (d *device) checkExactlyOnce(texts map[string]string) {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, text := range texts {
		rs := d.replies[id]
		if len(rs) != 1 {
			d.t.Errorf("message %s: %d replies, want 1", id, len(rs))
			continue
		}
		if want := agent.EchoReply(text); rs[0].Text != want {
			d.t.Errorf("message %s: reply %q, want %q", id, rs[0].Text, want)
		}
	}
}

// fastRetry is a backoff for tests: quick first retry, small cap.
func fastRetry(cfg *link.ClientConfig) {
	cfg.RetryInitial = 20 * time.Millisecond
	cfg.RetryMax = 300 * time.Millisecond
}
