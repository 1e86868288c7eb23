package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/config"
	"termlink/server/events"
)

// countingRunner is the built-in echo agent with a run counter and, when
// gate is set, a hold that keeps each run going until the test releases it.
type countingRunner struct {
	runs    atomic.Int64
	started chan string // message ids as runs start (buffered)
	gate    chan struct{}
}

func newCountingRunner(gated bool) *countingRunner {
	r := &countingRunner{started: make(chan string, 100)}
	if gated {
		r.gate = make(chan struct{})
	}
	return r
}

func (r *countingRunner) Run(ctx context.Context, req agent.Request, p agent.Progress) agent.Result {
	r.runs.Add(1)
	r.started <- req.MessageID
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return agent.Result{Text: "cancelled", FinishReason: link.FinishCancelled}
		}
	}
	return agent.Echo{}.Run(ctx, req, p)
}

func (r *countingRunner) Close() error { return nil }

type testServer struct {
	*Server
	http *httptest.Server
	ws   string // ws:// URL of channel terminal-dev
}

// startServer runs a real Server on a loopback port with the default
// config changed by mutate; runner, when set, answers agent "echo".
func startServer(t *testing.T, mutate func(*config.Config), runner agent.Runner) *testServer {
	t.Helper()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	if mutate != nil {
		mutate(cfg)
	}
	opt := Options{}
	if runner != nil {
		opt.Runners = map[string]agent.Runner{"echo": runner}
	}
	return serve(t, cfg, opt)
}

// serve is startServer with explicit options.
func serve(t *testing.T, cfg *config.Config, opt Options) *testServer {
	t.Helper()
	s, err := New(cfg, opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.Start()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		hs.Close()
	})
	return &testServer{Server: s, http: hs, ws: "ws" + strings.TrimPrefix(hs.URL, "http") + "/api/channels/terminal-dev/ws"}
}

type client struct {
	t  *testing.T
	ws *websocket.Conn
}

func dial(t *testing.T, url string, hdr http.Header) *client {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(url, hdr)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (HTTP %d)", url, err, status)
	}
	t.Cleanup(func() { ws.Close() })
	return &client{t: t, ws: ws}
}

func (c *client) send(f link.Frame) {
	c.t.Helper()
	c.sendRaw(string(link.MustEncode(f)))
}

func (c *client) sendRaw(s string) {
	c.t.Helper()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
		c.t.Fatalf("write %s: %v", s, err)
	}
}

// read returns the next frame; the test fails if none comes in 10 s.
func (c *client) read() link.Frame {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	f, err := link.Decode(data)
	if err != nil {
		c.t.Fatalf("server sent an undecodable frame %s: %v", data, err)
	}
	return f
}

func readAs[T link.Frame](c *client) T {
	c.t.Helper()
	f := c.read()
	v, ok := f.(T)
	if !ok {
		var want T
		c.t.Fatalf("got %s frame %+v, want %T", f.FrameType(), f, want)
	}
	return v
}

func (c *client) connect(peer string, caps ...string) *link.Connected {
	c.t.Helper()
	if len(caps) == 0 {
		caps = []string{link.CapText}
	}
	c.send(&link.Connect{PeerID: peer, DeviceName: "test-" + peer, Capabilities: caps})
	return readAs[*link.Connected](c)
}

// alive proves the connection is still open and served: ping gets pong.
func (c *client) alive() {
	c.t.Helper()
	c.send(&link.Ping{})
	readAs[*link.Pong](c)
}

// expectError reads an error frame and checks its text and code.
func (c *client) expectError(contains, code string) *link.Error {
	c.t.Helper()
	e := readAs[*link.Error](c)
	if !strings.Contains(e.Error, contains) {
		c.t.Fatalf("error %q, want it to contain %q", e.Error, contains)
	}
	if e.Code != code {
		c.t.Fatalf("error code %q, want %q (error %q)", e.Code, code, e.Error)
	}
	return e
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
	return resp.StatusCode
}

func (ts *testServer) events(t *testing.T) []events.Event {
	t.Helper()
	var out struct{ Events []events.Event }
	if code := getJSON(t, ts.http.URL+"/api/channels/terminal-dev/events?limit=1000", &out); code != 200 {
		t.Fatalf("events: HTTP %d", code)
	}
	return out.Events
}

// waitEvent polls the events API until an event named name for messageID
// shows up (the test fails after 10 s).
func (ts *testServer) waitEvent(t *testing.T, name, messageID string) events.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range ts.events(t) {
			if e.Event == name && (messageID == "" || e.MessageID == messageID) {
				return e
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s event for message %q; events: %+v", name, messageID, ts.events(t))
	return events.Event{}
}

// smallBufferDialer dials with a tiny receive buffer so that a client that
// stops reading backs the server up quickly.
var smallBufferDialer = &websocket.Dialer{
	NetDial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		if err == nil {
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
		}
		return c, err
	},
	HandshakeTimeout: 5 * time.Second,
}
