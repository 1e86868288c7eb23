package wschannel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/metrics"
	"termlink/server/record"
	"termlink/server/registry"
)

// deps records what an adapter asks of its Deps.
type deps struct {
	mu    sync.Mutex
	calls []string
	in    []bus.Inbound
	busy  bool
}

func (d *deps) call(format string, args ...any) {
	d.mu.Lock()
	d.calls = append(d.calls, fmt.Sprintf(format, args...))
	d.mu.Unlock()
}

func (d *deps) saw(call string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.calls, call)
}

type accepter struct{ *deps }

func (a accepter) AcceptInbound(ctx context.Context, in bus.Inbound, ack func(record.Accepted)) error {
	a.mu.Lock()
	busy := a.busy
	a.in = append(a.in, in)
	a.mu.Unlock()
	if busy {
		return fmt.Errorf("%w: session %s has 1 message waiting", record.ErrBusy, in.SessionKey)
	}
	ack(record.Accepted{RunID: "run-1"})
	return nil
}

type records struct{ *deps }

func (r records) Connected(ch, peer string)    { r.call("records.Connected %s %s", ch, peer) }
func (r records) Disconnected(ch, peer string) { r.call("records.Disconnected %s %s", ch, peer) }
func (r records) Cancel(_ context.Context, key, id string) bool {
	r.call("records.Cancel %s %s", key, id)
	return false
}

type devices struct{ *deps }

func (r devices) Connected(d registry.Device) (uint64, []string, error) {
	r.call("registry.Connected %s %s %s", d.ChannelID, d.PeerID, d.SessionID)
	return 7, nil, nil
}
func (r devices) Disconnected(ch, peer string, gen uint64) {
	r.call("registry.Disconnected %s %s %d", ch, peer, gen)
}
func (r devices) MessageAccepted(ch, peer string) { r.call("registry.MessageAccepted %s %s", ch, peer) }
func (r devices) SetScreen(string, string, uint64, registry.Screen) bool {
	return true
}

type mailboxes struct{}

func (mailboxes) Due(string, string, uint64, int, time.Time) ([][]byte, []string, uint64, bool) {
	return nil, nil, 0, false
}
func (mailboxes) MarkSent(string, string, []string, time.Time) {}
func (mailboxes) Ack(string, string, string) error             { return errors.New("no notices here") }

func testMetrics() *Metrics {
	var r metrics.Registry
	return &Metrics{
		Connections: r.NewGaugeVec("c", "", "channel"), Connects: r.NewCounterVec("cs", "", "channel"),
		Rejected: r.NewCounterVec("r", "", "channel"), Dropped: r.NewCounterVec("d", "", "channel"),
		WebSockets: r.NewGaugeVec("w", "", ""), OverCap: r.NewCounterVec("o", "", ""),
		Paused: r.NewCounterVec("p", "", "channel"), Deferred: r.NewCounterVec("df", "", "channel"),
		Busy: r.NewCounterVec("b", "", "channel"), Held: r.NewCounterVec("h", "", "channel"),
		Deltas: r.NewCounterVec("dl", "", "channel"),
	}
}

// depsAdapter is channel terminal-dev's adapter on d's fakes alone.
func depsAdapter(d *deps, ev *events.Log, m *Metrics) *terminalAdapter {
	cfg := config.Default().Channels[config.DefaultChannelID]
	return newTerminalAdapter("terminal-dev", cfg, Deps{
		Accept: accepter{d}, Records: records{d}, Presence: records{d}, Registry: devices{d}, Notices: mailboxes{}, Events: ev,
		SessionKey: func(ch, acct, peer, thread string) string { return strings.Join([]string{ch, acct, peer, thread}, "/") },
		Metrics:    m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, Options{})
}

// An adapter built from its Deps alone, with no server around it: the
// connect handshake reaches the store and the registry before connected,
// a message goes to the accept path and is acked, a reply is sent, and
// Close says goodbye (1001) and reports the disconnect.
func TestAdapterOnItsDeps(t *testing.T) {
	d := &deps{}
	ev := events.NewLog(100)
	m := testMetrics()
	a := depsAdapter(d, ev, m)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.ServeUpgrade(w, r, 10) }))
	defer hs.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	send := func(f link.Frame) {
		t.Helper()
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() link.Frame {
		t.Helper()
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		f, err := link.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	send(&link.Connect{PeerID: "dev-1"})
	if f, ok := read().(*link.Connected); !ok || f.SessionID != "terminal-dev/local/dev-1/" || f.ChannelID != "terminal-dev" {
		t.Fatalf("connect answered with %+v, want connected in session terminal-dev/local/dev-1/", f)
	}
	for _, call := range []string{"records.Connected terminal-dev dev-1", "registry.Connected terminal-dev dev-1 terminal-dev/local/dev-1/"} {
		if !d.saw(call) {
			t.Fatalf("connected before %s: calls %v", call, d.calls)
		}
	}
	if a.ConnectedPeers() != 1 || m.Connections.Value("terminal-dev") != 1 || m.WebSockets.Value("") != 1 {
		t.Fatalf("peers %d, connections %d, websockets %d; want 1, 1, 1", a.ConnectedPeers(), m.Connections.Value("terminal-dev"), m.WebSockets.Value(""))
	}

	send(&link.Message{MessageID: "m-1", Text: "hi", ThreadID: "hall"})
	if f, ok := read().(*link.Ack); !ok || f.MessageID != "m-1" || f.SessionID != "terminal-dev/local/dev-1/hall" {
		t.Fatalf("message answered with %+v, want the ack of m-1 in thread hall", f)
	}
	d.mu.Lock()
	in := d.in
	d.mu.Unlock()
	if len(in) != 1 || in[0].Text != "hi" || in[0].PeerID != "dev-1" || !d.saw("registry.MessageAccepted terminal-dev dev-1") {
		t.Fatalf("accepted %+v, calls %v", in, d.calls)
	}
	if !a.Send(bus.Outbound{Kind: bus.Final, PeerID: "dev-1", MessageID: "m-1", Text: "hello", Media: []string{"/tmp/a/pic.png"}}) {
		t.Fatal("Send to a connected peer: not taken")
	}
	if f, ok := read().(*link.Message); !ok || f.Text != "hello\n[file: pic.png]" || f.Role != link.RoleAssistant {
		t.Fatalf("reply %+v", f)
	}
	if a.Send(bus.Outbound{Kind: bus.Final, PeerID: "dev-2", MessageID: "m-1"}) {
		t.Fatal("Send to a peer not connected: taken")
	}

	d.mu.Lock()
	d.busy = true
	d.mu.Unlock()
	send(&link.Message{MessageID: "m-2", Text: "again"})
	if f, ok := read().(*link.Error); !ok || f.Code != link.CodeBusy ||
		f.Error != "message m-2 not accepted: session terminal-dev/local/dev-1/ has 1 message waiting; send it again later" {
		t.Fatalf("busy answered with %+v", f)
	}
	// The cancel of a message sent to another thread goes to that thread.
	send(&link.Cancel{MessageID: "m-1"})
	if f, ok := read().(*link.Error); !ok || f.Code != link.CodeUnknownRun || !d.saw("records.Cancel terminal-dev/local/dev-1/hall m-1") {
		t.Fatalf("cancel answered with %+v, calls %v", f, d.calls)
	}

	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	var ce *websocket.CloseError
	if _, _, err := ws.ReadMessage(); !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("at Close: %v, want close 1001", err)
	}
	<-closed
	for _, call := range []string{"records.Disconnected terminal-dev dev-1", "registry.Disconnected terminal-dev dev-1 7"} {
		if !d.saw(call) {
			t.Fatalf("after Close, no %s: calls %v", call, d.calls)
		}
	}
	if a.ConnectedPeers() != 0 || m.Connections.Value("terminal-dev") != 0 || m.WebSockets.Value("") != 0 {
		t.Fatalf("after Close: peers %d, connections %d, websockets %d", a.ConnectedPeers(), m.Connections.Value("terminal-dev"), m.WebSockets.Value(""))
	}
	if last := ev.Recent(1); len(last) != 1 || last[0].Event != events.AdapterStopped {
		t.Fatalf("last event %+v, want adapter_stopped", last)
	}
}
