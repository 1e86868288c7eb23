package server

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/statusapi"
)

// The spec's seven focused tests and its acceptance path, each over a real
// WebSocket on loopback against the real server.

// Focused 1 / acceptance 1, 2, 6: connect returns connected with a stable
// session id, and a reconnect with the same peer_id keeps it.
func TestConnectReturnsStableSessionID(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	c := dial(t, ts.ws, nil)
	got := c.connect("device-001")
	want := &link.Connected{ChannelID: "terminal-dev", SessionID: "terminal-dev:local:device-001", HeartbeatSeconds: 30}
	if *got != *want {
		t.Fatalf("connected = %+v, want %+v", got, want)
	}
	c.ws.Close()

	again := dial(t, ts.ws, nil)
	if got := again.connect("device-001"); got.SessionID != want.SessionID {
		t.Fatalf("reconnect session_id %q, want %q", got.SessionID, want.SessionID)
	}
	// A thread id makes its own session.
	th := dial(t, ts.ws, nil)
	th.send(&link.Connect{PeerID: "device-002", ThreadID: "kitchen"})
	if got := readAs[*link.Connected](th); got.SessionID != "terminal-dev:local:device-002:kitchen" {
		t.Fatalf("threaded session_id %q", got.SessionID)
	}
}

// Focused 2 / acceptance 3, 4, 5: a message goes through the runtime and
// the bus and comes back as ack plus the final assistant message.
func TestMessagePublishesThroughRuntime(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(false)
	ts := startServer(t, nil, runner)
	c := dial(t, ts.ws, nil)
	c.connect("device-001")
	c.send(&link.Message{MessageID: "m-001", Text: "你好"})

	ack := readAs[*link.Ack](c)
	if *ack != (link.Ack{MessageID: "m-001", SessionID: "terminal-dev:local:device-001", Accepted: true}) {
		t.Fatalf("ack = %+v", ack)
	}
	reply := readAs[*link.Message](c)
	if reply.Role != "assistant" || reply.MessageID != "m-001" || reply.RunID == "" ||
		reply.Text != agent.EchoReply("你好") || reply.FinishReason != "stop" {
		t.Fatalf("reply = %+v", reply)
	}
	if n := runner.runs.Load(); n != 1 {
		t.Fatalf("agent ran %d times, want 1", n)
	}
	// The path in events, in order (acceptance 7: message events visible).
	ts.waitEvent(t, events.OutboundDelivered, "m-001")
	var names []string
	for _, e := range ts.events(t) {
		if e.MessageID == "m-001" {
			names = append(names, e.Event)
			if e.RunID != reply.RunID {
				t.Errorf("event %s run_id %q, want %q", e.Event, e.RunID, reply.RunID)
			}
		}
	}
	want := []string{events.InboundAccepted, events.DirectRunStarted, events.DirectRunFinished, events.OutboundDelivered}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v, want %v", names, want)
	}
	// The session log: metadata first, then the user record, the run's
	// start (a system record) and the assistant record.
	flushSessions(t, ts)
	lines := readLines(t, filepath.Join(ts.cfg.Workspace, "sessions", "terminal-dev:local:device-001.jsonl"))
	if len(lines) != 4 {
		t.Fatalf("session log has %d lines, want 4:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[2], `"role":"system"`) || !strings.Contains(lines[2], `"event":"run_started"`) {
		t.Fatalf("line 3 = %s, want the run_started record", lines[2])
	}
	lines = append(lines[:2], lines[3:]...)
	var meta map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &meta)
	if meta["_type"] != "metadata" || meta["key"] != "terminal-dev:local:device-001" {
		t.Fatalf("first line is not the metadata record: %s", lines[0])
	}
	for i, role := range []string{"user", "assistant"} {
		var rec map[string]any
		_ = json.Unmarshal([]byte(lines[i+1]), &rec)
		if rec["role"] != role || rec["message_id"] != "m-001" || rec["run_id"] != reply.RunID || rec["timestamp"] == "" {
			t.Fatalf("line %d = %s, want a %s record with message_id and run_id", i+2, lines[i+1], role)
		}
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// Focused 3: a duplicate message id is not published again; it gets
// duplicate:true with pending while running and the cached reply when done.
func TestDuplicateMessageIDIsNotRunTwice(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts := startServer(t, nil, runner)
	c := dial(t, ts.ws, nil)
	c.connect("device-001")

	c.send(&link.Message{MessageID: "m-1", Text: "first"})
	first := readAs[*link.Ack](c)
	<-runner.started
	c.send(&link.Message{MessageID: "m-1", Text: "first"})
	dup := readAs[*link.Ack](c)
	if !dup.Duplicate || !dup.Pending || dup.Reply != nil || !dup.Accepted {
		t.Fatalf("duplicate while running: %+v, want duplicate pending", dup)
	}
	close(runner.gate)
	reply := readAs[*link.Message](c)
	if reply.RunID == "" || reply.Text != agent.EchoReply("first") {
		t.Fatalf("reply %+v", reply)
	}
	c.send(&link.Message{MessageID: "m-1", Text: "first"})
	done := readAs[*link.Ack](c)
	if !done.Duplicate || done.Pending || done.Reply == nil || *done.Reply != *reply {
		t.Fatalf("duplicate after run: %+v (reply %+v), want the cached reply %+v", done, done.Reply, reply)
	}
	c.alive() // and nothing else was sent: no second reply
	if n := runner.runs.Load(); n != 1 {
		t.Fatalf("agent ran %d times, want 1", n)
	}
	if got := ts.rt.Metrics.Inbound.Value("terminal-dev"); got != 1 {
		t.Fatalf("inbound published %d times, want 1", got)
	}
	if first.Duplicate {
		t.Fatalf("first ack marked duplicate: %+v", first)
	}
	ts.waitEvent(t, events.InboundDuplicate, "m-1")
}

// Focused 4: a disconnect before the reply records outbound_unclaimed; the
// run is not cancelled, and the reply reaches the device when it resends.
func TestDisconnectBeforeOutboundRecordsUnclaimed(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts := startServer(t, nil, runner)
	c := dial(t, ts.ws, nil)
	c.connect("device-001")
	c.send(&link.Message{MessageID: "m-9", Text: "are you there"})
	readAs[*link.Ack](c)
	<-runner.started
	c.ws.Close()
	ts.waitEvent(t, events.TerminalDisconnected, "")
	close(runner.gate)
	ev := ts.waitEvent(t, events.OutboundUnclaimed, "m-9")
	if ev.PeerID != "device-001" {
		t.Fatalf("unclaimed event %+v", ev)
	}
	if got := ts.rt.Metrics.Unclaimed.Value("terminal-dev"); got != 1 {
		t.Fatalf("unclaimed metric %d", got)
	}
	// Nothing lost: the device comes back and resends.
	back := dial(t, ts.ws, nil)
	back.connect("device-001")
	back.send(&link.Message{MessageID: "m-9", Text: "are you there"})
	ack := readAs[*link.Ack](back)
	if !ack.Duplicate || ack.Reply == nil || ack.Reply.Text != agent.EchoReply("are you there") {
		t.Fatalf("resend ack %+v", ack)
	}
	if n := runner.runs.Load(); n != 1 {
		t.Fatalf("agent ran %d times, want 1", n)
	}
}

// Focused 5: an unknown frame type gets an error frame; the connection stays.
func TestUnknownFrameTypeKeepsConnection(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	c := dial(t, ts.ws, nil)
	c.connect("device-001")
	c.sendRaw(`{"type":"example"}`)
	e := c.expectError("Unsupported websocket frame type: example", link.CodeBadFrame)
	if e.Error != "Unsupported websocket frame type: example" {
		t.Fatalf("error text %q differs from the spec's", e.Error)
	}
	c.alive()
	c.send(&link.Message{MessageID: "m-2", Text: "still here"})
	readAs[*link.Ack](c)
	readAs[*link.Message](c)
}

// Focused 6 / acceptance 7: channel status exposes websocket_url and the
// connected peer count, with every field the spec lists.
func TestChannelStatusExposesURLAndPeers(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	var raw struct{ Channels []map[string]any }
	getJSON(t, ts.http.URL+"/api/channels", &raw)
	if len(raw.Channels) != 1 {
		t.Fatalf("channels: %+v", raw.Channels)
	}
	for _, field := range []string{"channel_id", "kind", "mode", "display_name", "enabled", "state", "account_id",
		"last_event_at", "websocket_url", "capabilities", "connected_peers"} {
		if _, ok := raw.Channels[0][field]; !ok {
			t.Errorf("channel status lacks %q: %v", field, raw.Channels[0])
		}
	}
	caps := raw.Channels[0]["capabilities"].(map[string]any)
	for _, c := range []string{"receive_text", "send_text", "persistent_connection"} {
		if caps[c] != true {
			t.Errorf("capability %s = %v", c, caps[c])
		}
	}
	host := strings.TrimPrefix(ts.http.URL, "http://")
	if got := raw.Channels[0]["websocket_url"]; got != "ws://"+host+"/api/channels/terminal-dev/ws" {
		t.Fatalf("websocket_url %v", got)
	}

	var st struct {
		Channels []statusapi.ChannelStatus
		Status   string
	}
	getJSON(t, ts.http.URL+"/api/status", &st)
	if st.Status != "ok" || st.Channels[0].ConnectedPeers != 0 || st.Channels[0].State != "running" ||
		st.Channels[0].Kind != "terminal" || st.Channels[0].Mode != "websocket" || st.Channels[0].DisplayName != "Terminal Dev" {
		t.Fatalf("status before connect: %+v", st)
	}
	a, b := dial(t, ts.ws, nil), dial(t, ts.ws, nil)
	a.connect("a")
	b.connect("b")
	getJSON(t, ts.http.URL+"/api/status", &st)
	if st.Channels[0].ConnectedPeers != 2 || st.Channels[0].LastEventAt == nil {
		t.Fatalf("status with two peers: %+v", st.Channels[0])
	}
	ts.waitEvent(t, events.TerminalConnected, "")
	ts.waitEvent(t, events.AdapterStarted, "")
}

// Focused 7: the config loader takes kind=terminal, mode=websocket through
// the channel config, and the server serves that channel.
func TestConfigTerminalWebsocketChannel(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`{
	  "channels": {"desk": {"enabled": true, "kind": "terminal", "mode": "websocket", "account_id": "office",
	    "displayName": "Desk", "config": {"heartbeat_seconds": 12, "maxMessageChars": 100}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, func(c *config.Config) { c.Channels = cfg.Channels; c.Agents = cfg.Agents }, nil)
	c := dial(t, strings.Replace(ts.ws, "terminal-dev", "desk", 1), nil)
	got := c.connect("dev")
	if got.SessionID != "desk:office:dev" || got.HeartbeatSeconds != 12 {
		t.Fatalf("connected %+v", got)
	}
	c.send(&link.Message{MessageID: "m", Text: strings.Repeat("x", 101)})
	c.expectError("text is 101 characters; this channel accepts at most 100", link.CodeBadMessage)
}
