package fleet

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/fanout"
	"termlink/server/httpapi"
	"termlink/server/metrics"
	"termlink/server/registry"
	"termlink/server/session"
)

// fakeRegistry is a Registry over a fixed set of peers.
type fakeRegistry struct {
	peers map[string]registry.Peer // by peer id; one channel
	live  fanout.Hub[registry.Peer]
}

func (f *fakeRegistry) Get(_, peerID string) (registry.Peer, bool) {
	p, ok := f.peers[peerID]
	return p, ok
}
func (f *fakeRegistry) Count(string) int                         { return len(f.peers) }
func (f *fakeRegistry) Online(string, int) (int, map[string]int) { return len(f.peers), nil }
func (f *fakeRegistry) Subscribe(_ string, buf int) *fanout.Sub[registry.Peer] {
	return f.live.Subscribe(buf)
}

func (f *fakeRegistry) Page(_ string, _ registry.Filter, after string, limit int) ([]registry.Peer, string) {
	var ids []string
	for id := range f.peers {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var out []registry.Peer
	for _, id := range ids {
		if len(out) == limit {
			return out, out[len(out)-1].PeerID
		}
		out = append(out, f.peers[id])
	}
	return out, ""
}

// fakeRuns holds runs by session; Cancel removes one.
type fakeRuns struct {
	mu   sync.Mutex
	runs map[string][]string // session -> message ids
	log  []string            // cancels asked for, "session/message"
}

func (f *fakeRuns) PeerRuns(base string) []Run {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Run
	for s, ids := range f.runs {
		if s == base || strings.HasPrefix(s, base+":") {
			for _, id := range ids {
				out = append(out, Run{s, id})
			}
		}
	}
	slices.SortFunc(out, func(a, b Run) int { return strings.Compare(a.MessageID, b.MessageID) })
	return out
}

func (f *fakeRuns) PeerSessions(base string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []string{base}
	for s := range f.runs {
		if strings.HasPrefix(s, base+":") {
			out = append(out, s)
		}
	}
	slices.Sort(out[1:])
	return out
}

func (f *fakeRuns) Cancel(session, id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, session+"/"+id)
	i := slices.Index(f.runs[session], id)
	if i < 0 {
		return false
	}
	f.runs[session] = slices.Delete(f.runs[session], i, i+1)
	return true
}

type fakeNotices struct{}

func (fakeNotices) Count(string, string) int { return 1 }
func (fakeNotices) ForPeer(_, peer string) any {
	return []map[string]string{{"text": "hello " + peer}}
}

type env struct {
	api     *API
	reg     *fakeRegistry
	runs    *fakeRuns
	events  *events.Log
	history map[string][]session.Record
	histErr error
	metrics *metrics.Registry
	mux     *http.ServeMux
}

func newEnv(t *testing.T, opt Options) *env {
	e := &env{
		reg: &fakeRegistry{peers: map[string]registry.Peer{
			"kiosk": {PeerID: "kiosk", ChannelID: "dev", SessionID: "dev:acct:kiosk", Online: true},
			"<b>&":  {PeerID: "<b>&", ChannelID: "dev"},
		}},
		runs:    &fakeRuns{runs: map[string][]string{}},
		events:  events.NewLog(100),
		history: map[string][]session.Record{},
		metrics: &metrics.Registry{},
		mux:     http.NewServeMux(),
	}
	e.api = New(Deps{
		Registry: e.reg, Channels: []Channel{{ID: "dev", AccountID: "acct", Events: e.events}},
		SessionKey: func(ch, acct, peer, thread string) string { return ch + ":" + acct + ":" + peer + thread },
		History: func(key string, n int) ([]session.Record, error) {
			if n != conversationRecords {
				t.Errorf("history of %s: %d records asked for, want %d", key, n, conversationRecords)
			}
			if e.histErr != nil {
				return nil, e.histErr
			}
			recs, ok := e.history[key]
			if !ok {
				return nil, fmt.Errorf("session: tail %s: %w", key, fs.ErrNotExist)
			}
			return recs, nil
		},
		Runs: e.runs, Notices: fakeNotices{}, Metrics: e.metrics, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, opt)
	t.Cleanup(e.api.Close)
	e.api.Routes(e.mux)
	return e
}

// do serves one request as op; it returns the status and the body.
func (e *env) do(method, path, body string) (int, string) {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r = httpapi.WithOperator(r, httpapi.Operator{Name: "otto", Role: config.RoleOperator})
	w := httptest.NewRecorder()
	e.mux.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func TestUnknownChannelAndPeer(t *testing.T) {
	e := newEnv(t, Options{})
	for _, path := range []string{"/api/channels/nope/peers", "/api/channels/nope/peers/kiosk", "/api/channels/nope/events", "/api/channels/nope/events/stream"} {
		if code, body := e.do("GET", path, ""); code != 404 || body != "{\n  \"error\": \"no channel \\\"nope\\\" is configured\"\n}\n" {
			t.Errorf("GET %s: %d %q", path, code, body)
		}
	}
	if code, body := e.do("POST", "/api/channels/dev/peers/zz/cancel", ""); code != 404 || !strings.Contains(body, `no peer \"zz\" has connected to channel dev`) {
		t.Errorf("cancel of an unknown peer: %d %s", code, body)
	}
}

// The peers page is one line, not HTML-escaped, in peer id order; its
// next_cursor reads back as the last peer id; a bad cursor is refused.
func TestPeersPage(t *testing.T) {
	e := newEnv(t, Options{})
	code, body := e.do("GET", "/api/channels/dev/peers?limit=1", "")
	want := `{"channel_id":"dev","peers":[{"peer_id":"<b>&","channel_id":"dev",`
	if code != 200 || !strings.HasPrefix(body, want) || strings.Count(body, "\n") != 1 {
		t.Fatalf("first page: %d %s, want it to start %s", code, body, want)
	}
	if !strings.HasSuffix(body, `,"next_cursor":"`+peerCursor("<b>&")+`"}`+"\n") {
		t.Fatalf("first page ends %q", body[max(0, len(body)-60):])
	}
	code, body = e.do("GET", "/api/channels/dev/peers?limit=1&cursor="+peerCursor("<b>&"), "")
	if code != 200 || !strings.Contains(body, `"peer_id":"kiosk"`) || !strings.HasSuffix(body, `"next_cursor":null}`+"\n") {
		t.Fatalf("last page: %d %s", code, body)
	}
	for _, q := range []string{"limit=0", "limit=1001", "online=yes", "cursor=!!", "tag=bad"} {
		if code, body := e.do("GET", "/api/channels/dev/peers?"+q, ""); code != 400 {
			t.Errorf("?%s: %d %s, want 400", q, code, body)
		}
	}
}

// A peer's page: the conversation (user and assistant records only, times
// in UTC), what runs, its notices; a session never written is an empty
// conversation, a log that cannot be read a 500.
func TestPeerDetail(t *testing.T) {
	e := newEnv(t, Options{})
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local).Format(session.TimeLayout)
	e.history["dev:acct:kiosk"] = []session.Record{
		{Role: "user", Content: "hi", MessageID: "m-1", Timestamp: ts},
		{Role: "tool", Content: "x"},
		{Role: "assistant", Content: "hello", MessageID: "m-1", FinishReason: "stop", Timestamp: "not a time"},
	}
	e.runs.runs["dev:acct:kiosk:t1"] = []string{"m-3"}
	e.runs.runs["dev:acct:kiosk"] = []string{"m-2"}
	e.runs.runs["dev:acct:kiosk2"] = []string{"m-0"} // another peer's
	code, body := e.do("GET", "/api/channels/dev/peers/kiosk", "")
	for _, want := range []string{
		`"conversation": [` + "\n" + `    {` + "\n" + `      "role": "user",` + "\n" + `      "text": "hi",` + "\n" + `      "message_id": "m-1",` + "\n" +
			`      "timestamp": "` + time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local).UTC().Format(time.RFC3339) + `"`,
		`"finish_reason": "stop",` + "\n" + `      "timestamp": null`,
		`"running": [` + "\n" + `    "m-2",` + "\n" + `    "m-3"` + "\n" + `  ]`,
		`"text": "hello kiosk"`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("peer page: %d %s\nlacks %s", code, body, want)
		}
	}
	if strings.Contains(body, `"tool"`) {
		t.Errorf("peer page lists a tool record: %s", body)
	}
	code, body = e.do("GET", "/api/channels/dev/peers/%3Cb%3E&", "")
	if code != 200 || !strings.Contains(body, `"conversation": [],`) || !strings.Contains(body, `"running": [],`) {
		t.Errorf("peer with no session: %d %s", code, body)
	}
	e.histErr = errors.New("disk on fire")
	if code, body := e.do("GET", "/api/channels/dev/peers/kiosk", ""); code != 500 || !strings.Contains(body, "reading the session log of dev:acct:kiosk: disk on fire") {
		t.Errorf("unreadable log: %d %s", code, body)
	}
}

// Cancel: no body cancels what runs in every session of the peer; a
// message id is looked for in the peer's sessions; each cancel is an
// event naming the operator.
func TestCancel(t *testing.T) {
	e := newEnv(t, Options{})
	url := "/api/channels/dev/peers/kiosk/cancel"
	if code, body := e.do("POST", url, ""); code != 409 || !strings.Contains(body, "nothing is running for peer kiosk") {
		t.Fatalf("nothing running: %d %s", code, body)
	}
	e.runs.runs["dev:acct:kiosk"] = []string{"m-1", "m-2"}
	e.runs.runs["dev:acct:kiosk:t1"] = []string{"m-3"}
	if code, body := e.do("POST", url, `{"message_id": "m-9"}`); code != 404 || !strings.Contains(body, `message \"m-9\" is not queued or running for peer kiosk`) {
		t.Fatalf("unknown message: %d %s", code, body)
	}
	if fmt.Sprint(e.runs.log) != "[dev:acct:kiosk/m-9 dev:acct:kiosk:t1/m-9]" {
		t.Fatalf("m-9 looked for in %v, want the peer's sessions", e.runs.log)
	}
	if code, body := e.do("POST", url, `{"messageid": "m-1"}`); code != 400 || !strings.Contains(body, `request body: want {\"message_id\": \"...\"} (or none): `) || !strings.Contains(body, `unknown field \"messageid\"`) {
		t.Fatalf("misspelt field: %d %s", code, body)
	}
	if code, body := e.do("POST", url, `{"message_id": "`+strings.Repeat("x", maxCancelBody)+`"}`); code != 413 {
		t.Fatalf("oversized body: %d %.200s", code, body)
	}
	if code, body := e.do("POST", url, `{"message_id": "m-3"}`); code != 200 || body != "{\n  \"cancelled\": [\n    \"m-3\"\n  ]\n}\n" {
		t.Fatalf("cancel m-3: %d %s", code, body)
	}
	if code, body := e.do("POST", url, " "); code != 200 || body != "{\n  \"cancelled\": [\n    \"m-1\",\n    \"m-2\"\n  ]\n}\n" {
		t.Fatalf("cancel what runs: %d %s", code, body)
	}
	var got []string
	for _, ev := range e.events.Recent(-1) {
		if ev.Event == EventOperatorCancel && ev.PeerID == "kiosk" && ev.SessionID == "dev:acct:kiosk" &&
			ev.Detail == "cancelled by otto (operator) through the API" {
			got = append(got, ev.MessageID)
		}
	}
	if fmt.Sprint(got) != "[m-3 m-1 m-2]" {
		t.Fatalf("cancel events %v, want [m-3 m-1 m-2]", got)
	}
}

func TestEvents(t *testing.T) {
	e := newEnv(t, Options{})
	for i := range 6 {
		e.events.Add(events.Event{Event: "e", PeerID: fmt.Sprintf("p%d", i%2), Detail: fmt.Sprint(i)})
	}
	code, body := e.do("GET", "/api/channels/dev/events?peer_id=p1&limit=2", "")
	if code != 200 || strings.Contains(body, `"p0"`) || !strings.Contains(body, `"detail": "3"`) || !strings.Contains(body, `"detail": "5"`) || strings.Contains(body, `"detail": "1"`) {
		t.Errorf("p1's newest 2: %d %s", code, body)
	}
	if code, body := e.do("GET", "/api/channels/dev/events?limit=0", ""); code != 200 || body != "{\n  \"channel_id\": \"dev\",\n  \"events\": []\n}\n" {
		t.Errorf("limit=0: %d %q", code, body)
	}
	if code, body := e.do("GET", "/api/channels/dev/events?limit=-1", ""); code != 400 || !strings.Contains(body, `limit must be a non-negative integer, got \"-1\"`) {
		t.Errorf("limit=-1: %d %s", code, body)
	}
}

// The live stream says hello with the first peers, then events and peer
// changes; streams are bounded; StopStreams ends them and refuses new
// ones.
func TestEventStream(t *testing.T) {
	e := newEnv(t, Options{HelloPeers: 1, MaxStreams: 1})
	srv := httptest.NewServer(e.mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/channels/dev/events/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	next := func() string {
		t.Helper()
		var b strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream: %v (so far %q)", err, b.String())
			}
			if line == "\n" {
				return b.String()
			}
			b.WriteString(line)
		}
	}
	hello := next()
	if !strings.HasPrefix(hello, `event: hello`+"\n"+`data: {"channel_id":"dev","total":2,"peers":[{"peer_id":"<b>&"`) ||
		!strings.HasSuffix(hello, `"next_cursor":"`+peerCursor("<b>&")+`"}`+"\n") {
		t.Fatalf("hello %q", hello)
	}
	if e.api.StreamsOpen() != 1 {
		t.Fatalf("%d streams open, want 1", e.api.StreamsOpen())
	}
	if code, body := e.do("GET", "/api/channels/dev/events/stream", ""); code != 503 || !strings.Contains(body, "too many live event streams: 1 are open") {
		t.Fatalf("second stream: %d %s", code, body)
	}
	e.events.Add(events.Event{Event: "x:y\nz", PeerID: "kiosk"})
	if ev := next(); !strings.HasPrefix(ev, "event: x_y_z\nid: 0\ndata: {") || strings.Count(ev, "\n") != 3 {
		t.Fatalf("event %q", ev)
	}
	e.reg.live.Publish(registry.Peer{PeerID: "kiosk", Online: false})
	if ev := next(); !strings.HasPrefix(ev, "event: peer\ndata: {\"peer_id\":\"kiosk\"") {
		t.Fatalf("peer change %q", ev)
	}
	e.api.StopStreams()
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("the stream's end: %v", err)
	}
	if code, body := e.do("GET", "/api/channels/dev/events/stream", ""); code != 503 || !strings.Contains(body, "the server is shutting down") {
		t.Fatalf("stream after StopStreams: %d %s", code, body)
	}
	e.api.Close() // returns: the handler has ended
	if n := e.api.StreamsOpen(); n != 0 {
		t.Fatalf("%d streams open after Close", n)
	}
	var m bytes.Buffer
	e.metrics.WriteText(&m)
	for _, want := range []string{`termserver_event_streams_open{channel="dev"} 0`, `termserver_devices_online{channel="dev",tag=""} 2`} {
		if !strings.Contains(m.String(), want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, m.String())
		}
	}
}

// A subscriber that falls behind is dropped and counted.
func TestEventStreamLagged(t *testing.T) {
	e := newEnv(t, Options{StreamBuffer: 1})
	pr, pw := io.Pipe() // the stream's writes wait for a reader that never comes
	defer pr.Close()
	w := &pipeWriter{header: http.Header{}, w: pw}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.mux.ServeHTTP(w, httptest.NewRequest("GET", "/api/channels/dev/events/stream", nil))
	}()
	br := bufio.NewReader(pr)
	if hello, err := br.ReadString('\n'); err != nil || hello != "event: hello\n" {
		t.Fatalf("hello: %q %v", hello, err)
	}
	// Subscribed before hello: these fill the stream's buffer while its
	// next write waits for a reader.
	for i := range 10 {
		e.events.Add(events.Event{Event: "e", Detail: fmt.Sprint(i)})
	}
	pr.Close() // the handler's waiting write fails; its subscription has lagged
	<-done
	var m bytes.Buffer
	e.metrics.WriteText(&m)
	if !strings.Contains(m.String(), `termserver_event_streams_dropped_total{channel="dev"} 1`+"\n") {
		t.Errorf("a lagged stream not counted:\n%s", m.String())
	}
}

// pipeWriter is a ResponseWriter writing to a pipe.
type pipeWriter struct {
	header http.Header
	w      *io.PipeWriter
}

func (p *pipeWriter) Header() http.Header         { return p.header }
func (p *pipeWriter) WriteHeader(int)             {}
func (p *pipeWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeWriter) Flush()                      {}
