package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpserve"
	"termlink/server/statusapi"
	"termlink/server/wschannel"
)

// The delivery contract on the server's side of the socket: a device that
// reads is never dropped, whatever the server has to say to it at once.

// terminal is the adapter of channel terminal-dev.
func (ts *testServer) terminal() wschannel.Adapter {
	return ts.rt.Channels["terminal-dev"].Adapter
}

// noneDropped fails the test if a connection was dropped as too slow.
func (ts *testServer) noneDropped(t *testing.T) {
	t.Helper()
	if n := ts.rt.Metrics.WS.Dropped.Value("terminal-dev"); n != 0 {
		t.Fatalf("%d connections dropped as too slow", n)
	}
}

// channelConfig changes the config of channel terminal-dev.
func channelConfig(change func(*config.ChannelConfig)) func(*config.Config) {
	return func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		change(&ch.Config)
		c.Channels["terminal-dev"] = ch
	}
}

// noRateLimit lifts the per-peer rate for tests that flood on purpose.
var noRateLimit = channelConfig(func(cc *config.ChannelConfig) { cc.RatePerPeer, cc.RateBurst = 100000, 100000 })

// maskedFrame is a client-to-server WebSocket frame (RFC 6455 5.2).
func maskedFrame(opcode byte, payload []byte) []byte {
	b := []byte{0x80 | opcode}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		panic("frame too large for this helper")
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

// writeRaw writes frames to the client's socket in one write.
func (c *client) writeRaw(frames ...[]byte) {
	c.t.Helper()
	var all []byte
	for _, f := range frames {
		all = append(all, f...)
	}
	nc := c.ws.NetConn()
	_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(all); err != nil {
		c.t.Fatalf("raw write: %v", err)
	}
}

// readClose reads until the server's close frame and returns it.
func (c *client) readClose() *websocket.CloseError {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		_, data, err := c.ws.ReadMessage()
		var ce *websocket.CloseError
		switch {
		case errors.As(err, &ce):
			return ce
		case err != nil:
			c.t.Fatalf("read %v, want a close frame", err)
		}
		_ = data
	}
}

// An agent that prints 1,000 progress lines at once does not cost a
// device that reads promptly its connection: progress is coalesced per
// message and the final reply arrives (finding 2).
func TestProgressBurstKeepsDevice(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "chatty.sh")
	body := "#!/bin/sh\nread -r envelope\ni=0\nwhile [ $i -lt 1000 ]; do echo '{\"type\":\"progress\",\"text\":\"line '$i'\"}'; i=$((i+1)); done\necho '{\"type\":\"message\",\"text\":\"done\"}'\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, withTerminalAgent(config.TerminalAgent{Command: script}), nil)
	c := dial(t, ts.ws, nil)
	c.connect("chatty", link.CapText, link.CapProgress)
	for round := 0; round < 3; round++ {
		id := fmt.Sprintf("m%d", round)
		c.send(&link.Message{MessageID: id, Text: "talk a lot"})
		progress := 0
	frames:
		for {
			switch f := c.read().(type) {
			case *link.Ack:
			case *link.Progress:
				progress++
			case *link.Message:
				if f.MessageID != id || f.Text != "done" {
					t.Fatalf("reply %+v", f)
				}
				break frames
			default:
				t.Fatalf("unexpected %s frame %+v", f.FrameType(), f)
			}
		}
		// None is right too: the final reply drops the progress not
		// written yet, and the agent's whole output may be read before
		// the first progress frame is written (make check, once).
		if progress > 1000 {
			t.Fatalf("round %d: %d progress frames, want at most 1000", round, progress)
		}
	}
	c.alive()
	ts.noneDropped(t)
}

// 100 pings in one TCP write get 100 pongs, and the connection stays
// (finding 2: it got 11 pongs and a reset). The same for WebSocket pings.
func TestPingsInOneWrite(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	c := dial(t, ts.ws, nil)
	c.connect("pinger")
	ping := maskedFrame(websocket.TextMessage, link.MustEncode(&link.Ping{}))
	frames := make([][]byte, 100)
	for i := range frames {
		frames[i] = ping
	}
	c.writeRaw(frames...)
	for i := 0; i < 100; i++ {
		if _, ok := c.read().(*link.Pong); !ok {
			t.Fatalf("frame %d is not a pong", i)
		}
	}
	c.alive()

	pongs := make(chan struct{}, 200)
	c.ws.SetPongHandler(func(string) error { pongs <- struct{}{}; return nil })
	wsPing := maskedFrame(websocket.PingMessage, []byte("hb"))
	for i := range frames {
		frames[i] = wsPing
	}
	c.writeRaw(frames...)
	c.send(&link.Ping{})
	readAs[*link.Pong](c) // control pongs are handled while reading
	if len(pongs) != 100 {
		t.Fatalf("%d WebSocket pongs, want 100", len(pongs))
	}
	ts.noneDropped(t)
}

// Resending 300 answered message ids at once gets 300 acks with their
// replies, and no drop (finding 2: 167 acks, then a drop).
func TestResendAnsweredIDsAtOnce(t *testing.T) {
	t.Parallel()
	ts := startServer(t, noRateLimit, nil)
	c := dial(t, ts.ws, nil)
	c.connect("resender")
	const n = 300
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = maskedFrame(websocket.TextMessage, link.MustEncode(&link.Message{MessageID: fmt.Sprintf("r-%03d", i), Text: "hi"}))
	}
	c.writeRaw(frames...)
	answered := map[string]bool{}
	for len(answered) < n {
		switch f := c.read().(type) {
		case *link.Ack:
			if f.Reply != nil {
				answered[f.MessageID] = true
			}
		case *link.Message:
			answered[f.MessageID] = true
		case *link.Error: // a reply that found its queue full: ask again, as a device does
			if f.Code != link.CodeBusy {
				t.Fatalf("error %+v", f)
			}
			c.send(&link.Message{MessageID: f.MessageID, Text: "hi"})
		default:
			t.Fatalf("unexpected %s frame %+v", f.FrameType(), f)
		}
	}
	c.writeRaw(frames...) // the device reconnected and resends them all
	for i := 0; i < n; i++ {
		a := readAs[*link.Ack](c)
		if !a.Duplicate || a.Reply == nil || a.Reply.Text != agent.EchoReply("hi") {
			t.Fatalf("ack %d: %+v, want a duplicate with its reply", i, a)
		}
	}
	c.alive()
	ts.noneDropped(t)
}

// A reply queue that is full does not block the dispatcher and does not
// drop the device: each reply either goes out or its message gets a busy
// error, and the device's resend gets it from dedupe.
func TestReplyQueueOverflowAsksForResend(t *testing.T) {
	t.Parallel()
	ts := startServer(t, channelConfig(func(cc *config.ChannelConfig) { cc.SendQueue = 2 }), nil)
	c := dial(t, ts.ws, nil)
	c.connect("flooded")
	a := ts.terminal()
	const n = 200
	// 128 KiB replies, and the device reads nothing until all are handed
	// over: the socket buffers (a few MiB on loopback) fill, the writer
	// blocks, and the reply queue (4 x sendQueue) must overflow.
	big := strings.Repeat("r", 128<<10)
	taken := 0
	for i := 0; i < n; i++ { // as the dispatcher would, as fast as it can
		if a.Send(bus.Outbound{Kind: bus.Final, ChannelID: "terminal-dev", PeerID: "flooded", MessageID: fmt.Sprintf("x-%d", i), Text: big}) {
			taken++
		}
	}
	if taken == n {
		t.Fatalf("all %d replies of 128 KiB were taken by a device reading nothing: the reply queue is not bounded", n)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		switch f := c.read().(type) {
		case *link.Message:
			seen[f.MessageID] = true
		case *link.Error:
			if f.Code != link.CodeBusy || !strings.Contains(f.Error, "send the message again") {
				t.Fatalf("error %+v", f)
			}
			seen[f.MessageID] = true
		default:
			t.Fatalf("unexpected %s frame %+v", f.FrameType(), f)
		}
	}
	c.alive()
	if got := ts.rt.Metrics.WS.Deferred.Value("terminal-dev"); got != uint64(n-taken) {
		t.Fatalf("deferred metric %d, want %d", got, n-taken)
	}
}

// The peer is registered before connected goes out: a device that has
// read connected finds itself in /api/status (finding 10).
func TestStatusCountsPeerOnceConnected(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	for i := 1; i <= 200; i++ {
		c := dial(t, ts.ws, nil)
		c.connect(fmt.Sprintf("dev-%d", i))
		var st struct{ Channels []statusapi.ChannelStatus }
		getJSON(t, ts.http.URL+"/api/status", &st)
		if got := st.Channels[0].ConnectedPeers; got != i {
			t.Fatalf("after connected of peer %d, /api/status says %d peers", i, got)
		}
	}
}

// A WebSocket that sends no connect within connectTimeoutSeconds is
// closed with a reason, pings or not (finding 5).
func TestNoConnectIsClosed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, channelConfig(func(cc *config.ChannelConfig) { cc.ConnectTimeoutSeconds = 1 }), nil)
	c := dial(t, ts.ws, nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // keeps pinging, as the attacker did
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
			}
		}
	}()
	defer func() { close(stop); <-done }()
	c.send(&link.Ping{})
	ce := c.readClose()
	if ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "no connect frame within 1s") {
		t.Fatalf("close %d %q, want 1008 saying no connect came", ce.Code, ce.Text)
	}
	ev := ts.waitEvent(t, events.TerminalDisconnected, "")
	if !strings.Contains(ev.Detail, "no connect frame within 1s") {
		t.Fatalf("disconnect event %+v", ev)
	}
}

// Past the connection cap an upgrade gets 503 with a clear body, while
// /healthz and the API answer (finding 5).
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) { c.MaxConnections = 2 }, nil)
	a := dial(t, ts.ws, nil)
	dial(t, ts.ws, nil) // not even connected: it holds a descriptor all the same
	_, resp, err := websocket.DefaultDialer.Dial(ts.ws, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third dial: err %v, resp %v; want 503", err, resp)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "maximum of 2 WebSocket connections (maxConnections)") {
		t.Fatalf("503 body %q", body)
	}
	hz, err := http.Get(ts.http.URL + "/healthz")
	if err != nil || hz.StatusCode != 200 {
		t.Fatalf("/healthz: %v %v", err, hz)
	}
	hz.Body.Close()
	var st struct{ Channels []statusapi.ChannelStatus }
	getJSON(t, ts.http.URL+"/api/status", &st)
	// A closed connection makes room.
	a.ws.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ws, _, err := websocket.DefaultDialer.Dial(ts.ws, nil)
		if err == nil {
			ws.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no room after a close: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Past the per-peer rate a message gets busy and no ack; the device
// resends it later and it is taken.
func TestPeerRateLimit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, channelConfig(func(cc *config.ChannelConfig) { cc.RatePerPeer, cc.RateBurst = 1, 2 }), nil)
	c := dial(t, ts.ws, nil)
	c.connect("hasty")
	for i := 0; i < 3; i++ {
		c.send(&link.Message{MessageID: fmt.Sprintf("h%d", i), Text: "hi"})
	}
	acks, busy := 0, ""
	for acks < 2 || busy == "" {
		switch f := c.read().(type) {
		case *link.Ack:
			acks++
		case *link.Error:
			if f.Code != link.CodeBusy || !strings.Contains(f.Error, "faster than 1 messages a second") {
				t.Fatalf("error %+v", f)
			}
			busy = f.MessageID
		case *link.Message:
		}
	}
	if busy != "h2" {
		t.Fatalf("busy for %q, want h2", busy)
	}
	time.Sleep(1100 * time.Millisecond) // a token comes back
	c.send(&link.Message{MessageID: "h2", Text: "hi"})
	for {
		f := c.read()
		if m, ok := f.(*link.Message); ok && m.MessageID != "h2" {
			continue // h1's reply
		}
		if a, ok := f.(*link.Ack); !ok || a.MessageID != "h2" || a.Duplicate {
			t.Fatalf("got %s %+v, want h2's first ack", f.FrameType(), f)
		}
		break
	}
}

// Invalid UTF-8 closes with 1007; keys are case-sensitive; a duplicate
// key is refused naming it (finding 7).
func TestStrictWire(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	c := dial(t, ts.ws, nil)
	c.connect("strict")
	c.sendRaw(`{"type":"message","Type":"ping","message_id":"k","text":"hi"}`)
	c.expectError(`field "Type" is not known`, link.CodeBadFrame)
	c.sendRaw(`{"type":"message","message_id":"d1","message_id":"d2","text":"hi"}`)
	c.expectError(`field "message_id" appears twice`, link.CodeBadFrame)
	c.alive()
	c.sendRaw("{\"type\":\"message\",\"message_id\":\"col-\xff\",\"text\":\"hi\"}")
	c.expectError("not valid UTF-8", link.CodeBadFrame)
	if ce := c.readClose(); ce.Code != websocket.CloseInvalidFramePayloadData {
		t.Fatalf("close %d %q, want 1007", ce.Code, ce.Text)
	}
}

// A cancel reaches a message sent with a thread_id: it runs in the
// thread's session, not the connection's (finding 9).
func TestCancelThreadedMessage(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, agent.Echo{Delay: time.Minute})
	c := dial(t, ts.ws, nil)
	c.connect("threads", link.CapText, link.CapCancel)
	c.send(&link.Message{MessageID: "slow", Text: "wait", ThreadID: "kitchen"})
	if a := readAs[*link.Ack](c); a.SessionID != "terminal-dev:local:threads:kitchen" {
		t.Fatalf("ack %+v", a)
	}
	ts.waitEvent(t, events.DirectRunStarted, "slow")
	c.send(&link.Cancel{MessageID: "slow"})
	if r := readAs[*link.Message](c); r.MessageID != "slow" || r.FinishReason != link.FinishCancelled {
		t.Fatalf("reply %+v, want slow cancelled", r)
	}
	// Naming the thread works too.
	c.send(&link.Message{MessageID: "slow2", Text: "wait", ThreadID: "hall"})
	readAs[*link.Ack](c)
	c.send(&link.Cancel{MessageID: "slow2", ThreadID: "hall"})
	if r := readAs[*link.Message](c); r.MessageID != "slow2" || r.FinishReason != link.FinishCancelled {
		t.Fatalf("reply %+v, want slow2 cancelled", r)
	}
}

// Shutdown says goodbye with 1001.
func TestShutdownClosesWithGoingAway(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	c := dial(t, ts.ws, nil)
	c.connect("leaving")
	go ts.terminal().Close()
	if ce := c.readClose(); ce.Code != websocket.CloseGoingAway {
		t.Fatalf("close %d %q, want 1001", ce.Code, ce.Text)
	}
}

// httpServer serves ts's handler with lim, as Serve does with its
// defaults, and returns its address.
func (ts *testServer) httpServer(t *testing.T, lim httpserve.Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httpserve.New(ts.Handler(), lim, ts.log)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// expectClosed reads from conn until the server closes it.
func expectClosed(t *testing.T, conn net.Conn, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("%s: not closed by the server: %v", what, err)
	}
}

// Plain requests have read, write and idle timeouts; a WebSocket leaves
// them behind at the upgrade (finding 5).
func TestHTTPTimeouts(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	lim := httpserve.Limits{ReadHeader: 300 * time.Millisecond, Read: 300 * time.Millisecond, Write: 300 * time.Millisecond,
		Idle: 300 * time.Millisecond, HeaderMax: 4096}
	addr := ts.httpServer(t, lim)

	request := func(t *testing.T, req string) net.Conn {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_, _ = conn.Write([]byte(req))
		return conn
	}
	t.Run("body never sent", func(t *testing.T) {
		conn := request(t, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
		expectClosed(t, conn, "request without its body")
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		conn := request(t, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", err, resp)
		}
		resp.Body.Close()
		expectClosed(t, conn, "idle keep-alive connection")
	})
	t.Run("huge headers", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/healthz", nil)
		req.Header.Set("X-Junk", strings.Repeat("j", 64<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("status %d, want 431", resp.StatusCode)
		}
	})
	t.Run("websocket outlives them", func(t *testing.T) {
		c := dial(t, "ws://"+addr+"/api/channels/terminal-dev/ws", nil)
		c.connect("long-lived")
		time.Sleep(time.Second) // past every HTTP timeout
		c.send(&link.Message{MessageID: "later", Text: "still here"})
		readAs[*link.Ack](c)
		readAs[*link.Message](c)
	})
}
