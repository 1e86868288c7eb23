package link_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server"
	"termlink/server/config"
	"termlink/testrig/chaos"
)

func TestClientSendAndReply(t *testing.T) {
	runner := newCountingRunner(0)
	ts := newTestServer(t, runner, nil)
	d := newDevice(t, link.ClientConfig{URL: ts.url(), DeviceName: "desk"})
	d.waitState(link.StateConnected, time.Time{}, 10*time.Second)
	texts := map[string]string{}
	var ids []string
	for i := range 5 {
		text := fmt.Sprintf("hello %d", i)
		id := d.send(text)
		texts[id] = text
		ids = append(ids, id)
	}
	d.waitReplies(ids, 10*time.Second)
	d.checkExactlyOnce(texts)
	d.mu.Lock()
	if !slices.Equal(d.order, ids) {
		t.Errorf("replies in order %v, want %v", d.order, ids)
	}
	var connected link.Event
	for _, e := range d.states {
		if e.State == link.StateConnected {
			connected = e
		}
	}
	if connected.SessionID != "terminal-dev:local:dev-1" || connected.Heartbeat != 30*time.Second {
		t.Errorf("connected event %+v: want the server's session id and its 30s heartbeat", connected)
	}
	if len(d.acks) != 5 {
		t.Errorf("%d acks, want 5", len(d.acks))
	}
	d.mu.Unlock()
	if dups, total := runner.duplicatedRuns(); dups != 0 || total != 5 {
		t.Errorf("runs: %d total, %d duplicated", total, dups)
	}
	// The message left the outbox once its reply was taken.
	testwait.Until(t, "an empty outbox", func() bool { return d.Status().Pending == 0 })
	if st := d.Stats(); st.Pending != 0 || st.Replies != 5 || st.Sent != 5 || st.Resent != 0 || st.Sessions != 1 {
		t.Errorf("stats %+v", st)
	}
	if _, err := d.Send(context.Background(), "  \n"); !errors.Is(err, link.ErrBlankText) {
		t.Errorf("blank Send: %v", err)
	}
}

// The server is shut down and started again (same workspace, same port)
// three times while three devices keep sending: every message is
// answered exactly once and the agent runs each exactly once.
func TestClientServerRestartInFlight(t *testing.T) {
	runner := newCountingRunner(3 * time.Millisecond)
	ts := newTestServer(t, runner, nil)
	const devices, perDevice = 3, 40
	var devs []*device
	for i := range devices {
		devs = append(devs, newDevice(t, link.ClientConfig{URL: ts.url(), PeerID: fmt.Sprintf("dev-%d", i),
			RetryInitial: 30 * time.Millisecond, RetryMax: 300 * time.Millisecond}))
	}
	texts := make([]map[string]string, devices)
	var wg sync.WaitGroup
	for i, d := range devs {
		texts[i] = map[string]string{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perDevice {
				text := fmt.Sprintf("dev %d message %d", i, j)
				id, err := d.Send(context.Background(), text)
				if err != nil {
					t.Errorf("Send: %v", err)
					return
				}
				texts[i][id] = text
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	for range 3 {
		time.Sleep(60 * time.Millisecond)
		ts.restart()
	}
	wg.Wait()
	for i, d := range devs {
		d.waitReplies(slices.Collect(mapKeys(texts[i])), 30*time.Second)
		d.checkExactlyOnce(texts[i])
	}
	dups, total := runner.duplicatedRuns()
	if dups != 0 || total != devices*perDevice {
		t.Fatalf("agent runs: %d for %d messages, %d duplicated", total, devices*perDevice, dups)
	}
	var resent int64
	for _, d := range devs {
		resent += d.Stats().Resent
	}
	t.Logf("%d messages over 3 restarts: %d runs, 0 duplicated, %d resends answered by dedupe or run once", devices*perDevice, total, resent)
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// A message typed while the server is down is stored, and delivered once
// the server is up.
func TestClientMessageTypedOffline(t *testing.T) {
	runner := newCountingRunner(0)
	ts := prepareTestServer(t, runner, nil)
	d := newDevice(t, link.ClientConfig{URL: ts.url(), RetryInitial: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	d.waitState(link.StateWaiting, time.Time{}, 5*time.Second)
	id := d.send("typed offline")
	if st := d.Status(); st.State == link.StateConnected || st.Pending != 1 || st.Reason == "" {
		t.Fatalf("status while offline %+v", st)
	}
	ts.start()
	d.waitReplies([]string{id}, 10*time.Second)
	d.checkExactlyOnce(map[string]string{id: "typed offline"})
	if n := runner.runsOf(id); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// A stalled link (TCP open, nothing passes) is declared dead within
// heartbeat + pong timeout and redialled; the device is back once the
// path clears.
func TestClientDetectsStall(t *testing.T) {
	ts := newTestServer(t, newCountingRunner(0), withHeartbeat(1))
	p, err := chaos.New(chaos.Options{Target: ts.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const pongTimeout = time.Second
	d := newDevice(t, link.ClientConfig{URL: "ws://" + p.Addr() + "/api/channels/terminal-dev/ws",
		PongTimeout: pongTimeout, ConnectTimeout: time.Second, RetryInitial: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond})
	d.waitState(link.StateConnected, time.Time{}, 10*time.Second)
	// A few heartbeats on a healthy link, counted as the server's frames
	// pass the proxy rather than assumed from the clock.
	waitDelivered(t, p, 3)
	if st := d.Stats(); st.Sessions != 1 || st.Dials != 1 {
		t.Fatalf("the healthy link flapped: %+v", st)
	}

	stalled := time.Now()
	p.SetMode(chaos.Stall)
	d.waitState(link.StateWaiting, stalled, 30*time.Second)
	// Detected by the read deadline the client set from the server's
	// heartbeat (1 s) plus the pong timeout, which its reason names: not
	// by a dial, a write, or a deadline of another length.
	want := fmt.Sprintf("no frame from the server for %s: link dead", time.Second+pongTimeout)
	if e := d.stateSince(link.StateWaiting, stalled, 0); e.Reason != want {
		t.Errorf("offline reason %q, want %q", e.Reason, want)
	}
	// Dials during the stall reach the proxy, hang in the handshake and
	// time out: a second wait, no second session.
	d.waitFor("a dial during the stall to fail", 30*time.Second, func() bool {
		return d.stateSinceLocked(link.StateWaiting, stalled, 1).State == link.StateWaiting
	})
	if st := d.Stats(); st.Sessions != 1 || st.Dials < 2 {
		t.Fatalf("during the stall: %+v", st)
	}
	cleared := time.Now()
	p.SetMode(chaos.Normal)
	d.waitState(link.StateConnected, cleared, 10*time.Second)
	if st := d.Stats(); st.Sessions != 2 {
		t.Errorf("after the stall: %d sessions, want 2", st.Sessions)
	}
	id := d.send("after the stall")
	d.waitReplies([]string{id}, 10*time.Second)
}

// waitDelivered waits until the proxy has delivered n more chunks from
// the server to the device (a pong each on an idle link).
func waitDelivered(t *testing.T, p *chaos.Proxy, n int) {
	t.Helper()
	last, seen := p.Stats().BytesDown, 0
	testwait.UntilOK(t, fmt.Sprintf("%d frames from the server through the proxy", n), func() error {
		if b := p.Stats().BytesDown; b != last {
			last, seen = b, seen+1
		}
		if seen < n {
			return fmt.Errorf("%d of %d", seen, n)
		}
		return nil
	})
}

// With the server down, the client waits between dial attempts for
// growing, jittered intervals up to the cap; when the server is back the
// device reconnects. The waits checked are the ones the client chose
// (NextTry of each StateWaiting event), not wall-clock gaps, which a busy
// machine stretches; the server stays down for ten of them (about 2.5 s
// on an idle machine), however long a busy one takes.
func TestClientBackoffWhileServerDown(t *testing.T) {
	ts := newTestServer(t, newCountingRunner(0), nil)
	const initial, maxWait = 20 * time.Millisecond, 400 * time.Millisecond
	d := newDevice(t, link.ClientConfig{URL: ts.url(), RetryInitial: initial, RetryMax: maxWait})
	d.waitState(link.StateConnected, time.Time{}, 10*time.Second)
	// Taken before the stop: the client's first waits come while the
	// server shuts down (its going-away close, then refused dials),
	// before stop returns (tens of ms on a busy machine).
	down := time.Now()
	ts.stop()
	d.waitFor("ten waits with the server down", 0, func() bool {
		return d.stateSinceLocked(link.StateWaiting, down, 9).State == link.StateWaiting
	})
	ts.start()
	back := time.Now()
	d.waitState(link.StateConnected, back, 10*time.Second)

	d.mu.Lock()
	var waits []time.Duration
	for _, e := range d.states {
		if e.State == link.StateWaiting && e.Time.After(down) && e.Time.Before(back) {
			waits = append(waits, e.NextTry.Sub(e.Time))
		}
	}
	d.mu.Unlock()
	t.Logf("%d waits while down: %v", len(waits), roundAll(waits))
	if len(waits) < 10 {
		t.Fatalf("only %d dial attempts while the server was down", len(waits))
	}
	const jitter = link.DefaultRetryJitter
	for i, w := range waits {
		if w > maxWait+time.Millisecond {
			t.Errorf("wait %d is %v, over the %v cap", i, w, maxWait)
		}
		if w < time.Duration(float64(initial)*(1-jitter))-time.Millisecond {
			t.Errorf("wait %d is %v, under the initial %v less its jitter", i, w, initial)
		}
	}
	// Growing: the first waits are short, the late ones near the cap.
	if waits[0] > 5*initial || mean(waits[len(waits)-4:]) < maxWait/3 {
		t.Errorf("waits do not grow toward the cap: %v", roundAll(waits))
	}
	// Jittered: the capped waits are not all the same.
	late := slices.Clone(waits[len(waits)-4:])
	slices.Sort(late)
	if late[len(late)-1]-late[0] < time.Millisecond {
		t.Errorf("capped waits show no jitter: %v", roundAll(late))
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// 200 devices whose server restarts: they come back at spread-out times
// (jittered backoff, no thundering herd) and all of them come back.
func TestClientManyDevicesServerRestart(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 50
	}
	ts := newTestServer(t, newCountingRunner(0), nil)
	res := reconnectAfterRestart(t, ts, n, link.ClientConfig{RetryInitial: 200 * time.Millisecond, RetryMax: 2 * time.Second}, 500*time.Millisecond)
	t.Logf("%d devices, server down %v: back after p50 %v, p99 %v, spread (first to last) %v, %d dials while down",
		n, res.down.Round(time.Millisecond), res.p50, res.p99, res.spread, res.dialsWhileDown)
	if res.spread < 50*time.Millisecond {
		t.Errorf("all %d devices reconnected within %v: no spread", n, res.spread)
	}
}

type reconnectResult struct {
	down, p50, p99, max, spread time.Duration
	dialsWhileDown              int
}

// reconnectAfterRestart connects n devices, restarts ts with downtime in
// between, and measures when each is connected again (from the moment the
// server serves again).
func reconnectAfterRestart(t *testing.T, ts *testServer, n int, base link.ClientConfig, downtime time.Duration) reconnectResult {
	t.Helper()
	devs := make([]*device, n)
	for i := range devs {
		cfg := base
		cfg.URL, cfg.PeerID, cfg.Outbox = ts.url(), fmt.Sprintf("many-%d", i), link.NewMemoryOutbox()
		devs[i] = newDevice(t, cfg)
	}
	for _, d := range devs {
		d.waitState(link.StateConnected, time.Time{}, 60*time.Second)
	}
	stopped := time.Now()
	ts.stop()
	time.Sleep(downtime)
	ts.start()
	back := time.Now()
	var res reconnectResult
	res.down = back.Sub(stopped)
	var times []time.Duration
	var first, last time.Time
	for _, d := range devs {
		at := d.waitState(link.StateConnected, stopped, 120*time.Second)
		times = append(times, at.Sub(back))
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
		d.mu.Lock()
		for _, e := range d.states {
			if e.State == link.StateConnecting && e.Time.After(stopped) && e.Time.Before(back) {
				res.dialsWhileDown++
			}
		}
		d.mu.Unlock()
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	res.p50 = times[len(times)/2].Round(time.Millisecond)
	res.p99 = times[min(len(times)-1, len(times)*99/100)].Round(time.Millisecond)
	res.max = times[len(times)-1].Round(time.Millisecond)
	res.spread = last.Sub(first).Round(time.Millisecond)
	return res
}

// A device killed with SIGKILL, with messages acked but unanswered and
// messages never sent: a new process on the same state dir resends them
// all and gets every reply; the agent ran each exactly once.
func TestClientDeviceKilled(t *testing.T) {
	runner := newCountingRunner(0)
	runner.closeGate() // runs hang until the gate opens
	ts := newTestServer(t, runner, nil)
	state := t.TempDir()

	// 1: five messages accepted by the server (acked), none answered.
	child := startChild(t, "send", ts.url(), state, 5)
	child.WaitLine(t, "acked", 30*time.Second)
	sent := child.Lines("sent ")
	child.Signal(t, syscall.SIGKILL)

	// 2: three more typed while the server is unreachable.
	dead := prepareTestServer(t, nil, nil)
	child = startChild(t, "send-offline", dead.url(), state, 3)
	child.WaitLine(t, "stored", 30*time.Second)
	sent = append(sent, child.Lines("sent ")...)
	child.Signal(t, syscall.SIGKILL)
	if len(sent) != 8 {
		t.Fatalf("children sent %v", sent)
	}
	runner.openGate()

	// 3: a new process on the same state dir.
	child = startChild(t, "collect", ts.url(), state, 0)
	child.WaitLine(t, "done", 30*time.Second)
	replies := replyCounts(child)
	for _, id := range sent {
		if replies[id] != 1 {
			t.Errorf("message %s: %d replies in the new process, want 1", id, replies[id])
		}
	}
	if len(replies) != len(sent) {
		t.Errorf("replies for %v, sent %v", replies, sent)
	}
	if dups, total := runner.duplicatedRuns(); dups != 0 || total != 8 {
		t.Errorf("agent runs: %d total, %d duplicated; want 8 and 0", total, dups)
	}
	child.Wait(t, 10*time.Second)
	child.Success(t)
	t.Logf("killed two device processes holding %d unanswered messages (5 acked, 3 never sent); the third process got %d replies", len(sent), len(replies))
	// The outbox is empty now.
	o, err := link.OpenFileOutbox(state, link.FileOutboxOptions{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if p := o.Pending(); len(p) != 0 {
		t.Errorf("outbox still holds %d messages", len(p))
	}
}

// The server sends a reply twice (on the connection and in a duplicate
// ack after a resend): the caller sees it once.
func TestClientDeliversReplyOncePerMessage(t *testing.T) {
	fs := newFakeServer(t)
	d := newDevice(t, link.ClientConfig{URL: fs.url(), Outbox: link.NewMemoryOutbox(), RetryInitial: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	id := d.send("twice")
	conn := fs.accept(t)
	conn.expectConnect(t)
	conn.write(t, &link.Connected{ChannelID: "terminal-dev", SessionID: "s"})
	m := conn.readMessage(t)
	reply := &link.Message{Role: link.RoleAssistant, MessageID: m.MessageID, RunID: "r1", Text: "once", FinishReason: link.FinishStop}
	conn.write(t, &link.Ack{MessageID: m.MessageID, SessionID: "s", Accepted: true})
	conn.write(t, reply)
	conn.write(t, reply)
	conn.write(t, &link.Ack{MessageID: m.MessageID, SessionID: "s", Accepted: true, Duplicate: true, Reply: reply})
	conn.write(t, &link.Progress{MessageID: m.MessageID, Text: "late progress"})
	// A ping proves the client read everything before we look.
	conn.write(t, &link.Ping{})
	conn.readUntilPong(t)
	d.waitReplies([]string{id}, 5*time.Second)
	d.mu.Lock()
	n := len(d.replies[id])
	d.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d replies delivered for one message", n)
	}
	if st := d.Stats(); st.DuplicateReplies != 2 {
		t.Fatalf("stats %+v: want 2 duplicate replies dropped", st)
	}
}

// A write that does not finish within WriteTimeout (the server stopped
// reading) tears the connection down, even with a long heartbeat.
func TestClientWriteTimeoutTearsDown(t *testing.T) {
	fs := newFakeServer(t)
	d := newDevice(t, link.ClientConfig{URL: fs.url(), Outbox: link.NewMemoryOutbox(), WriteTimeout: 300 * time.Millisecond,
		Heartbeat: time.Minute, PongTimeout: time.Minute, Window: 1000, RetryInitial: time.Minute, RetryMax: time.Minute,
		NetDialContext: smallBufferDial})
	conn := fs.accept(t)
	conn.expectConnect(t)
	conn.write(t, &link.Connected{ChannelID: "terminal-dev", SessionID: "s"})
	d.waitState(link.StateConnected, time.Time{}, 5*time.Second)
	// The fake server reads nothing more; these fill every buffer.
	big := strings.Repeat("x", 64<<10)
	start := time.Now()
	for range 200 {
		d.send(big)
	}
	down := d.waitState(link.StateWaiting, start, 20*time.Second)
	d.mu.Lock()
	reason := d.states[len(d.states)-1].Reason
	d.mu.Unlock()
	t.Logf("write timeout detected %v after the first send: %s", down.Sub(start).Round(time.Millisecond), reason)
	if !strings.Contains(reason, "write did not finish within 300ms") {
		t.Fatalf("offline reason %q, want a write timeout", reason)
	}
}

// wss:// with a custom CA file and a bearer token; a wrong token keeps the
// device offline with the server's reason.
func TestClientTLSAndToken(t *testing.T) {
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	ch := cfg.Channels["terminal-dev"]
	ch.Config.Tokens = config.Tokens{ByPeer: map[string]string{"dev-1": "s3cret"}}
	cfg.Channels["terminal-dev"] = ch
	srv, err := server.New(cfg, server.Options{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	hs := httptest.NewTLSServer(srv.Handler())
	defer func() {
		hs.Close()
		srv.Shutdown(context.Background())
	}()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	url := "wss" + strings.TrimPrefix(hs.URL, "https") + "/api/channels/terminal-dev/ws"

	d := newDevice(t, link.ClientConfig{URL: url, CAFile: caFile, Token: "s3cret"})
	d.waitState(link.StateConnected, time.Time{}, 10*time.Second)
	id := d.send("over TLS")
	d.waitReplies([]string{id}, 10*time.Second)

	// A connect timeout past the suite's deadline: under qemu on a busy
	// machine a TLS handshake took longer than the default, and the
	// reason was the timeout, not the refusal (arm64, stress run 25).
	bad := newDevice(t, link.ClientConfig{URL: url, CAFile: caFile, Token: "wrong", RetryInitial: time.Minute, ConnectTimeout: testwait.Deadline})
	bad.waitState(link.StateWaiting, time.Time{}, 10*time.Second)
	if st := bad.Status(); !strings.Contains(st.Reason, "401") {
		t.Fatalf("wrong token: status %+v, want the HTTP 401 in the reason", st)
	}
	noCA := newDevice(t, link.ClientConfig{URL: url, Token: "s3cret", RetryInitial: time.Minute, ConnectTimeout: testwait.Deadline})
	noCA.waitState(link.StateWaiting, time.Time{}, 10*time.Second)
	if st := noCA.Status(); !strings.Contains(st.Reason, "certificate") {
		t.Fatalf("without the CA: status %+v", st)
	}
	if _, err := link.NewClient(link.ClientConfig{URL: url, PeerID: "x", Outbox: link.NewMemoryOutbox(), CAFile: filepath.Join(t.TempDir(), "none.pem")}); err == nil {
		t.Fatal("missing CA file accepted")
	}
}

func TestClientCancel(t *testing.T) {
	runner := newCountingRunner(0)
	runner.closeGate()
	defer runner.openGate()
	ts := newTestServer(t, runner, nil)
	d := newDevice(t, link.ClientConfig{URL: ts.url()})
	ctx := context.Background()
	if err := d.Cancel(ctx, "nope"); !errors.Is(err, link.ErrUnknownMessage) {
		t.Fatalf("Cancel of an unknown id: %v", err)
	}
	d.waitState(link.StateConnected, time.Time{}, 10*time.Second)
	id := d.send("long job")
	d.waitFor("ack", 10*time.Second, func() bool { return len(d.acks) == 1 })
	testwait.Until(t, "the run started", func() bool { return runner.runsOf(id) > 0 })
	if err := d.Cancel(ctx, id); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	d.waitReplies([]string{id}, 10*time.Second)
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.replies[id][0]; r.FinishReason != link.FinishCancelled {
		t.Fatalf("reply %+v, want finish_reason cancelled", r)
	}
}

func TestClientCloseUnblocks(t *testing.T) {
	// Close before Run.
	c, err := link.NewClient(link.ClientConfig{URL: "ws://127.0.0.1:1/x", PeerID: "p", StateDir: t.TempDir(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-c.Events(); ok {
		t.Fatal("Events not closed after Close")
	}
	if err := c.Run(context.Background()); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
	if _, err := c.Send(context.Background(), "x"); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}

	// Close while a dial hangs on a stalled path, and nobody reads Events.
	ts := newTestServer(t, nil, nil)
	p, err := chaos.New(chaos.Options{Target: ts.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetMode(chaos.Stall)
	c, err = link.NewClient(link.ClientConfig{URL: "ws://" + p.Addr() + "/api/channels/terminal-dev/ws", PeerID: "p",
		Outbox: link.NewMemoryOutbox(), ConnectTimeout: time.Minute, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(context.Background()) }()
	testwait.Until(t, "the dial at the proxy", func() bool { return p.Stats().Accepted > 0 })
	// The dial would wait out its minute: Close must abort it, which a
	// guard of half that tells apart.
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-runErr:
		if err != nil {
			t.Fatalf("Run after Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not abort a dial that has a minute to run")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}

	// Run ends with its context, with the reason as the last state: in
	// Status always; as the last event only when the reader was waiting
	// for one then (Events is unbuffered here, and Run does not wait for
	// a reader that may have stopped reading: under qemu at load 20 this
	// reader was once still returning from cancel).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ = link.NewClient(link.ClientConfig{URL: ts.url(), PeerID: "q", Outbox: link.NewMemoryOutbox(), Logger: discard})
	go func() { runErr <- c.Run(ctx) }()
	var last link.Event
	for e := range c.Events() {
		last = e
		if e.State == link.StateConnected {
			cancel()
		}
	}
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if st := c.Status(); st.State != link.StateClosed || st.Reason != "context ended: context canceled" {
		t.Fatalf("status after Run: %v %q, want closed with the context's reason", st.State, st.Reason)
	}
	if last.State != link.StateClosed && last.State != link.StateConnected {
		t.Fatalf("last event %v, want state closed (or connected: the closed one not taken)", last)
	}
}

func TestNewClientConfigErrors(t *testing.T) {
	tests := []struct {
		cfg  link.ClientConfig
		want string
	}{
		{link.ClientConfig{PeerID: "p", StateDir: "x"}, "URL is required"},
		{link.ClientConfig{URL: "http://h/x", PeerID: "p", StateDir: "x"}, "scheme must be ws or wss"},
		{link.ClientConfig{URL: "ws:///x", PeerID: "p", StateDir: "x"}, "has no host"},
		{link.ClientConfig{URL: "ws://h/x", StateDir: "x"}, "PeerID is required"},
		{link.ClientConfig{URL: "ws://h/x", PeerID: "p"}, "StateDir"},
		{link.ClientConfig{URL: "ws://h/x", PeerID: "p", StateDir: "x", RetryJitter: 1.5}, "RetryJitter"},
		{link.ClientConfig{URL: "ws://h/x", PeerID: "p", StateDir: "x", PongTimeout: -1}, "PongTimeout must not be negative"},
	}
	for _, tt := range tests {
		_, err := link.NewClient(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewClient(%+v): %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// A message the server refuses for good (too long for the channel) is
// reported once and leaves the outbox instead of being resent forever.
func TestClientRefusedMessage(t *testing.T) {
	ts := newTestServer(t, newCountingRunner(0), func(cfg *config.Config) {
		ch := cfg.Channels["terminal-dev"]
		ch.Config.MaxMessageChars = 10
		cfg.Channels["terminal-dev"] = ch
	})
	d := newDevice(t, link.ClientConfig{URL: ts.url()})
	long := d.send("far more than ten characters")
	ok := d.send("short")
	d.waitReplies([]string{ok}, 10*time.Second)
	d.waitFor("refusal", 10*time.Second, func() bool { return len(d.errs) > 0 })
	d.mu.Lock()
	e := d.errs[0]
	d.mu.Unlock()
	if e.MessageID != long || e.Code != link.CodeBadMessage || !strings.Contains(e.Err.Error(), "at most 10") {
		t.Fatalf("error event %+v", e)
	}
	testwait.Until(t, "an empty outbox", func() bool { return d.Status().Pending == 0 })
	if st := d.Status(); st.Pending != 0 || st.State != link.StateConnected {
		t.Fatalf("status %+v: the refused message should leave the outbox and the link stay up", st)
	}
}
