package diag

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/events"
	"termlink/server/registry"
	"termlink/server/throttle"
)

// fakeHost is the API's host: one channel "ch", peers as given (online,
// listing diag), the events kept.
type fakeHost struct {
	mu     sync.Mutex
	peers  map[string]registry.Peer
	events []events.Event
}

func newFakeHost(peers ...string) *fakeHost {
	h := &fakeHost{peers: map[string]registry.Peer{}}
	since := "2024-01-01T00:00:00Z"
	for _, p := range peers {
		h.peers[p] = registry.Peer{PeerID: p, Online: true, Capabilities: []string{link.CapDiag}, ConnectedSince: &since}
	}
	return h
}

func (h *fakeHost) Channel(id string) bool { return id == "ch" }

func (h *fakeHost) Peer(_, peerID string) (registry.Peer, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.peers[peerID]
	return p, ok
}

func (h *fakeHost) Event(_ string, e events.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

func (h *fakeHost) Operator(f http.HandlerFunc) http.HandlerFunc { return f }

func (h *fakeHost) lastEvent() events.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) == 0 {
		return events.Event{}
	}
	return h.events[len(h.events)-1]
}

// loopback is a Remote to one edge's API, as the cluster's transport is:
// the request goes as bytes, the edge serves it on its own goroutine with
// its own context, and the asker waits for the answer or its ctx. held
// names the node holding each peer ("": none; "here": the asker).
type loopback struct {
	edge *API
	node string
	held map[string]string
	// answer, when set, stands for the edge's answer (a bad one).
	answer []byte
	err    error
	ctx    context.Context // the edge node's
	wg     sync.WaitGroup
}

func (l *loopback) Ask(ctx context.Context, _, peerID string, req []byte) (string, []byte, error) {
	switch l.held[peerID] {
	case "":
		return "", nil, ErrNotConnected
	case "here":
		return "", nil, ErrNotSent
	}
	if l.answer != nil || l.err != nil {
		return l.node, l.answer, l.err
	}
	done := make(chan []byte, 1)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		done <- l.edge.ServeRemote(l.ctx, req)
	}()
	select {
	case b := <-done:
		return l.node, b, nil
	case <-ctx.Done():
		return l.node, nil, ctx.Err()
	}
}

type remoteRig struct {
	asker, edge       *API
	askerR, edgeR     *Requests
	askerHost         *fakeHost
	edgeSent          *sent
	remote            *loopback
	askerLog, edgeLog *syncbuf.Buffer
	mux               *http.ServeMux
}

// newRemoteRig is two nodes: the asker, whose connections hold nobody,
// and the edge holding the peers "kiosk" (answering with answer) and
// "mute".
func newRemoteRig(t *testing.T, answer func(*link.Diag) *link.DiagResult) *remoteRig {
	t.Helper()
	rig := &remoteRig{askerHost: newFakeHost("kiosk", "mute", "nowhere", "queued"), askerLog: &syncbuf.Buffer{}, edgeLog: &syncbuf.Buffer{}}
	gate := func(buf *syncbuf.Buffer) *throttle.Gate {
		g := throttle.New(slog.New(slog.NewTextHandler(buf, nil)), throttle.Options{Burst: 100, Every: time.Hour})
		t.Cleanup(g.Close)
		return g
	}
	ctx, cancel := context.WithCancel(context.Background())
	rig.remote = &loopback{node: "edge-a", ctx: ctx, held: map[string]string{"kiosk": "edge-a", "mute": "edge-a", "queued": "edge-a"}}
	t.Cleanup(func() { cancel(); rig.remote.wg.Wait() })
	rig.askerR = New(Options{Send: (&sent{refuse: true}).send, Log: slog.New(slog.NewTextHandler(rig.askerLog, nil)),
		Outside: gate(rig.askerLog), Remote: rig.remote})
	rig.asker = NewAPI(rig.askerR, rig.askerHost)
	rig.edgeSent = &sent{next: make(chan *link.Diag, 64)}
	edgeSend := rig.edgeSent.send
	rig.edgeR = New(Options{Send: func(ch, peer string, f link.Frame) bool {
		if peer == "queued" { // its queue of fleet frames is full
			return false
		}
		return edgeSend(ch, peer, f)
	}, Log: slog.New(slog.NewTextHandler(rig.edgeLog, nil)), Outside: gate(rig.edgeLog), Remote: rig.remote})
	rig.edge = NewAPI(rig.edgeR, newFakeHost("kiosk", "mute", "queued"))
	rig.remote.edge = rig.edge
	// The edge's device: answers kiosk's frames as answer says.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case d := <-rig.edgeSent.next:
				if res := answer(d); res != nil {
					if _, err := rig.edgeR.Report("ch", "kiosk", res); err != nil {
						t.Errorf("the edge refused the device's answer: %v", err)
					}
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	rig.mux = http.NewServeMux()
	rig.asker.Routes(rig.mux)
	return rig
}

// call serves one request on the asker, on the test's goroutine.
func (rig *remoteRig) call(t *testing.T, method, path string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, "/api/channels/ch/peers/"+path, nil)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	rig.mux.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// In a cluster, a request on a node that does not hold the device goes
// to the node that does, and the operator sees what one server shows:
// the log as text, the self-test's verdict, the device's own error 502,
// no answer 504 within the asker's timeout (the edge waits no longer),
// a peer no node holds 409 naming it, a connection there that did not
// take the request 409, each an event on the asker's log; the edge's
// waiting places are freed; the bytes asked reach the device.
func TestRemoteRequests(t *testing.T) {
	rig := newRemoteRig(t, func(d *link.Diag) *link.DiagResult {
		switch {
		case d.Kind == link.DiagLogs && d.Bytes == 7:
			return &link.DiagResult{RequestID: d.RequestID, Kind: d.Kind, Error: "the log is locked"}
		case d.Kind == link.DiagLogs && d.Bytes == 9:
			return nil // never answers
		case d.Kind == link.DiagLogs:
			return &link.DiagResult{RequestID: d.RequestID, Kind: d.Kind, Text: "line one\nline two\n"}
		}
		return &link.DiagResult{RequestID: d.RequestID, Kind: d.Kind, Text: "selftest: PASS\n", OK: true}
	})

	if code, body := rig.call(t, "GET", "kiosk/logs?bytes=500"); code != 200 || body != "line one\nline two\n" {
		t.Fatalf("logs: %d %q", code, body)
	}
	rig.edgeSent.mu.Lock()
	if got := rig.edgeSent.frames[0]; got.Bytes != 500 || got.Kind != link.DiagLogs {
		t.Errorf("the device got %+v", got)
	}
	rig.edgeSent.mu.Unlock()
	if e := rig.askerHost.lastEvent(); e.Event != EventLogs || e.PeerID != "kiosk" || !strings.HasPrefix(e.Detail, "by : 18 bytes in") {
		t.Errorf("logs event %+v", e)
	}
	code, body := rig.call(t, "POST", "kiosk/selftest")
	var st SelftestAnswer
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || !st.OK || st.Text != "selftest: PASS\n" {
		t.Fatalf("selftest: %d %s", code, body)
	}
	if code, body := rig.call(t, "GET", "kiosk/logs?bytes=7"); code != 502 || !strings.Contains(body, "peer kiosk: the log is locked") {
		t.Errorf("the device's error: %d %s", code, body)
	}
	if code, body := rig.call(t, "GET", "nowhere/logs"); code != 409 || !strings.Contains(body, "peer nowhere is not connected") {
		t.Errorf("no node holds it: %d %s", code, body)
	}
	if e := rig.askerHost.lastEvent(); e.PeerID != "nowhere" || e.Detail != "by : peer nowhere is not connected" {
		t.Errorf("its event %+v", e)
	}
	if code, body := rig.call(t, "GET", "queued/logs"); code != 409 || !strings.Contains(body, "peer queued's connection on this server did not take the request") {
		t.Errorf("the edge's connection did not take it: %d %s", code, body)
	}

	rig.asker.LogsTimeout = 50 * time.Millisecond // the edge's stays 15 s: the asker's wait bounds it
	if code, body := rig.call(t, "GET", "kiosk/logs?bytes=9"); code != 504 || !strings.Contains(body, "peer kiosk did not answer the logs request within 50ms") {
		t.Errorf("no answer: %d %s", code, body)
	}
	if e := rig.askerHost.lastEvent(); !strings.Contains(e.Detail, "did not answer the logs request within 50ms") {
		t.Errorf("its event %+v", e)
	}
	rig.remote.wg.Wait() // the edge served it, and gave up too
	if n, m := rig.edgeR.Waiting(), rig.askerR.Waiting(); n != 0 || m != 0 {
		t.Errorf("%d requests wait on the edge, %d on the asker, want none", n, m)
	}
}

// What the node holding the device answers badly, or not at all, is a
// 502 naming that node, never a crash; the asker's bounds count the
// requests it sent elsewhere.
func TestRemoteBadAnswers(t *testing.T) {
	rig := newRemoteRig(t, func(d *link.Diag) *link.DiagResult {
		return &link.DiagResult{RequestID: d.RequestID, Kind: d.Kind, Text: "ok"}
	})
	big := strings.Repeat("x", MaxRemoteAnswerBytes+1)
	for _, c := range []struct {
		answer string
		err    error
		want   string
	}{
		{"", errors.New("nats: no responders"), "peer kiosk: the node holding the device edge-a did not answer: nats: no responders"},
		{"not json", nil, "edge-a answered badly: the answer is not JSON"},
		{big, nil, "more than"},
		{`{"outcome":"maybe"}`, nil, `outcome \"maybe\" is none known`},
		{`{"outcome":"answered"}`, nil, "the answer has no result"},
		{`{"outcome":"answered","result":{"type":"diag_result","request_id":"r","kind":"selftest"}}`, nil, `of kind \"selftest\", not \"logs\"`},
		{`{"outcome":"answered","result":{"type":"ping"}}`, nil, "a ping frame, not diag_result"},
		{`{"outcome":"answered","result":{"type":"diag_result","request_id":"","kind":"logs"}}`, nil, "request_id"},
		{`{"outcome":"answered","result":{"type":"diag_result","request_id":"r","kind":"logs","text":"` + strings.Repeat("y", link.MaxDiagBytes+1) + `"}}`, nil, "text"},
		{`{"outcome":"timeout","result":{"type":"diag_result","request_id":"r","kind":"logs"}}`, nil, `the answer \"timeout\" carries a result`},
		{`{"outcome":"refused","detail":"diag request: kind must be"}`, nil, "edge-a refused the request: diag request: kind must be"},
	} {
		rig.remote.answer, rig.remote.err = []byte(c.answer), c.err
		if c.answer == "" {
			rig.remote.answer = nil
		}
		code, body := rig.call(t, "GET", "kiosk/logs")
		if code != 502 || !strings.Contains(body, c.want) {
			t.Errorf("answer %.80q (%v): %d %s, want 502 %q", c.answer, c.err, code, body, c.want)
		}
	}
	if !strings.Contains(rig.askerLog.String(), "a bad answer from the node holding the device") {
		t.Errorf("no warning of the bad answers:\n%s", rig.askerLog.String())
	}

	// The edge's transport busy: 429.
	rig.remote.answer, rig.remote.err = nil, ErrTooMany
	if code, body := rig.call(t, "GET", "kiosk/logs"); code != 429 || !strings.Contains(body, "too many") {
		t.Errorf("busy: %d %s", code, body)
	}

	// The asker's bounds hold the requests sent elsewhere: one waits at
	// the edge, the fifth for the same peer is refused on the asker.
	block := make(chan struct{})
	var wg sync.WaitGroup
	rig.askerR.opt.Remote = blockingRemote{block}
	for range DefaultMaxPerPeer {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = rig.askerR.Request(context.Background(), "ch", "kiosk", link.DiagLogs, 10)
		}()
	}
	testwait.Until(t, "the asker's requests sent elsewhere", func() bool { return rig.askerR.Waiting() == DefaultMaxPerPeer })
	if _, err := rig.askerR.Request(context.Background(), "ch", "kiosk", link.DiagLogs, 10); !errors.Is(err, ErrTooMany) {
		t.Errorf("past the asker's bound: %v, want ErrTooMany", err)
	}
	close(block)
	wg.Wait()
}

// blockingRemote answers when block is closed.
type blockingRemote struct{ block chan struct{} }

func (b blockingRemote) Ask(ctx context.Context, _, _ string, _ []byte) (string, []byte, error) {
	<-b.block
	return "edge-a", encodeRemoteAnswer(outTimeout, "", nil), nil
}

// The edge's side: a bad request is refused saying why (and logged
// through the gate), never run.
func TestServeRemoteRefusesBadRequests(t *testing.T) {
	rig := newRemoteRig(t, func(d *link.Diag) *link.DiagResult { return nil })
	for _, c := range []struct{ req, want string }{
		{"", "not JSON"},
		{"{", "not JSON"},
		{`{"channel":"ch","peer":"kiosk","kind":"logs"}`, "wait_ms must be from 1"},
		{`{"channel":"ch","peer":"kiosk","kind":"reboot","wait_ms":10}`, "kind must be"},
		{`{"channel":"ch","peer":"kiosk","kind":"logs","bytes":70000,"wait_ms":10}`, "bytes must be from 0 to 65536"},
		{`{"channel":"","peer":"kiosk","kind":"logs","wait_ms":10}`, "channel must be"},
		{`{"channel":"ch","peer":"` + strings.Repeat("p", 300) + `","kind":"logs","wait_ms":10}`, "peer must be"},
		{`{"channel":"other","peer":"kiosk","kind":"logs","wait_ms":10}`, `no channel "other" on this node`},
		{strings.Repeat(" ", MaxRemoteRequestBytes+1), "more than 4096"},
	} {
		a, _, err := decodeRemoteAnswer(rig.edge.ServeRemote(context.Background(), []byte(c.req)), link.DiagLogs)
		if err != nil || a.Outcome != outRefused || !strings.Contains(a.Detail, c.want) {
			t.Errorf("request %.60q: %+v %v, want refused %q", c.req, a, err, c.want)
		}
	}
	rig.edgeSent.mu.Lock()
	defer rig.edgeSent.mu.Unlock()
	if len(rig.edgeSent.frames) != 0 {
		t.Errorf("the device got %+v", rig.edgeSent.frames)
	}
	if !strings.Contains(rig.edgeLog.String(), "a request from another node refused") {
		t.Errorf("not logged:\n%s", rig.edgeLog.String())
	}
}

// The decoders take anything without a panic, and what they take keeps
// the bounds and encodes back to itself.
func FuzzDecodeRemoteRequest(f *testing.F) {
	f.Add([]byte(`{"channel":"ch","peer":"kiosk","kind":"logs","bytes":100,"wait_ms":15000}`))
	f.Add([]byte(`{"channel":"ch","peer":"kiosk","kind":"selftest","wait_ms":1}`))
	f.Add([]byte(`{"channel":"\u00e9","peer":"k","kind":"logs","bytes":-1,"wait_ms":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := decodeRemoteRequest(data)
		if err != nil {
			return
		}
		b, err := encodeRemoteRequest(q)
		if err != nil {
			t.Fatalf("%+v taken but does not encode: %v", q, err)
		}
		if q2, err := decodeRemoteRequest(b); err != nil || q2 != q {
			t.Fatalf("%+v encodes to %s, which decodes to %+v %v", q, b, q2, err)
		}
	})
}

func FuzzDecodeRemoteAnswer(f *testing.F) {
	f.Add([]byte(`{"outcome":"answered","result":{"type":"diag_result","request_id":"r","kind":"logs","text":"hi"}}`), false)
	f.Add([]byte(`{"outcome":"answered","result":{"type":"diag_result","request_id":"r","kind":"selftest","ok":true}}`), true)
	f.Add([]byte(`{"outcome":"timeout","detail":"no"}`), false)
	f.Add([]byte(`{"outcome":"refused","detail":"\xff"}`), true)
	f.Fuzz(func(t *testing.T, data []byte, selftest bool) {
		kind := link.DiagLogs
		if selftest {
			kind = link.DiagSelftest
		}
		a, res, err := decodeRemoteAnswer(data, kind)
		if err != nil {
			return
		}
		if (a.Outcome == outAnswered) != (res != nil) {
			t.Fatalf("outcome %q with result %+v", a.Outcome, res)
		}
		if res != nil && (res.Kind != kind || len(res.Text) > link.MaxDiagBytes || len(res.Error) > link.MaxUpdateReasonBytes) {
			t.Fatalf("a result past its bounds taken: %+v", res)
		}
		b := encodeRemoteAnswer(a.Outcome, a.Detail, res)
		a2, res2, err := decodeRemoteAnswer(b, kind)
		if err != nil || a2.Outcome != a.Outcome || a2.Detail != a.Detail || (res != nil && *res2 != *res) {
			t.Fatalf("%s encodes to %s, which decodes to %+v %+v %v", data, b, a2, res2, err)
		}
	})
}
