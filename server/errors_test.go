package server

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/statusapi"
	"termlink/server/wschannel"
)

// Every error case of the spec gets an error frame and the connection
// stays open (ping still answered, a good message still served).
func TestErrorFramesKeepConnection(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		ch.Config.MaxMessageChars = 10
		c.Channels["terminal-dev"] = ch
	}, nil)
	before := []struct {
		name, frame, contains, code string
	}{
		{"message before connect", `{"type":"message","message_id":"m-1","text":"hi"}`, "send a connect frame with your peer_id before message frames", link.CodeNotConnected},
		{"cancel before connect", `{"type":"cancel","message_id":"m-1"}`, "before cancel frames", link.CodeNotConnected},
		{"connect without peer_id", `{"type":"connect","device_name":"x"}`, `connect frame: field "peer_id" is missing or empty`, link.CodeBadFrame},
		{"connect with a bad peer_id", `{"type":"connect","peer_id":"a:b"}`, `peer_id "a:b" must be`, link.CodeBadFrame},
		{"invalid JSON", `{"type":"message",`, "invalid JSON", link.CodeBadFrame},
		{"no type", `{"peer_id":"x"}`, `missing "type" field`, link.CodeBadFrame},
	}
	c := dial(t, ts.ws, nil)
	for _, tt := range before {
		t.Run(tt.name, func(t *testing.T) {
			c.t = t
			c.sendRaw(tt.frame)
			c.expectError(tt.contains, tt.code)
			c.alive()
		})
	}
	c.t = t
	c.connect("device-001")
	after := []struct {
		name, frame, contains, code, messageID string
	}{
		{"missing message_id", `{"type":"message","text":"hi"}`, `message frame: field "message_id" is missing or empty`, link.CodeBadFrame, ""},
		{"missing text", `{"type":"message","message_id":"m-2"}`, "message m-2: text is missing or blank", link.CodeBadMessage, "m-2"},
		{"blank text", `{"type":"message","message_id":"m-3","text":"  \n\t "}`, "message m-3: text is missing or blank", link.CodeBadMessage, "m-3"},
		{"oversized text", `{"type":"message","message_id":"m-4","text":"ééééééééééé"}`, "text is 11 characters; this channel accepts at most 10 (maxMessageChars)", link.CodeBadMessage, "m-4"},
		{"mistyped text", `{"type":"message","message_id":"m-5","text":5}`, `message frame: field "text" must be a string, got number`, link.CodeBadFrame, "m-5"},
		{"unknown type", `{"type":"example"}`, "Unsupported websocket frame type: example", link.CodeBadFrame, ""},
		{"server-only type", `{"type":"ack","message_id":"x","session_id":"s","accepted":true}`, "Unsupported websocket frame type: ack", link.CodeBadFrame, ""},
		{"assistant role from a device", `{"type":"message","role":"assistant","message_id":"m-6","text":"x"}`, "sent by the server", link.CodeBadFrame, "m-6"},
		{"another peer on this connection", `{"type":"connect","peer_id":"other"}`, `already connected as peer_id "device-001"`, link.CodeBadFrame, ""},
		{"cancel of nothing", `{"type":"cancel","message_id":"nope"}`, "message nope is not queued or running", link.CodeUnknownRun, "nope"},
		{"not JSON", `hello`, "invalid JSON", link.CodeBadFrame, ""},
	}
	for _, tt := range after {
		t.Run(tt.name, func(t *testing.T) {
			c.t = t
			c.sendRaw(tt.frame)
			if e := c.expectError(tt.contains, tt.code); e.MessageID != tt.messageID {
				t.Fatalf("error message_id %q, want %q", e.MessageID, tt.messageID)
			}
			c.alive()
		})
	}
	c.t = t
	// A binary frame is refused the same way.
	if err := c.ws.WriteMessage(websocket.BinaryMessage, []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	c.expectError("binary frames are not supported", link.CodeBadFrame)
	// Same peer connecting again on its connection is answered again.
	if got := c.connect("device-001"); got.SessionID != "terminal-dev:local:device-001" {
		t.Fatalf("second connect %+v", got)
	}
	c.send(&link.Message{MessageID: "ok", Text: "fine"})
	readAs[*link.Ack](c)
	if r := readAs[*link.Message](c); r.MessageID != "ok" {
		t.Fatalf("reply %+v", r)
	}
	for _, e := range ts.events(t) {
		if strings.Contains(e.Preview+e.Detail, "ééééé") {
			t.Fatalf("event keeps the rejected text: %+v", e)
		}
	}
}

// A second live connection for the same peer replaces the first, which
// gets a close frame saying why.
func TestSecondConnectionReplacesFirst(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	old := dial(t, ts.ws, nil)
	old.connect("device-001")
	cur := dial(t, ts.ws, nil)
	cur.connect("device-001")

	_ = old.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err := old.ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != wschannel.CloseReplaced || !strings.Contains(ce.Text, "replaced by a newer connection for peer_id device-001") {
		t.Fatalf("old connection got %v, want close %d saying it was replaced", err, wschannel.CloseReplaced)
	}
	cur.send(&link.Message{MessageID: "m", Text: "hi"})
	readAs[*link.Ack](cur)
	readAs[*link.Message](cur)
	ev := ts.waitEvent(t, events.TerminalDisconnected, "")
	if !strings.Contains(ev.Detail, "replaced") {
		t.Fatalf("disconnect event %+v", ev)
	}
	var st struct{ Channels []statusapi.ChannelStatus }
	getJSON(t, ts.http.URL+"/api/channels", &st)
	if st.Channels[0].ConnectedPeers != 1 || ts.rt.Metrics.WS.Connections.Value("terminal-dev") != 1 {
		t.Fatalf("peers %d, connections gauge %d; want 1 and 1", st.Channels[0].ConnectedPeers, ts.rt.Metrics.WS.Connections.Value("terminal-dev"))
	}
}

// The server closes a connection that stays silent for 2.5 heartbeats.
func TestSilentConnectionIsClosed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		ch.Config.HeartbeatSeconds = 1
		c.Channels["terminal-dev"] = ch
	}, nil)
	c := dial(t, ts.ws, nil)
	if got := c.connect("quiet"); got.HeartbeatSeconds != 1 {
		t.Fatalf("connected %+v", got)
	}
	// Pings keep it open past 2.5 s...
	for i := 0; i < 4; i++ {
		time.Sleep(time.Second)
		c.alive()
	}
	// ...silence ends it.
	_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ws.ReadMessage(); err == nil {
		t.Fatal("silent connection still open")
	}
	ev := ts.waitEvent(t, events.TerminalDisconnected, "")
	if !strings.Contains(ev.Detail, "silent for 2.5s") {
		t.Fatalf("disconnect reason %q", ev.Detail)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	withTokens := func(tok config.Tokens) func(*config.Config) {
		return func(c *config.Config) {
			ch := c.Channels["terminal-dev"]
			ch.Config.Tokens = tok
			c.Channels["terminal-dev"] = ch
		}
	}
	t.Run("list", func(t *testing.T) {
		ts := startServer(t, withTokens(config.Tokens{Any: []string{"s3cret-token"}}), nil)
		// A wrong bearer token is refused with 401 before the upgrade.
		_, resp, err := websocket.DefaultDialer.Dial(ts.ws, http.Header{"Authorization": {"Bearer wrong-token"}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("dial with a wrong token: err %v, resp %v; want 401", err, resp)
		}
		// No token at all: error frame, then close.
		c := dial(t, ts.ws, nil)
		c.send(&link.Connect{PeerID: "dev"})
		c.expectError("connect refused for peer_id dev: no token", link.CodeUnauthorized)
		_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _, err = c.ws.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != wschannel.CloseUnauthorized {
			t.Fatalf("after refusal: %v, want close %d", err, wschannel.CloseUnauthorized)
		}
		// The right token, as a header or in the connect frame.
		ok := dial(t, ts.ws, http.Header{"Authorization": {"Bearer s3cret-token"}})
		ok.connect("dev")
		inFrame := dial(t, ts.ws, nil)
		inFrame.send(&link.Connect{PeerID: "dev", Token: "s3cret-token"})
		readAs[*link.Connected](inFrame)
		// The token is now bound to "dev" (trust on first use).
		other := dial(t, ts.ws, nil)
		other.send(&link.Connect{PeerID: "dev2", Token: "s3cret-token"})
		other.expectError("this token is bound to another peer_id", link.CodeUnauthorized)
		ts.waitEvent(t, events.TerminalRefused, "")
		for _, e := range ts.events(t) {
			if strings.Contains(e.Detail+e.Preview, "s3cret") || strings.Contains(e.Detail+e.Preview, "wrong-token") {
				t.Fatalf("event log shows a token: %+v", e)
			}
		}
	})
	t.Run("per peer", func(t *testing.T) {
		ts := startServer(t, withTokens(config.Tokens{ByPeer: map[string]string{"a": "token-a", "b": "token-b"}}), nil)
		c := dial(t, ts.ws, http.Header{"Authorization": {"Bearer token-a"}})
		c.send(&link.Connect{PeerID: "b"}) // a's token for b
		c.expectError("peer_id b has its own token in the config", link.CodeUnauthorized)
		good := dial(t, ts.ws, http.Header{"Authorization": {"Bearer token-b"}})
		good.connect("b")
	})
}

// A client that stops reading is dropped when a write makes no progress
// for the write timeout; other clients are served meanwhile.
func TestSlowClientIsDropped(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	ch := cfg.Channels["terminal-dev"]
	ch.Config.SendQueue = 4
	ch.Config.MaxMessageChars = 1_000_000
	cfg.Channels["terminal-dev"] = ch
	ts := serve(t, cfg, Options{writeStall: 300 * time.Millisecond})
	ws, _, err := smallBufferDialer.Dial(ts.ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	slow := &client{t: t, ws: ws}
	slow.connect("slow")
	big := strings.Repeat("y", 900_000)
	fast := dial(t, ts.ws, nil)
	fast.connect("fast")
	// The slow client sends big messages and reads nothing: each reply
	// echoes ~900 kB back until the socket and then the queue are full.
	for i := 0; i < 60 && ts.rt.Metrics.WS.Dropped.Value("terminal-dev") == 0; i++ {
		_ = ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Message{MessageID: "big-" + string(rune('a'+i%26)) + time.Now().Format("150405.000000"), Text: big})); err != nil {
			break // the server dropped us
		}
		// Meanwhile the fast client is served.
		fast.send(&link.Message{MessageID: "f-" + time.Now().Format("150405.000000000"), Text: "hi"})
		readAs[*link.Ack](fast)
		readAs[*link.Message](fast)
	}
	ev := ts.waitEvent(t, events.TerminalDisconnected, "")
	if ev.PeerID != "slow" || !strings.Contains(ev.Detail, "client too slow, dropped: write made no progress for 300ms") {
		t.Fatalf("disconnect %+v, want the slow peer dropped for a stalled write", ev)
	}
	if ts.rt.Metrics.WS.Dropped.Value("terminal-dev") != 1 {
		t.Fatalf("dropped metric %d", ts.rt.Metrics.WS.Dropped.Value("terminal-dev"))
	}
	fast.alive()
}

// The device can cancel a running message; its reply says cancelled.
func TestCancelRunningMessage(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts := startServer(t, nil, runner)
	c := dial(t, ts.ws, nil)
	c.connect("dev", link.CapText, link.CapCancel)
	c.send(&link.Message{MessageID: "long", Text: "take your time"})
	readAs[*link.Ack](c)
	<-runner.started
	c.send(&link.Message{MessageID: "next", Text: "queued"})
	readAs[*link.Ack](c)
	c.send(&link.Cancel{MessageID: "next"}) // waiting: dropped from the queue
	if r := readAs[*link.Message](c); r.MessageID != "next" || r.FinishReason != link.FinishCancelled {
		t.Fatalf("cancel of a queued message: %+v", r)
	}
	c.send(&link.Cancel{MessageID: "long"}) // running: interrupted
	if r := readAs[*link.Message](c); r.MessageID != "long" || r.FinishReason != link.FinishCancelled {
		t.Fatalf("cancel of the running message: %+v", r)
	}
	if n := runner.runs.Load(); n != 1 {
		t.Fatalf("runs %d, want 1 (the queued one never started)", n)
	}
	_ = ts
}

func TestHTTPEndpoints(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	c := dial(t, ts.ws, nil)
	c.connect("m1")
	c.send(&link.Message{MessageID: "x", Text: "hello metrics"})
	readAs[*link.Ack](c)
	readAs[*link.Message](c)
	c.send(&link.Message{MessageID: "x", Text: "hello metrics"})
	readAs[*link.Ack](c)
	ts.waitEvent(t, events.OutboundDelivered, "x")

	resp, err := http.Get(ts.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp)
	for _, want := range []string{
		`termlink_connections{channel="terminal-dev"} 1`,
		`termlink_inbound_total{channel="terminal-dev"} 1`,
		`termlink_inbound_duplicates_total{channel="terminal-dev"} 1`,
		`termlink_outbound_delivered_total{channel="terminal-dev"} 1`,
		`termlink_run_seconds_count{channel="terminal-dev"} 1`,
		"# TYPE termlink_outbound_unclaimed_total counter",
		"termlink_wal_records_total 2", // the user record and the reply
		"termlink_wal_segments 1",
		"# TYPE termlink_wal_syncs_total counter",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("metrics content type %q", ct)
	}
	resp, _ = http.Get(ts.http.URL + "/healthz")
	if b := readBody(t, resp); resp.StatusCode != 200 || b != "ok\n" {
		t.Errorf("healthz %d %q", resp.StatusCode, b)
	}
	var e map[string]any
	if code := getJSON(t, ts.http.URL+"/api/channels/nope/events", &e); code != 404 || !strings.Contains(e["error"].(string), `no channel "nope"`) {
		t.Errorf("events of an unknown channel: %d %v", code, e)
	}
	if code := getJSON(t, ts.http.URL+"/api/channels/terminal-dev/events?limit=x", &e); code != 400 || !strings.Contains(e["error"].(string), "limit must be") {
		t.Errorf("bad limit: %d %v", code, e)
	}
	var evs struct{ Events []events.Event }
	getJSON(t, ts.http.URL+"/api/channels/terminal-dev/events?limit=2", &evs)
	if len(evs.Events) != 2 || evs.Events[0].Seq >= evs.Events[1].Seq {
		t.Errorf("limit=2 gave %+v, want the two newest, newest last", evs.Events)
	}
	if code := getJSON(t, strings.Replace(ts.http.URL+"/api/channels/nope/ws", "terminal-dev", "nope", 1), &e); code != 404 {
		t.Errorf("ws of an unknown channel: %d", code)
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}
