package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
)

// peer is a small spec-following terminal channel server: connected (with
// heartbeat_seconds), ack, an assistant reply echoing the text, pong. Its
// misbehaviours are switched on by the fields; "the n-th message" counts
// user messages across all connections, from 1.
type peer struct {
	heartbeat int    // heartbeat_seconds in connected (0: omitted)
	token     string // required "Authorization: Bearer <token>" when set
	reject401 int64  // refuse the first n upgrades with 401
	silent    bool   // never answer connect
	noReply   int64  // never reply to the n-th message (acks it)
	twice     int64  // reply twice to the n-th message
	dupAck    int64  // ack the n-th message with duplicate:true
	errFrame  int64  // send an error frame after the n-th message's reply
	errText   string
	replyWait time.Duration // delay before each reply
	// To a device that listed "stream": each reply's text first in
	// deltas pieces; the n-th message's deltas skip a seq (gapDelta), one
	// comes after its reply (lateDelta), or they spell other text
	// (wrongDelta).
	deltas                          int
	gapDelta, lateDelta, wrongDelta int64

	upgrades, messages, pings, connects atomic.Int64
	active                              atomic.Int64 // connections being served
}

func (p *peer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.token != "" && r.Header.Get("Authorization") != "Bearer "+p.token {
		http.Error(w, "unauthorized: bad or missing token", http.StatusUnauthorized)
		return
	}
	if p.upgrades.Add(1) <= p.reject401 {
		http.Error(w, "unauthorized: device not allowed", http.StatusUnauthorized)
		return
	}
	up := websocket.Upgrader{}
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	p.active.Add(1)
	defer p.active.Add(-1)
	defer conn.Close()
	var wmu sync.Mutex
	send := func(f link.Frame) {
		wmu.Lock()
		defer wmu.Unlock()
		conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		conn.WriteMessage(websocket.TextMessage, link.MustEncode(f))
	}
	var session string
	var stream bool
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return
		}
		f, err := link.Decode(data)
		if err != nil {
			send(&link.Error{Error: err.Error(), Code: link.CodeBadFrame})
			continue
		}
		switch f := f.(type) {
		case *link.Connect:
			p.connects.Add(1)
			if p.silent {
				continue
			}
			session = "terminal-dev:local:" + f.PeerID
			stream = slices.Contains(f.Capabilities, link.CapStream)
			send(&link.Connected{ChannelID: "terminal-dev", SessionID: session, HeartbeatSeconds: p.heartbeat})
		case *link.Ping:
			p.pings.Add(1)
			send(&link.Pong{})
		case *link.Message:
			if session == "" {
				send(&link.Error{Error: "connect first", Code: link.CodeNotConnected})
				continue
			}
			n := p.messages.Add(1)
			send(&link.Ack{MessageID: f.MessageID, SessionID: session, Accepted: true, Duplicate: n == p.dupAck})
			if n == p.noReply {
				continue
			}
			time.Sleep(p.replyWait)
			if stream && p.deltas > 0 {
				text := f.Text
				if n == p.wrongDelta {
					text = "something else entirely"
				}
				for i, seq := 0, int64(1); i < p.deltas; i++ {
					piece := text[i*len(text)/p.deltas : (i+1)*len(text)/p.deltas]
					if i == 1 && n == p.gapDelta {
						seq++
					}
					send(&link.Delta{MessageID: f.MessageID, Seq: seq, Text: piece})
					seq++
				}
			}
			reply := &link.Message{Role: link.RoleAssistant, MessageID: f.MessageID, RunID: "run", Text: f.Text, FinishReason: link.FinishStop}
			send(reply)
			if stream && n == p.lateDelta {
				send(&link.Delta{MessageID: f.MessageID, Seq: 99, Text: "late"})
			}
			if n == p.twice {
				send(reply)
			}
			if n == p.errFrame {
				send(&link.Error{Error: p.errText, MessageID: f.MessageID})
			}
		default:
			send(&link.Error{Error: "Unsupported websocket frame type: " + string(f.FrameType())})
		}
	}
}

// start serves p on loopback and returns its http:// URL.
func start(t *testing.T, p *peer) string {
	t.Helper()
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.Close()
		waitZero(t, &p.active)
	})
	return srv.URL
}

// waitZero waits for the server's connections to end: Run closes them all.
func waitZero(t *testing.T, n *atomic.Int64) {
	t.Helper()
	if err := testwait.Poll(context.Background(), testwait.Deadline, func() error {
		if open := n.Load(); open > 0 {
			return fmt.Errorf("%d server connections still open", open)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// noLeaks fails t if goroutines started during the test outlive it.
func noLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		// Goroutines that are ending may take a moment on a busy
		// machine; a leaked one never ends.
		_ = testwait.Poll(context.Background(), testwait.Deadline, func() error {
			if n := runtime.NumGoroutine(); n > before {
				return fmt.Errorf("%d goroutines", n)
			}
			return nil
		})
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

func run(t *testing.T, opt Options) *Report {
	t.Helper()
	// A bound for a run that hangs, past its drain: not a time the run
	// must keep to.
	ctx, cancel := context.WithTimeout(context.Background(), opt.Duration+opt.Drain+testwait.Deadline)
	defer cancel()
	rep, err := Run(ctx, opt)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var buf bytes.Buffer
	rep.WriteText(&buf)
	t.Logf("report:\n%s", buf.String())
	return rep
}

func TestRunHappy(t *testing.T) {
	noLeaks(t)
	p := &peer{replyWait: 2 * time.Millisecond}
	url := start(t, p)
	rep := run(t, Options{URL: url, Devices: 5, Rate: 100, Duration: 400 * time.Millisecond, Drain: drainAll})

	if rep.DevicesConnected != 5 || rep.DevicesFailed != 0 || len(rep.ConnectErrors) != 0 {
		t.Errorf("devices connected %d failed %d errors %v, want 5 0 none", rep.DevicesConnected, rep.DevicesFailed, rep.ConnectErrors)
	}
	if got := p.connects.Load(); got != 5 {
		t.Errorf("server saw %d connects, want 5", got)
	}
	// 100/s for 400ms is 40 messages: never more; fewer is the machine's
	// speed, not a property (a busy machine sends 25).
	if rep.Sent == 0 || rep.Sent > 41 {
		t.Errorf("sent %d, want at most 41", rep.Sent)
	}
	if got := p.messages.Load(); got != rep.Sent {
		t.Errorf("server received %d messages, report says sent %d", got, rep.Sent)
	}
	if rep.Acked != rep.Sent || rep.Replied != rep.Sent || rep.Lost != 0 {
		t.Errorf("sent %d acked %d replied %d lost %d, want all acked and replied", rep.Sent, rep.Acked, rep.Replied, rep.Lost)
	}
	if rep.DuplicateAcks != 0 || rep.DuplicateReplies != 0 || rep.ErrorFrames != 0 || rep.BadFrames != 0 || rep.UnexpectedFrames != 0 || rep.UnknownIDs != 0 {
		t.Errorf("unexpected anomalies: %+v", rep)
	}
	if rep.FinishReasons["stop"] != rep.Sent {
		t.Errorf("finish reasons %v, want stop %d", rep.FinishReasons, rep.Sent)
	}
	if rep.RoundTrip.N != int(rep.Sent) || rep.Ack.N != int(rep.Sent) || rep.Connect.N != 5 {
		t.Errorf("sample counts rtt %d ack %d connect %d", rep.RoundTrip.N, rep.Ack.N, rep.Connect.N)
	}
	rt := rep.RoundTrip
	if !(rt.P50 >= 2 && rt.P50 <= rt.P90 && rt.P90 <= rt.P99 && rt.P99 <= rt.Max) {
		t.Errorf("round trip percentiles out of order or below the 2ms reply delay: %+v", rt)
	}
	if rep.Ack.P50 > rt.P50 {
		t.Errorf("ack p50 %v > round trip p50 %v", rep.Ack.P50, rt.P50)
	}
	if rep.ThroughputPerSec <= 0 || rep.ThroughputPerSec > 110 {
		t.Errorf("throughput %.1f replies/s, want at most about 100 (the rate)", rep.ThroughputPerSec)
	}
	if err := rep.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	// The report is valid JSON with the documented keys.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"devices_connected":5`, `"round_trip_ms":{`, `"lost":0`, `"throughput_per_sec":`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON report lacks %s: %s", key, b)
		}
	}
}

func TestRunStream(t *testing.T) {
	noLeaks(t)
	p := &peer{deltas: 3}
	url := start(t, p)
	rep := run(t, Options{URL: url, Devices: 3, Rate: 50, Duration: 300 * time.Millisecond, Drain: drainAll, Stream: true})
	if rep.Sent < 5 || rep.Replied != rep.Sent {
		t.Fatalf("sent %d replied %d, want at least 5, all replied", rep.Sent, rep.Replied)
	}
	if rep.StreamedRuns != rep.Sent || rep.DeltaFrames != 3*rep.Sent || rep.DeltasPerRun != 3 || rep.MaxDeltasPerRun != 3 {
		t.Errorf("streamed runs %d, delta frames %d, %.1f per run, max %d; want %d runs of 3 deltas",
			rep.StreamedRuns, rep.DeltaFrames, rep.DeltasPerRun, rep.MaxDeltasPerRun, rep.Sent)
	}
	if rep.FirstDelta.N != int(rep.Sent) || rep.FirstDelta.P50 > rep.RoundTrip.P50 {
		t.Errorf("first delta %+v, want one sample per message, before the reply (round trip %+v)", rep.FirstDelta, rep.RoundTrip)
	}
	if rep.UnexpectedFrames != 0 || rep.DeltaGaps+rep.LateDeltas+rep.DeltaMismatches != 0 {
		t.Errorf("anomalies: unexpected %d gaps %d late %d mismatches %d", rep.UnexpectedFrames, rep.DeltaGaps, rep.LateDeltas, rep.DeltaMismatches)
	}
	if err := rep.Err(); err != nil {
		t.Errorf("Err() = %v", err)
	}
	var out strings.Builder
	rep.WriteText(&out)
	if !strings.Contains(out.String(), "3.0 per run") {
		t.Errorf("the table lacks the deltas per run:\n%s", out.String())
	}

	// Without Stream the devices do not ask, and the server sends none.
	plain := run(t, Options{URL: url, Devices: 2, Rate: 50, Duration: 100 * time.Millisecond, Drain: drainAll})
	if plain.DeltaFrames != 0 || plain.UnexpectedFrames != 0 || plain.Replied != plain.Sent {
		t.Errorf("without stream: %d deltas, %d unexpected, %d of %d replied", plain.DeltaFrames, plain.UnexpectedFrames, plain.Replied, plain.Sent)
	}
}

func TestRunStreamWrong(t *testing.T) {
	noLeaks(t)
	p := &peer{deltas: 3, gapDelta: 2, lateDelta: 3, wrongDelta: 4}
	url := start(t, p)
	rep := run(t, Options{URL: url, Devices: 1, Rate: 50, Duration: 200 * time.Millisecond, Drain: drainAll, Stream: true})
	if rep.Sent < 5 {
		t.Fatalf("sent %d, need at least 5 for every misbehaviour", rep.Sent)
	}
	// The gap also leaves the gapped run's text short of a piece.
	if rep.DeltaGaps != 1 || rep.LateDeltas != 1 || rep.DeltaMismatches != 2 {
		t.Errorf("gaps %d late %d mismatches %d, want 1 1 2", rep.DeltaGaps, rep.LateDeltas, rep.DeltaMismatches)
	}
	if err := rep.Err(); err == nil || !strings.Contains(err.Error(), "streamed text wrong: 1 deltas out of sequence, 1 after their reply, 2 replies") {
		t.Errorf("Err() = %v, want streamed text wrong", err)
	}
}

func TestRunMisbehavingServer(t *testing.T) {
	noLeaks(t)
	p := &peer{noReply: 3, twice: 5, dupAck: 7, errFrame: 9, errText: "agent exploded"}
	url := start(t, p)
	rep := run(t, Options{URL: url, Devices: 3, Rate: 50, Duration: 300 * time.Millisecond, Drain: 300 * time.Millisecond})

	if rep.Sent < 10 {
		t.Fatalf("sent %d, need at least 10 for every misbehaviour", rep.Sent)
	}
	if rep.Lost != 1 || rep.Replied != rep.Sent-1 || rep.Acked != rep.Sent {
		t.Errorf("sent %d acked %d replied %d lost %d, want lost 1, one reply short", rep.Sent, rep.Acked, rep.Replied, rep.Lost)
	}
	if rep.DuplicateReplies != 1 || rep.DuplicateAcks != 1 {
		t.Errorf("duplicate replies %d acks %d, want 1 and 1", rep.DuplicateReplies, rep.DuplicateAcks)
	}
	if rep.ErrorFrames != 1 || len(rep.ErrorTexts) != 1 || rep.ErrorTexts[0] != (Count{Text: "agent exploded", Count: 1}) {
		t.Errorf("error frames %d %v, want 1× agent exploded", rep.ErrorFrames, rep.ErrorTexts)
	}
	if rep.RoundTrip.N != int(rep.Replied) {
		t.Errorf("round trip samples %d, want one per distinct reply %d", rep.RoundTrip.N, rep.Replied)
	}
	err := rep.Err()
	if err == nil || !strings.Contains(err.Error(), "1 of") || !strings.Contains(err.Error(), "lost") {
		t.Errorf("Err() = %v, want a lost message", err)
	}
}

func TestRunConnectFailures(t *testing.T) {
	noLeaks(t)
	p := &peer{reject401: 2}
	url := start(t, p)
	rep := run(t, Options{URL: url, Devices: 5, Rate: 20, Duration: 200 * time.Millisecond, Drain: drainAll})

	if rep.DevicesConnected != 3 || rep.DevicesFailed != 2 {
		t.Errorf("connected %d failed %d, want 3 and 2", rep.DevicesConnected, rep.DevicesFailed)
	}
	if len(rep.ConnectErrors) != 1 || rep.ConnectErrors[0].Count != 2 ||
		!strings.Contains(rep.ConnectErrors[0].Text, "401") ||
		!strings.Contains(rep.ConnectErrors[0].Text, "device not allowed") {
		t.Errorf("connect errors %v, want 2× a 401 with the server's text", rep.ConnectErrors)
	}
	if rep.Lost != 0 || rep.Replied != rep.Sent || rep.Sent == 0 {
		t.Errorf("sent %d replied %d lost %d, want the connected devices to work", rep.Sent, rep.Replied, rep.Lost)
	}
	if err := rep.Err(); err == nil || !strings.Contains(err.Error(), "2 of 5 devices failed") {
		t.Errorf("Err() = %v, want 2 of 5 devices failed", err)
	}
}

func TestRunToken(t *testing.T) {
	noLeaks(t)
	url := start(t, &peer{token: "s3cret"})
	rep := run(t, Options{URL: url, Devices: 2, Duration: 50 * time.Millisecond, Token: "s3cret"})
	if rep.DevicesConnected != 2 {
		t.Errorf("with the token: connected %d, want 2 (errors %v)", rep.DevicesConnected, rep.ConnectErrors)
	}
	rep = run(t, Options{URL: url, Devices: 2, Duration: 50 * time.Millisecond, Token: "wrong"})
	if rep.DevicesFailed != 2 || len(rep.ConnectErrors) != 1 || !strings.Contains(rep.ConnectErrors[0].Text, "HTTP 401") {
		t.Errorf("with a wrong token: failed %d errors %v, want 2× HTTP 401", rep.DevicesFailed, rep.ConnectErrors)
	}
}

func TestRunNoServer(t *testing.T) {
	noLeaks(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	rep := run(t, Options{URL: addr, Devices: 4, Rate: 10, Duration: 50 * time.Millisecond})
	if rep.DevicesFailed != 4 || rep.DevicesConnected != 0 || rep.Sent != 0 {
		t.Errorf("failed %d connected %d sent %d, want 4 0 0", rep.DevicesFailed, rep.DevicesConnected, rep.Sent)
	}
	if len(rep.ConnectErrors) != 1 || rep.ConnectErrors[0].Count != 4 || !strings.Contains(rep.ConnectErrors[0].Text, "refused") {
		t.Errorf("connect errors %v, want 4× connection refused", rep.ConnectErrors)
	}
}

func TestRunConnectTimeout(t *testing.T) {
	noLeaks(t)
	url := start(t, &peer{silent: true})
	rep := run(t, Options{URL: url, Devices: 3, Duration: 50 * time.Millisecond, ConnectTimeout: 200 * time.Millisecond})
	if rep.DevicesFailed != 3 || len(rep.ConnectErrors) != 1 || !strings.Contains(rep.ConnectErrors[0].Text, "no connected frame within 200ms") {
		t.Errorf("failed %d errors %v, want 3× no connected frame within 200ms", rep.DevicesFailed, rep.ConnectErrors)
	}
}

func TestRunHeartbeat(t *testing.T) {
	noLeaks(t)
	p := &peer{heartbeat: 1}
	url := start(t, p)
	rep := run(t, Options{URL: url, Devices: 4, Rate: 0, Duration: 1300 * time.Millisecond})
	if rep.Sent != 0 || rep.DevicesConnected != 4 {
		t.Errorf("sent %d connected %d, want an idle run with 4 devices", rep.Sent, rep.DevicesConnected)
	}
	// One ping per device after 1s, none before.
	if rep.PingsSent != 4 || p.pings.Load() != 4 || rep.Pongs != 4 || rep.MissedPongs != 0 {
		t.Errorf("pings sent %d (server got %d) pongs %d missed %d, want 4 4 4 0",
			rep.PingsSent, p.pings.Load(), rep.Pongs, rep.MissedPongs)
	}
	if rep.Disconnected != 0 || rep.Err() != nil {
		t.Errorf("disconnected %d err %v", rep.Disconnected, rep.Err())
	}
}

func TestRunCancel(t *testing.T) {
	noLeaks(t)
	url := start(t, &peer{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	rep, err := Run(ctx, Options{URL: url, Devices: 3, Rate: 30, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Cancelled, not run out: the run's own account of how long it sent
	// is far short of its minute (a run that ignored the cancel would
	// also keep the test a minute).
	if rep.DurationMs >= float64(30*time.Second/time.Millisecond) {
		t.Errorf("sent for %.0f ms of a minute after a cancel at 300ms", rep.DurationMs)
	}
	if !rep.Interrupted || rep.Sent == 0 || rep.DevicesConnected != 3 {
		t.Errorf("interrupted %v sent %d connected %d, want an interrupted run that sent", rep.Interrupted, rep.Sent, rep.DevicesConnected)
	}
}

func TestRunHold(t *testing.T) {
	noLeaks(t)
	url := start(t, &peer{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	status := &lineWriter{lines: make(chan string, 4)}
	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Run(ctx, Options{URL: url, Devices: 6, Hold: true, Status: status})
		done <- result{rep, err}
	}()
	select {
	case line := <-status.lines:
		if line != "connected 6 devices\n" {
			t.Errorf("status line %q, want %q", line, "connected 6 devices\n")
		}
	case <-time.After(testwait.Deadline):
		t.Fatal("no status line in hold mode")
	}
	select {
	case <-done:
		t.Fatal("Run returned before cancel in hold mode")
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if !res.rep.Hold || res.rep.DevicesConnected != 6 || res.rep.Err() != nil {
		t.Errorf("hold report: hold %v connected %d err %v", res.rep.Hold, res.rep.DevicesConnected, res.rep.Err())
	}
}

type lineWriter struct{ lines chan string }

func (w *lineWriter) Write(b []byte) (int, error) {
	w.lines <- string(b)
	return len(b), nil
}

func TestRunOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		want string
	}{
		{"no URL", Options{Devices: 1, Duration: time.Second}, "server URL is required"},
		{"bad scheme", Options{URL: "ftp://x", Devices: 1, Duration: time.Second}, "scheme must be"},
		{"no devices", Options{URL: "ws://x", Duration: time.Second}, "devices must be at least 1"},
		{"negative rate", Options{URL: "ws://x", Devices: 1, Rate: -1, Duration: time.Second}, "rate must be"},
		{"no duration", Options{URL: "ws://x", Devices: 1}, "duration must be positive"},
		{"hold with rate", Options{URL: "ws://x", Devices: 1, Rate: 1, Hold: true}, "use it with rate 0"},
		{"blank text", Options{URL: "ws://x", Devices: 1, Duration: time.Second, Text: "  "}, "text must not be blank"},
		{"negative connect rate", Options{URL: "ws://x", Devices: 1, Duration: time.Second, ConnectRate: -5}, "connect rate must be positive"},
		{"stream in client mode", Options{URL: "ws://x", Devices: 1, Duration: time.Second, Client: true, Stream: true}, "stream is measured by the lean devices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Run(context.Background(), tt.opt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run error = %v, want %q", err, tt.want)
			}
			if rep != nil {
				t.Errorf("Run returned a report with an error")
			}
		})
	}
}

// Connections failing the same way count as one kind, whatever their
// ephemeral port.
func TestCounterGroupsByKind(t *testing.T) {
	c := counter{limit: 5}
	for port := 40000; port < 40008; port++ {
		c.add(fmt.Sprintf("read tcp 127.0.0.1:%d->127.0.0.1:8080: read: connection reset by peer", port))
		c.add(fmt.Sprintf("write tcp [::1]:%d->[::1]:8080: write: broken pipe", port))
	}
	c.add("dial tcp 127.0.0.1:8080: connect: connection refused")
	want := []Count{
		{"read tcp 127.0.0.1:8080: read: connection reset by peer", 8},
		{"write tcp [::1]:8080: write: broken pipe", 8},
		{"dial tcp 127.0.0.1:8080: connect: connection refused", 1},
	}
	if got := c.counts(); !slices.Equal(got, want) {
		t.Fatalf("counts\n%v\nwant\n%v", got, want)
	}
}

func TestCounter(t *testing.T) {
	c := counter{limit: 2}
	for _, s := range []string{"a", "b", "a", "c", "d", "c", "b"} {
		c.add(s)
	}
	want := []Count{{"a", 2}, {"b", 2}, {otherText, 3}}
	got := c.counts()
	if len(got) != len(want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("counts %v, want %v", got, want)
		}
	}
}
