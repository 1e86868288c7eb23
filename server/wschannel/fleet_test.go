package wschannel

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/throttle"
)

// fakeFleet records the answers it is given and refuses them with err.
type fakeFleet struct {
	mu      sync.Mutex
	reports []link.Type
	err     error
}

func (f *fakeFleet) DeviceConnected(string, *link.Connect) {}
func (f *fakeFleet) Report(_, _ string, fr link.Frame) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports = append(f.reports, fr.FrameType())
	return f.err
}

func (f *fakeFleet) got() []link.Type {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]link.Type(nil), f.reports...)
}

// fleetRig is an adapter with a fleet side and a gate of burst 3 (an
// hour between more), and one device connection.
type fleetRig struct {
	t     *testing.T
	fleet *fakeFleet
	ev    *events.Log
	ws    *websocket.Conn
}

func newFleetRig(t *testing.T, fleetErr error, caps ...string) *fleetRig {
	t.Helper()
	// The answer rate's clock stands still: only the burst is spent.
	at := time.Now()
	answerClock = func() time.Time { return at }
	t.Cleanup(func() { answerClock = time.Now })
	d := &deps{}
	r := &fleetRig{t: t, fleet: &fakeFleet{err: fleetErr}, ev: events.NewLog(1000)}
	gate := throttle.New(slog.New(slog.NewTextHandler(io.Discard, nil)), throttle.Options{Burst: 3, Every: time.Hour})
	t.Cleanup(gate.Close)
	cfg := config.Default().Channels[config.DefaultChannelID]
	a := New("terminal-dev", cfg, Deps{
		Accept: accepter{d}, Records: records{d}, Presence: records{d}, Registry: devices{d}, Notices: mailboxes{}, Events: r.ev, Fleet: r.fleet, Frames: FleetFrames(r.fleet.Report), Outside: gate,
		SessionKey: func(ch, acct, peer, thread string) string { return strings.Join([]string{ch, acct, peer, thread}, "/") },
		Metrics:    testMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, Options{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.ServeUpgrade(w, r, 10) }))
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close(); a.Close(); hs.Close() })
	r.ws = ws
	r.send(&link.Connect{PeerID: "dev-1", Capabilities: caps})
	if _, ok := r.read().(*link.Connected); !ok {
		t.Fatal("connect not answered with connected")
	}
	return r
}

func (r *fleetRig) send(f link.Frame) {
	r.t.Helper()
	if err := r.ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fleetRig) read() link.Frame {
	r.t.Helper()
	_ = r.ws.SetReadDeadline(time.Now().Add(time.Minute))
	_, data, err := r.ws.ReadMessage()
	if err != nil {
		r.t.Fatal(err)
	}
	f, err := link.Decode(data)
	if err != nil {
		r.t.Fatal(err)
	}
	return f
}

// errorsUntilPong pings and returns the error frames that came before
// the pong: every frame sent before the ping has been handled by then.
func (r *fleetRig) errorsUntilPong() []*link.Error {
	r.t.Helper()
	r.send(&link.Ping{})
	var out []*link.Error
	for {
		switch f := r.read().(type) {
		case *link.Pong:
			return out
		case *link.Error:
			out = append(out, f)
		default:
			r.t.Fatalf("unexpected %s frame %+v", f.FrameType(), f)
		}
	}
}

func (r *fleetRig) rejected() int {
	n := 0
	for _, e := range r.ev.Recent(1000) {
		if e.Event == events.InboundRejected {
			n++
		}
	}
	return n
}

var (
	diagResult   = &link.DiagResult{RequestID: "diag-1", Kind: link.DiagLogs, Text: "log"}
	settingsAck  = &link.SettingsAck{Version: 3, Error: "no"}
	updateStatus = &link.UpdateStatus{UpdateID: "ro-1.1", Version: "v2", Running: "v1", State: link.UpdateFailed, Reason: "disk"}
)

// An answer frame from a connection that did not list the capability it
// answers is refused (bad_frame, naming the capability) and never
// reaches the fleet side; with the capability it does.
func TestAnswerNeedsItsCapability(t *testing.T) {
	r := newFleetRig(t, nil, link.CapText, link.CapSettings)
	r.send(diagResult)
	r.send(updateStatus)
	r.send(settingsAck)
	errs := r.errorsUntilPong()
	if len(errs) != 2 || errs[0].Code != link.CodeBadFrame || !strings.Contains(errs[0].Error, `diag_result refused: this connection did not list the "diag" capability`) ||
		errs[1].Code != link.CodeBadFrame || !strings.Contains(errs[1].Error, `did not list the "update" capability`) {
		t.Fatalf("errors %+v, want diag_result and update_status refused for their capability", errs)
	}
	if got := r.fleet.got(); len(got) != 1 || got[0] != link.TypeSettingsAck {
		t.Fatalf("the fleet side got %v, want only the settings_ack", got)
	}
}

// An answer the fleet side says answers nothing asked is refused with
// its reason; one it takes gets no error.
func TestAnswerNotAskedRefused(t *testing.T) {
	r := newFleetRig(t, errors.New("request_id \"diag-1\" names no request waiting for this device's answer"), link.CapText, link.CapDiag)
	r.send(diagResult)
	errs := r.errorsUntilPong()
	if len(errs) != 1 || errs[0].Code != link.CodeBadFrame || errs[0].Error != `diag_result refused: request_id "diag-1" names no request waiting for this device's answer` || errs[0].MessageID != "" {
		t.Fatalf("errors %+v, want the fleet side's refusal as bad_frame", errs)
	}
	r.fleet.mu.Lock()
	r.fleet.err = nil
	r.fleet.mu.Unlock()
	r.send(diagResult)
	if errs := r.errorsUntilPong(); len(errs) != 0 {
		t.Fatalf("an answer taken got errors %+v", errs)
	}
	if got := r.fleet.got(); len(got) != 2 {
		t.Fatalf("the fleet side got %v, want both", got)
	}
}

// Answers past the connection's burst (the rate's clock stands still)
// are dropped with busy and never reach the fleet side.
func TestAnswerRate(t *testing.T) {
	r := newFleetRig(t, nil, link.CapText, link.CapSettings)
	for range answerBurst + 10 {
		r.send(settingsAck)
	}
	errs := r.errorsUntilPong()
	if got := r.fleet.got(); len(got) != answerBurst {
		t.Fatalf("the fleet side got %d answers, want the burst %d", len(got), answerBurst)
	}
	if len(errs) == 0 || errs[0].Code != link.CodeBusy || !strings.Contains(errs[0].Error, "settings_ack dropped: this connection sends answer frames faster than 2 a second (burst 20)") {
		t.Fatalf("errors %+v, want busy for the answers past the burst", errs)
	}
}

// A flood of refused answers gets as many error frames and
// inbound_rejected events as the gate's burst (3 here), not one each.
func TestAnswerRefusalsThrottled(t *testing.T) {
	r := newFleetRig(t, errors.New("settings version 3 was not sent to this device"), link.CapText, link.CapSettings)
	for range 200 {
		r.send(settingsAck) // the first 20 refused by the fleet side, the rest past the rate
	}
	r.send(diagResult) // refused for its capability
	if errs := r.errorsUntilPong(); len(errs) != 3 {
		t.Fatalf("%d error frames for 201 refused answers, want the gate's burst of 3: %+v", len(errs), errs)
	}
	if n := r.rejected(); n != 3 {
		t.Fatalf("%d inbound_rejected events, want 3", n)
	}
	if got := r.fleet.got(); len(got) != answerBurst {
		t.Fatalf("the fleet side got %d answers, want %d", len(got), answerBurst)
	}
}

// A busy frame (issue 42) is taken only from a connection that listed
// "update": refused bad_frame from another, naming the capability, and
// never handed on; paced as the answers are.
func TestBusyNeedsUpdate(t *testing.T) {
	r := newFleetRig(t, nil, link.CapText, link.CapSettings)
	r.send(&link.Busy{Busy: true, Why: link.BusyRun})
	errs := r.errorsUntilPong()
	if len(errs) != 1 || errs[0].Code != link.CodeBadFrame || !strings.Contains(errs[0].Error, `busy refused: this connection did not list the "update" capability`) {
		t.Fatalf("errors %+v, want busy refused for its capability", errs)
	}
	if got := r.fleet.got(); len(got) != 0 {
		t.Fatalf("the fleet side got %v", got)
	}
	r = newFleetRig(t, nil, link.CapText, link.CapUpdate)
	for range answerBurst + 1 {
		r.send(&link.Busy{})
	}
	errs = r.errorsUntilPong()
	if got := r.fleet.got(); len(got) != answerBurst || got[0] != link.TypeBusy {
		t.Fatalf("the fleet side got %d frames (%v), want the burst %d of busy", len(got), got, answerBurst)
	}
	if len(errs) != 1 || errs[0].Code != link.CodeBusy {
		t.Fatalf("errors %+v, want busy past the burst", errs)
	}
}
