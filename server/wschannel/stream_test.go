package wschannel

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/events"
)

// streamAdapter is an adapter on its Deps alone behind a real HTTP
// server (closed at the test's end); dial connects raw WebSocket
// devices to it.
type streamAdapter struct {
	*terminalAdapter
	t   testing.TB
	url string
}

func newStreamAdapter(t testing.TB, opt Options) *streamAdapter {
	t.Helper()
	d := &deps{}
	cfg := config.Default().Channels[config.DefaultChannelID]
	a := newTerminalAdapter("terminal-dev", cfg, Deps{
		Accept: accepter{d}, Records: records{d}, Presence: records{d}, Registry: devices{d}, Notices: mailboxes{}, Events: events.NewLog(100),
		SessionKey: func(ch, acct, peer, thread string) string { return strings.Join([]string{ch, acct, peer, thread}, "/") },
		Metrics:    testMetrics(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, opt)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.ServeUpgrade(w, r, 100) }))
	t.Cleanup(func() { a.Close(); hs.Close() })
	return &streamAdapter{terminalAdapter: a, t: t, url: "ws" + strings.TrimPrefix(hs.URL, "http")}
}

type device struct {
	t  testing.TB
	ws *websocket.Conn
}

// dialRaw opens a WebSocket to the adapter (read deadline in 10 s).
func (a *streamAdapter) dialRaw() *websocket.Conn {
	a.t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(a.url, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { ws.Close() })
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	return ws
}

// dial connects a device as peer with caps and reads connected.
func (a *streamAdapter) dial(peer string, caps ...string) *device {
	a.t.Helper()
	d := &device{t: a.t, ws: a.dialRaw()}
	d.send(&link.Connect{PeerID: peer, Capabilities: caps})
	if _, ok := d.read().(*link.Connected); !ok {
		a.t.Fatal("no connected")
	}
	return d
}

func (d *device) send(f link.Frame) {
	d.t.Helper()
	_ = d.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := d.ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
		d.t.Fatal(err)
	}
}

func (d *device) read() link.Frame {
	d.t.Helper()
	_ = d.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := d.ws.ReadMessage()
	if err != nil {
		d.t.Fatal(err)
	}
	f, err := link.Decode(data)
	if err != nil {
		d.t.Fatalf("undecodable frame %s: %v", data, err)
	}
	return f
}

// quiet proves nothing else was sent: the next frame is the pong of a
// ping.
func (d *device) quiet() {
	d.t.Helper()
	d.send(&link.Ping{})
	if f := d.read(); f.FrameType() != link.TypePong {
		d.t.Fatalf("got %s frame %+v, want nothing before the pong", f.FrameType(), f)
	}
}

// streamed reads deltas of message id, checking seq from next without
// gaps, until their text adds up to want (or a final message comes,
// which is returned).
type streamed struct {
	text   strings.Builder
	seq    int64
	deltas int
}

func (s *streamed) readUntil(d *device, id, want string) *link.Message {
	d.t.Helper()
	for s.text.String() != want {
		switch f := d.read().(type) {
		case *link.Delta:
			if f.MessageID != id || f.Seq != s.seq+1 || f.Text == "" {
				d.t.Fatalf("delta %+v after seq %d, want message %s seq %d with text", f, s.seq, id, s.seq+1)
			}
			s.seq = f.Seq
			s.deltas++
			s.text.WriteString(f.Text)
			if !strings.HasPrefix(want, s.text.String()) {
				d.t.Fatalf("deltas add up to %q, not a prefix of %q", s.text.String(), want)
			}
		case *link.Message:
			return f
		default:
			d.t.Fatalf("got %s frame %+v while streaming", f.FrameType(), f)
		}
	}
	return nil
}

func delta(peer, id, text string) bus.Outbound {
	return bus.Outbound{Kind: bus.Delta, ChannelID: "terminal-dev", PeerID: peer, MessageID: id, Text: text}
}

func final(peer, id, text string) bus.Outbound {
	return bus.Outbound{Kind: bus.Final, ChannelID: "terminal-dev", PeerID: peer, MessageID: id, Text: text, FinishReason: link.FinishStop}
}

// The device gets only what it lacks of each update, seq from 1 without
// gaps; the text adds up to the final reply's.
func TestDeltasCarryTheNewSuffix(t *testing.T) {
	a := newStreamAdapter(t, Options{})
	d := a.dial("dev", link.CapText, link.CapStream)
	var s streamed
	for _, text := range []string{"Hel", "Hello", "Hello, wor", "Hello, world"} {
		if !a.Send(delta("dev", "m1", text)) {
			t.Fatalf("delta %q not taken", text)
		}
		if m := s.readUntil(d, "m1", text); m != nil {
			t.Fatalf("final before the deltas: %+v", m)
		}
	}
	a.Send(delta("dev", "m1", "Hello")) // stale (shorter): nothing to send
	a.Send(final("dev", "m1", "Hello, world"))
	m, ok := d.read().(*link.Message)
	if !ok || m.Text != s.text.String() || s.seq != 4 {
		t.Fatalf("final %+v after %d deltas %q, want the final text == the deltas' (4)", m, s.seq, s.text.String())
	}
	d.quiet()
	if n := a.m.Deltas.Value("terminal-dev"); n != 4 {
		t.Fatalf("termlink_deltas_sent_total %d, want 4", n)
	}
}

// 1,000 updates a character apart become a few deltas (one batch per
// deltaGap), the text intact.
func TestDeltasCoalesced(t *testing.T) {
	a := newStreamAdapter(t, Options{})
	d := a.dial("dev", link.CapStream)
	start := time.Now()
	var want strings.Builder
	for i := range 1000 {
		want.WriteByte(byte('a' + i%26))
		a.Send(delta("dev", "m1", want.String()))
		if i%100 == 99 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var s streamed
	s.readUntil(d, "m1", want.String())
	elapsed := time.Since(start)
	limit := int(elapsed/deltaGap) + 2
	t.Logf("1000 updates in %s: %d deltas (limit %d)", elapsed, s.deltas, limit)
	if s.deltas > limit {
		t.Fatalf("%d deltas for 1000 updates in %s, want at most %d", s.deltas, elapsed, limit)
	}
	a.Send(final("dev", "m1", want.String()))
	if m, ok := d.read().(*link.Message); !ok || m.Text != s.text.String() {
		t.Fatalf("final %+v", m)
	}
}

// A final reply drops its message's pending delta: none follows it.
func TestFinalDropsPendingDelta(t *testing.T) {
	a := newStreamAdapter(t, Options{})
	d := a.dial("dev", link.CapStream)
	var s streamed
	a.Send(delta("dev", "m1", "a"))
	s.readUntil(d, "m1", "a")
	a.Send(delta("dev", "m1", "ab")) // within the gap: pending
	a.Send(final("dev", "m1", "abc"))
	if m, ok := d.read().(*link.Message); !ok || m.Text != "abc" {
		t.Fatalf("got %+v, want the final", m)
	}
	time.Sleep(2 * deltaGap) // a delta still due would be written by now
	d.quiet()
	a.mu.Lock()
	kept := a.streams.count()
	a.mu.Unlock()
	if kept != 0 {
		t.Fatalf("%d streams kept after the final reply", kept)
	}
}

// A device without "stream" sees exactly today's frames.
func TestNoDeltasWithoutStream(t *testing.T) {
	a := newStreamAdapter(t, Options{})
	d := a.dial("dev", link.CapText, link.CapProgress)
	if a.Send(delta("dev", "m1", "Hel")) {
		t.Fatal("a delta was taken for a device without stream")
	}
	a.Send(final("dev", "m1", "Hello"))
	if m, ok := d.read().(*link.Message); !ok || m.Text != "Hello" {
		t.Fatalf("got %+v, want only the final", m)
	}
	d.quiet()
}

// A device that reconnects mid-stream gets one delta with all the text
// so far right behind connected (seq 1 again), then the rest; the
// stream's text is kept while it is away and let go at the final.
func TestReconnectMidStream(t *testing.T) {
	a := newStreamAdapter(t, Options{})
	d := a.dial("dev", link.CapStream)
	var s streamed
	a.Send(delta("dev", "m1", "Once upon"))
	s.readUntil(d, "m1", "Once upon")
	d.ws.Close()
	for deadline := time.Now().Add(10 * time.Second); a.ConnectedPeers() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the old connection is still registered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if a.Send(delta("dev", "m1", "Once upon a time")) {
		t.Fatal("taken with no connection")
	}

	d2 := a.dial("dev", link.CapStream)
	f, ok := d2.read().(*link.Delta)
	if !ok || f.Seq != 1 || f.Text != "Once upon a time" {
		t.Fatalf("after connected %+v, want one delta seq 1 with all the text so far", f)
	}
	s2 := streamed{seq: 1}
	s2.text.WriteString(f.Text)
	s2.deltas = 1
	a.Send(delta("dev", "m1", "Once upon a time, there"))
	s2.readUntil(d2, "m1", "Once upon a time, there")
	if s2.seq != 2 {
		t.Fatalf("seq %d, want 2", s2.seq)
	}
	a.Send(final("dev", "m1", "Once upon a time, there was."))
	if m, ok := d2.read().(*link.Message); !ok || m.Text != "Once upon a time, there was." {
		t.Fatalf("final %+v", m)
	}
	// A third connection after the final gets no delta.
	d3 := a.dial("dev", link.CapStream)
	d3.quiet()
}

// A device that does not read: however many updates come, its stream is
// one slot holding one string (the latest), and the writer's backlog does
// not grow.
func TestStalledDeviceHoldsOneString(t *testing.T) {
	a := newStreamAdapter(t, Options{WriteStall: time.Minute})
	d := a.dial("dev", link.CapStream)
	_ = d // never read from here on
	big := strings.Repeat("x", 48<<20)
	step := 1 << 20
	n := step
	// Fill the socket's buffers: a delta batch every gap, a MiB each,
	// until the writer is stuck in a write (no batch written in a gap).
	sent, still := a.m.Deltas.Value("terminal-dev"), 0
	for ; n <= len(big); n += step {
		a.Send(delta("dev", "m1", big[:n]))
		time.Sleep(2 * deltaGap)
		a.mu.Lock()
		c := a.peers["dev"]
		a.mu.Unlock()
		c.mu.Lock()
		writing := c.writing
		c.mu.Unlock()
		now := a.m.Deltas.Value("terminal-dev")
		if writing && now == sent {
			if still++; still == 3 {
				break
			}
		} else {
			still = 0
		}
		sent = now
	}
	if n > len(big) {
		t.Fatal("the writer never got stuck on a device that does not read")
	}
	for i := range 1000 {
		a.Send(delta("dev", "m1", big[:n+i+1]))
	}
	a.mu.Lock()
	c := a.peers["dev"]
	kept := a.streams.count()
	a.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.busy()
	s := q.streams["m1"]
	if len(q.streams) != 1 || len(q.deltaOrder) != 1 || s.pending != big[:n+1000] || len(q.replies)+len(q.frames)+len(q.latest) != 0 || kept != 1 {
		t.Fatalf("streams %d, waiting %d, pending %d bytes (want %d), queued %d, kept %d: want one slot with the latest string",
			len(q.streams), len(q.deltaOrder), len(s.pending), n+1000, len(q.replies)+len(q.frames)+len(q.latest), kept)
	}
	if a.m.Dropped.Value("terminal-dev") != 0 {
		t.Fatal("a device was dropped for deltas")
	}
}

// The store of open streams is bounded: per peer, by idle time and by
// bytes; the final removes an entry.
func TestOpenStreamsBounded(t *testing.T) {
	var s openStreams
	now := time.Now()
	for i := range maxStreamsPerPeer + 3 {
		s.put("p", string(rune('a'+i)), "text", now.Add(time.Duration(i)*time.Millisecond))
	}
	if got := len(s.of("p")); got != maxStreamsPerPeer {
		t.Fatalf("%d streams kept for one peer, want %d", got, maxStreamsPerPeer)
	}
	if _, ok := s.byPeer["p"]["a"]; ok {
		t.Fatal("the least recently updated stream was not the one let go")
	}
	s.put("p", "d", "text and more", now.Add(5*time.Second))
	s.remove("p", "e")
	if s.bytes != (maxStreamsPerPeer-2)*4+len("text and more") {
		t.Fatalf("bytes %d", s.bytes)
	}
	// Not updated for streamIdle: evicted at the next sweep.
	s.put("q", "x", "hi", now.Add(streamIdle+2*time.Second))
	if got := s.count(); got != 2 {
		t.Fatalf("after the idle sweep %d streams, want 2 (p's d and q's x)", got)
	}
	// Past the byte budget a stream is not kept (and one that would pass
	// it is let go).
	s2 := openStreams{maxBytes: 10}
	s2.put("p", "m", "12345", now)
	s2.put("p", "n", "1234567", now)
	if s2.count() != 1 {
		t.Fatalf("%d kept, want 1 within 10 bytes", s2.count())
	}
	s2.put("p", "m", "123456789012", now)
	if s2.count() != 0 || s2.bytes != 0 {
		t.Fatalf("%d kept (%d bytes), want none past the budget", s2.count(), s2.bytes)
	}
}
