package diag_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/diag"
	"termlink/server/servertest"
)

const opSecret, viewSecret = "operator-secret-token-0123456789", "viewer-secret-token-0123456789"

// rawDevice is a device on a plain WebSocket: it connects with caps and
// answers each diag frame with answer (nil: it never answers).
type rawDevice struct {
	t      *testing.T
	conn   *websocket.Conn
	mu     sync.Mutex
	wmu    sync.Mutex
	diags  []*link.Diag
	answer func(*link.Diag) *link.DiagResult
	done   chan struct{}
}

func dialDevice(t *testing.T, srv *servertest.Server, peer string, caps []string, answer func(*link.Diag) *link.DiagResult) *rawDevice {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &rawDevice{t: t, conn: c, answer: answer, done: make(chan struct{})}
	d.send(&link.Connect{PeerID: peer, Capabilities: caps, Version: "0.9"})
	connected := make(chan struct{})
	go d.read(connected)
	select {
	case <-connected:
	case <-time.After(20 * time.Second):
		t.Fatal("no connected frame")
	}
	t.Cleanup(d.close)
	return d
}

func (d *rawDevice) send(f link.Frame) {
	b, err := link.Encode(f)
	if err != nil {
		d.t.Error(err)
		return
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	d.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := d.conn.WriteMessage(websocket.TextMessage, b); err != nil {
		d.t.Logf("device write: %v", err)
	}
}

func (d *rawDevice) read(connected chan struct{}) {
	defer close(d.done)
	for {
		_, b, err := d.conn.ReadMessage()
		if err != nil {
			return
		}
		f, err := link.Decode(b)
		if err != nil {
			continue
		}
		switch f := f.(type) {
		case *link.Connected:
			close(connected)
		case *link.Diag:
			d.mu.Lock()
			d.diags = append(d.diags, f)
			d.mu.Unlock()
			if d.answer != nil {
				if res := d.answer(f); res != nil {
					d.send(res)
				}
			}
		}
	}
}

func (d *rawDevice) close() {
	d.conn.Close()
	<-d.done
}

type answer struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, method, url, token string) answer {
	t.Helper()
	var body io.Reader
	req, _ := http.NewRequest(method, url, body)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func startServer(t *testing.T) (*servertest.Server, string) {
	op, _ := config.NewAdminToken(opSecret, config.RoleOperator, "otto")
	view, _ := config.NewAdminToken(viewSecret, config.RoleViewer, "vera")
	srv := servertest.Start(t, func(c *config.Config) { c.Admin.Tokens = []config.AdminToken{op, view} })
	return srv, "http://" + srv.Addr + "/api/channels/terminal-dev/peers/"
}

// The API against a real termserver and a device on a raw WebSocket:
// logs as text/plain and a self-test as JSON, the request's bytes on the
// wire; the viewer role refused (a log may hold secrets); bytes past the
// bound 400; an unknown peer 404; a device that is offline, or that does
// not list "diag", 409 naming it; the device's own error 502; each
// request an event naming the operator.
func TestAPI(t *testing.T) {
	srv, base := startServer(t)
	dev := dialDevice(t, srv, "kiosk-1", []string{link.CapDiag}, func(d *link.Diag) *link.DiagResult {
		switch {
		case d.Kind == link.DiagLogs:
			return &link.DiagResult{RequestID: d.RequestID, Kind: d.Kind, Text: "time=now level=INFO msg=\"termd starting\"\n", OK: true}
		case d.Kind == link.DiagSelftest:
			return &link.DiagResult{RequestID: d.RequestID, Kind: d.Kind, Text: "selftest: PASS (5 checks)\n", OK: true}
		}
		return nil
	})
	dialDevice(t, srv, "old-termd", nil, nil)

	a := call(t, "GET", base+"kiosk-1/logs?bytes=5000", opSecret)
	if a.status != 200 || a.header.Get("Content-Type") != "text/plain; charset=utf-8" || !strings.Contains(a.body, `msg="termd starting"`) {
		t.Fatalf("logs: %+v", a)
	}
	a = call(t, "GET", base+"kiosk-1/logs", opSecret)
	dev.mu.Lock()
	if len(dev.diags) != 2 || dev.diags[0].Bytes != 5000 || dev.diags[1].Bytes != diag.DefaultLogBytes {
		t.Fatalf("diag frames: %+v", dev.diags)
	}
	dev.mu.Unlock()
	a = call(t, "POST", base+"kiosk-1/selftest", opSecret)
	var st diag.SelftestAnswer
	if err := json.Unmarshal([]byte(a.body), &st); a.status != 200 || err != nil || !st.OK || st.Text != "selftest: PASS (5 checks)\n" || st.Took == "" {
		t.Fatalf("selftest: %+v %v", a, err)
	}

	for _, c := range []struct {
		method, path, token string
		status              int
		want                string
	}{
		{"GET", "kiosk-1/logs", viewSecret, 403, "needs role operator"},
		{"POST", "kiosk-1/selftest", viewSecret, 403, "needs role operator"},
		{"GET", "kiosk-1/logs", "", 401, "authorization required"},
		{"GET", "kiosk-1/logs?bytes=65537", opSecret, 400, `bytes must be a whole number from 1 to 65536, got \"65537\"`},
		{"GET", "kiosk-1/logs?bytes=0", opSecret, 400, "bytes must be"},
		{"GET", "kiosk-1/logs?bytes=lots", opSecret, 400, "bytes must be"},
		{"GET", "nobody/logs", opSecret, 404, `no peer \"nobody\" on channel terminal-dev`},
		{"GET", "old-termd/logs", opSecret, 409, `peer old-termd does not list the capability \"diag\" (termd 0.9 is older than logs and self-tests on demand: update it)`},
		{"POST", "old-termd/selftest", opSecret, 409, "does not list the capability"},
	} {
		if a := call(t, c.method, base+c.path, c.token); a.status != c.status || !strings.Contains(a.body, c.want) {
			t.Errorf("%s %s: HTTP %d %s, want %d %q", c.method, c.path, a.status, a.body, c.status, c.want)
		}
	}
	if a := call(t, "GET", "http://"+srv.Addr+"/api/channels/nope/peers/kiosk-1/logs", opSecret); a.status != 404 {
		t.Errorf("unknown channel: %+v", a)
	}

	// The device's own error: 502 with it.
	dev.answer = nil
	errDev := dialDevice(t, srv, "kiosk-2", []string{link.CapDiag}, func(d *link.Diag) *link.DiagResult {
		return &link.DiagResult{RequestID: d.RequestID, Kind: d.Kind, Error: "a self-test is running"}
	})
	if a := call(t, "POST", base+"kiosk-2/selftest", opSecret); a.status != 502 || !strings.Contains(a.body, "peer kiosk-2: a self-test is running") {
		t.Errorf("device error: %+v", a)
	}

	// Gone while a request waits: 409 at once, not the 15 s of a
	// device that does not answer.
	var goneDev *rawDevice
	var once sync.Once
	goneDev = dialDevice(t, srv, "kiosk-3", []string{link.CapDiag}, func(d *link.Diag) *link.DiagResult {
		once.Do(func() { goneDev.conn.Close() }) // the read loop ends
		return nil
	})
	if a := call(t, "GET", base+"kiosk-3/logs", opSecret); a.status != 409 || !strings.Contains(a.body, "peer kiosk-3 went away before it answered") {
		t.Errorf("gone while waiting: %+v", a)
	}

	// Offline: 409 naming it.
	errDev.close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := call(t, "GET", base+"kiosk-2/logs", opSecret)
		if a.status == 409 && strings.Contains(a.body, "peer kiosk-2 is not connected") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("offline: %+v", a)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The events: each request, by whom, and how it went.
	a = call(t, "GET", "http://"+srv.Addr+"/api/channels/terminal-dev/events?limit=100", viewSecret)
	for _, want := range []string{`"event": "diag_logs"`, `"detail": "by otto: 41 bytes in`, `"event": "diag_selftest"`, `"detail": "by otto: PASS in`,
		`by otto: peer kiosk-2: a self-test is running`, `by otto: peer kiosk-2 is not connected`, `by otto: peer old-termd does not list`} {
		if !strings.Contains(a.body, want) {
			t.Errorf("events lack %s:\n%s", want, a.body)
		}
	}
}

// A device that lists "diag" and never answers: 504 once the request's
// time is up (15 s for logs), and the server keeps no place for it.
func TestAPINoAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 15 s")
	}
	srv, base := startServer(t)
	dev := dialDevice(t, srv, "mute", []string{link.CapDiag}, nil)
	start := time.Now()
	a := call(t, "GET", base+"mute/logs", opSecret)
	if a.status != 504 || !strings.Contains(a.body, "peer mute did not answer the logs request within 15s") {
		t.Fatalf("no answer: %+v", a)
	}
	t.Logf("504 after %v", time.Since(start).Round(time.Millisecond))
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if len(dev.diags) != 1 || dev.diags[0].Kind != link.DiagLogs {
		t.Fatalf("the device got %+v", dev.diags)
	}
}
