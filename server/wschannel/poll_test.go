package wschannel

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/throttle"
)

// pollRig is an adapter served over HTTP (or HTTPS) on 127.0.0.1.
type pollRig struct {
	t   *testing.T
	a   *terminalAdapter
	ev  *events.Log
	url string
	tls *tls.Config // the client's, when served over TLS
	g   *ConnGuard  // the listener's (newShapedRig's guarded), else nil
}

func newPollRig(t *testing.T, overTLS bool, mutate func(*config.Channel)) *pollRig {
	t.Helper()
	return newShapedRig(t, overTLS, false, mutate)
}

// newShapedRig is newPollRig; guarded serves through termserver's
// listener (a ConnGuard's over the TCP listener, and over TLS,
// tlsconf's: tls, then the guard, then a StallListener).
func newShapedRig(t *testing.T, overTLS, guarded bool, mutate func(*config.Channel)) *pollRig {
	t.Helper()
	d := &deps{}
	r := &pollRig{t: t, ev: events.NewLog(1000)}
	gate := throttle.New(slog.New(slog.NewTextHandler(io.Discard, nil)), throttle.Options{Burst: 100, Every: time.Hour})
	t.Cleanup(gate.Close)
	cfg := config.Default().Channels[config.DefaultChannelID]
	if mutate != nil {
		mutate(&cfg)
	}
	r.a = newTerminalAdapter("terminal-dev", cfg, Deps{
		Accept: accepter{d}, Records: records{d}, Presence: records{d}, Registry: devices{d}, Notices: mailboxes{}, Events: r.ev, Outside: gate,
		SessionKey: func(ch, acct, peer, thread string) string { return strings.Join([]string{ch, acct, peer, thread}, "/") },
		Metrics:    testMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, Options{})
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.a.ServeUpgrade(w, req, 100000) }))
	if guarded {
		g := NewConnGuard(socketsOnly(100))
		r.g = g
		hs.Config.ConnState = g.ConnState
		ln := hs.Listener
		if overTLS {
			ln = StallListener(ln)
		}
		hs.Listener = g.Listener(ln)
	}
	if overTLS {
		hs.StartTLS()
		r.tls = hs.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		r.url = "wss" + strings.TrimPrefix(hs.URL, "https")
	} else {
		hs.Start()
		r.url = "ws" + strings.TrimPrefix(hs.URL, "http")
	}
	t.Cleanup(func() { r.a.Close(); hs.Close() })
	return r
}

// dial connects a device; raw is the connection under gorilla's (TLS
// included): bytes written to it are frames as the server reads them.
func (r *pollRig) dial() (ws *websocket.Conn, raw net.Conn) {
	r.t.Helper()
	d := websocket.Dialer{
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			raw = c
			return c, err
		},
	}
	if r.tls != nil {
		d.NetDialContext = nil
		d.NetDialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&tls.Dialer{Config: r.tls}).DialContext(ctx, network, addr)
			raw = c
			return c, err
		}
	}
	ws, _, err := d.Dial(r.url, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { ws.Close() })
	_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
	return ws, raw
}

func readFrame(t *testing.T, ws *websocket.Conn) link.Frame {
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

// clientFrame is a masked text frame as a device sends it.
func clientFrame(f link.Frame) []byte {
	payload := link.MustEncode(f)
	var b bytes.Buffer
	b.WriteByte(0x81) // FIN, text
	switch n := len(payload); {
	case n < 126:
		b.WriteByte(0x80 | byte(n))
	case n < 1<<16:
		b.WriteByte(0x80 | 126)
		_ = binary.Write(&b, binary.BigEndian, uint16(n))
	default:
		b.WriteByte(0x80 | 127)
		_ = binary.Write(&b, binary.BigEndian, uint64(n))
	}
	mask := [4]byte{1, 2, 3, 4}
	b.Write(mask[:])
	for i, c := range payload {
		b.WriteByte(c ^ mask[i%4])
	}
	return b.Bytes()
}

// serveGoroutines counts the goroutines serving connections: the
// goroutine a connection had of its own (serve), blocked reading.
func serveGoroutines(t *testing.T) int {
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	return strings.Count(b.String(), "wschannel.(*wsConn).serve(")
}

// Idle devices hold no goroutine and no read buffer (over TLS, no TLS
// input buffer either): with n connected and silent, the
// process has about as many goroutines as with none (the pools' warm
// workers, the poller's loop and the wheel), none of them a connection's
// own. Before, each connection had one (serve), blocked in its read.
func TestIdleConnectionsHoldNoGoroutine(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[overTLS], func(t *testing.T) {
			r := newPollRig(t, overTLS, nil)
			const n = 200
			before := runtime.NumGoroutine()
			for i := range n {
				ws, _ := r.dial()
				if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: fmt.Sprintf("dev-%d", i)})); err != nil {
					t.Fatal(err)
				}
				if _, ok := readFrame(t, ws).(*link.Connected); !ok {
					t.Fatal("connect not answered with connected")
				}
			}
			// Settled: each waits in the poller, or on a goroutine of its own.
			testwait.Until(t, "every connection waiting for data", func() bool { return polledArmed(r.a) || serveGoroutines(t) == n })
			if s := serveGoroutines(t); s != 0 {
				t.Fatalf("%d goroutines in wsConn.serve with %d idle connections, want 0", s, n)
			}
			// Nor a write queue, a channel or a message rate (no message was
			// sent): the writer let go of its queue once connected was written.
			testwait.Until(t, "every writer done", func() bool {
				r.a.mu.Lock()
				defer r.a.mu.Unlock()
				for _, c := range r.a.conns {
					c.mu.Lock()
					busy := c.writing || c.q != nil || c.rare != nil || c.rate != nil
					c.mu.Unlock()
					if busy {
						return false
					}
				}
				return true
			})
			if lent := r.a.parked.Load(); lent != n {
				t.Fatalf("%d idle connections: %d gave their box (Conn and read buffer) back, want all", n, lent)
			}
			if overTLS { // nor the buffers its TLS handshake was read into
				held := 0
				r.a.mu.Lock()
				for _, c := range r.a.conns {
					c.ph.IfArmed(func() {
						base := unsafe.Pointer(c.tlsConn())
						raw := (*bytes.Buffer)(unsafe.Add(base, tlsInput.rawInput))
						hand := (*bytes.Buffer)(unsafe.Add(base, tlsInput.hand))
						held += raw.Cap() + hand.Cap()
						held += len(*(*[]byte)(unsafe.Add(base, tlsSecrets.resumption)))
						cs := c.tlsConn().ConnectionState()
						if _, err := cs.ExportKeyingMaterial("EXPORTER-test", nil, 32); !errors.Is(err, errNoKeyingMaterial) {
							t.Errorf("an idle TLS connection's keying material: %v, want it let go (%v)", err, errNoKeyingMaterial)
						}
					})
				}
				r.a.mu.Unlock()
				if held != 0 {
					t.Fatalf("%d idle TLS connections hold %d bytes of TLS input buffers and resumption secrets, want none", n, held)
				}
			}
			// The warm pools keep at most their maxIdle workers.
			if grew := runtime.NumGoroutine() - before; grew > n/4 {
				t.Fatalf("%d idle connections added %d goroutines, want none per connection", n, grew)
			}
		})
	}
}

// A polled connection silent past its idle timeout (2.5 heartbeats) is
// closed with the reason it always had; one that never sends connect is
// closed with 1008 and the connect timeout's reason. The wheel, not a
// read deadline, notices both.
func TestPolledTimeoutsKeepTheirReasons(t *testing.T) {
	r := newPollRig(t, false, func(c *config.Channel) {
		c.Config.HeartbeatSeconds = 1
		c.Config.ConnectTimeoutSeconds = 1
	})
	silent, _ := r.dial()
	if err := silent.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: "dev-silent"})); err != nil {
		t.Fatal(err)
	}
	if _, ok := readFrame(t, silent).(*link.Connected); !ok {
		t.Fatal("connect not answered with connected")
	}
	mute, _ := r.dial()
	var ce *websocket.CloseError
	if _, _, err := mute.ReadMessage(); !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || ce.Text != "no connect frame within 1s: connection closed" {
		t.Fatalf("no connect frame: %v, want close 1008 with the connect timeout's reason", err)
	}
	if _, _, err := silent.ReadMessage(); err == nil {
		t.Fatal("a silent connection was not closed")
	}
	want := map[string]bool{"silent for 2.5s (2.5 heartbeats): connection closed": false, "no connect frame within 1s: connection closed (remote ": false}
	testwait.Until(t, "both disconnects recorded", func() bool {
		for _, e := range r.ev.Recent(100) {
			for w := range want {
				if e.Event == events.TerminalDisconnected && strings.HasPrefix(e.Detail, w) {
					want[w] = true
				}
			}
		}
		return want["silent for 2.5s (2.5 heartbeats): connection closed"] && want["no connect frame within 1s: connection closed (remote "]
	})
}

// corkConn gathers writes while corked: TLS records written meanwhile
// go out in one TCP write.
type corkConn struct {
	net.Conn
	corked bool
	buf    []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	if c.corked {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *corkConn) flush() error {
	c.corked = false
	_, err := c.Conn.Write(c.buf)
	c.buf = nil
	return err
}

// Frames the socket's readiness will not show are handled: frames in
// one TLS record (what gorilla's read buffer did not take waits as
// plaintext inside the tls.Conn), and TLS records that arrive in one TCP
// segment (the tls.Conn reads them all from the socket, and hands out
// one record's plaintext at a time).
func TestTLSBufferedFrames(t *testing.T) {
	r := newPollRig(t, true, nil)
	var cork *corkConn
	d := websocket.Dialer{NetDialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cork = &corkConn{Conn: c}
		cfg := r.tls.Clone()
		cfg.ServerName = "127.0.0.1"
		tc := tls.Client(cork, cfg)
		return tc, tc.HandshakeContext(ctx)
	}}
	ws, _, err := d.Dial(r.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
	raw := ws.NetConn()

	// One record: connect, a large message and small ones.
	var rec []byte
	rec = append(rec, clientFrame(&link.Connect{PeerID: "dev-tls"})...)
	rec = append(rec, clientFrame(&link.Message{MessageID: "m-big", Text: strings.Repeat("x", 1000)})...)
	for i := range 5 {
		rec = append(rec, clientFrame(&link.Message{MessageID: fmt.Sprintf("m-%d", i), Text: "hi"})...)
	}
	if len(rec) > 16<<10 {
		t.Fatalf("%d bytes do not fit one TLS record", len(rec))
	}
	if _, err := raw.Write(rec); err != nil { // one write: one record
		t.Fatal(err)
	}
	if _, ok := readFrame(t, ws).(*link.Connected); !ok {
		t.Fatal("connect not answered with connected")
	}
	for _, id := range []string{"m-big", "m-0", "m-1", "m-2", "m-3", "m-4"} {
		if f, ok := readFrame(t, ws).(*link.Ack); !ok || f.MessageID != id {
			t.Fatalf("one record: got %+v, want the ack of %s", f, id)
		}
	}

	// Records in one segment, each a frame, once the server waits again.
	testwait.Until(t, "the connection waiting in the poller", func() bool { return polledArmed(r.a) })
	cork.corked = true
	for i := range 3 {
		if _, err := raw.Write(clientFrame(&link.Message{MessageID: fmt.Sprintf("s-%d", i), Text: "hi"})); err != nil {
			t.Fatal(err)
		}
	}
	if err := cork.flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if f, ok := readFrame(t, ws).(*link.Ack); !ok || f.MessageID != fmt.Sprintf("s-%d", i) {
			t.Fatalf("records in one segment: got %+v, want the ack of s-%d", f, i)
		}
	}
}

// A frame split over several TCP segments, with pauses between them,
// is read whole, and the connection is polled again after it.
func TestFrameSplitOverSegments(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[overTLS], func(t *testing.T) {
			r := newPollRig(t, overTLS, nil)
			ws, raw := r.dial()
			if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: "dev-split"})); err != nil {
				t.Fatal(err)
			}
			if _, ok := readFrame(t, ws).(*link.Connected); !ok {
				t.Fatal("connect not answered with connected")
			}
			for round := range 2 {
				id := fmt.Sprintf("m-%d", round)
				b := clientFrame(&link.Message{MessageID: id, Text: strings.Repeat("y", 700)})
				// Over TLS each write is a record of its own.
				for _, cut := range [][2]int{{0, 1}, {1, 5}, {5, 300}, {300, len(b)}} {
					if _, err := raw.Write(b[cut[0]:cut[1]]); err != nil {
						t.Fatal(err)
					}
					time.Sleep(20 * time.Millisecond) // pacing of the input, not a wait for a result
				}
				if f, ok := readFrame(t, ws).(*link.Ack); !ok || f.MessageID != id {
					t.Fatalf("got %+v, want the ack of %s", f, id)
				}
				testwait.Until(t, "the connection waiting in the poller again", func() bool { return r.a.poller.Len() == 1 && polledArmed(r.a) })
			}
		})
	}
}

// polledArmed reports whether every connection waits in the poller.
func polledArmed(a *terminalAdapter) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.conns) == 0 {
		return false
	}
	for _, c := range a.conns {
		if c.ph == nil || !c.ph.Armed() {
			return false
		}
	}
	return true
}

// goroutinesIn counts the goroutines with fn on their stack.
func goroutinesIn(t *testing.T, fn string) int {
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	return strings.Count(b.String(), fn)
}

// Close stops the readiness loop and the wheel once every connection
// has ended: no goroutine of theirs is left.
func TestCloseStopsTheReadinessLoop(t *testing.T) {
	r := newPollRig(t, false, nil)
	ws, _ := r.dial()
	if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: "dev-1"})); err != nil {
		t.Fatal(err)
	}
	if _, ok := readFrame(t, ws).(*link.Connected); !ok {
		t.Fatal("connect not answered with connected")
	}
	const loop, wheel = "readiness.(*Poller).loop(", "readiness.(*Wheel).run("
	if goroutinesIn(t, loop) == 0 || goroutinesIn(t, wheel) == 0 {
		t.Fatal("no readiness loop or wheel while a connection is open")
	}
	r.a.Close()
	// Close returns once the loop has closed its done channel; the
	// goroutine's return comes just after, so the profile may still show
	// it for a moment (fresh-clone make test: "1 readiness loops and 0
	// wheels still run"; the test was wrong). Left running, it never goes.
	testwait.UntilOK(t, "the readiness loop and the wheel to end after Close", func() error {
		if n, m := goroutinesIn(t, loop), goroutinesIn(t, wheel); n+m != 0 {
			return fmt.Errorf("%d readiness loops and %d wheels still run", n, m)
		}
		return nil
	})
}

// plaintextWaits relies on this: a tls.Conn read with a past deadline
// returns a timeout at once, and the connection reads on afterwards (the
// timeout is not sticky, as any other read error is).
func TestTLSReadTimeoutNotSticky(t *testing.T) {
	hs := httptest.NewUnstartedServer(nil)
	hs.StartTLS() // for its certificate
	defer hs.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", hs.TLS)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			err = c.(*tls.Conn).Handshake()
		}
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cfg := hs.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.ServerName = "127.0.0.1"
	client, err := tls.Dial("tcp", ln.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer server.Close()
	if _, err := client.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	if n, err := server.Read(b); err != nil || string(b[:n]) != "hi" {
		t.Fatalf("read %q, %v", b[:n], err)
	}
	_ = server.SetReadDeadline(pastDeadline)
	var ne net.Error
	if _, err := server.Read(b); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	_ = server.SetReadDeadline(time.Time{})
	if _, err := client.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if n, err := server.Read(b); err != nil || string(b[:n]) != "again" {
		t.Fatalf("after a timeout: read %q, %v; want the next record", b[:n], err)
	}
}

// releaseTLSInput finds tls.Conn's input buffers on this Go: if this
// fails after a Go upgrade, TLS connections keep their handshake buffers
// while idle (a few KiB each) until releaseTLSInput learns the new shape.
func TestTLSInputFieldsFound(t *testing.T) {
	if !tlsInput.ok {
		t.Fatal("tls.Conn has no rawInput, input and hand fields of the expected types: idle TLS connections keep their input buffers")
	}
	if !tlsSecrets.ok {
		t.Fatal("tls.Conn has no ekm and resumptionSecret fields of the expected types: idle TLS connections keep their exporter and resumption secrets")
	}
}
