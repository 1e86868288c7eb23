package link_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
)

// noticeClient starts a client that lists notice and screen, on the fake
// server, with its state in dir.
func noticeClient(t *testing.T, url, dir string) (*link.Client, <-chan link.Event) {
	t.Helper()
	c, err := link.NewClient(link.ClientConfig{URL: url, PeerID: "kiosk-7", StateDir: dir,
		Capabilities: append(link.DefaultCapabilities(), link.CapNotice, link.CapScreen),
		Board:        "sim", Version: "v1.2.3", Tags: map[string]string{"site": "lobby"},
		RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return c, c.Events()
}

// noticeSession starts a notice client on a fresh state dir and accepts
// its connection on a new fake server.
func noticeSession(t *testing.T) (*fakeServer, *link.Client, <-chan link.Event, *fakeConn) {
	t.Helper()
	fs := newFakeServer(t)
	c, events := noticeClient(t, fs.url(), t.TempDir())
	conn := fs.accept(t)
	conn.handshake(t)
	return fs, c, events, conn
}

// handshake answers the connect frame and returns it.
func (c *fakeConn) handshake(t *testing.T) *link.Connect {
	t.Helper()
	f, ok := c.read(t).(*link.Connect)
	if !ok {
		t.Fatalf("first frame %T, want connect", f)
	}
	c.write(t, &link.Connected{ChannelID: "terminal-dev", SessionID: "s1"})
	return f
}

// next reads frames until one of type T (pings are answered, pongs and
// resent messages skipped).
func next[T link.Frame](t *testing.T, c *fakeConn) T {
	t.Helper()
	for {
		f := c.read(t)
		if v, ok := f.(T); ok {
			return v
		}
		switch f.(type) {
		case *link.Ping:
			c.write(t, &link.Pong{})
		case *link.Pong, *link.Message:
		default:
			var zero T
			t.Fatalf("client sent %T (%+v), want %T", f, f, zero)
		}
	}
}

func waitEvent(t *testing.T, events <-chan link.Event, kind link.EventKind) link.Event {
	t.Helper()
	timeout := time.After(testwait.Deadline)
	for {
		select {
		case e := <-events:
			if e.Kind == kind {
				return e
			}
		case <-timeout:
			t.Fatalf("no %v event", kind)
		}
	}
}

func notice(id string) *link.Notice {
	return &link.Notice{NoticeID: id, Text: "Lobby closes at 6", Priority: link.PriorityInfo, DisplaySeconds: 5,
		ExpiresAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
}

// A notice becomes an event; its ack goes only after NoticeShown (a
// message sent in between reaches the server first); sent again, it is
// acked again without an event, also by a new client on the same state
// dir. Connect carries board, version and tags.
func TestNoticeAckedOnlyAfterShownAndShownOnce(t *testing.T) {
	fs := newFakeServer(t)
	dir := t.TempDir()
	c, events := noticeClient(t, fs.url(), dir)
	conn := fs.accept(t)
	hello := conn.handshake(t)
	if hello.Board != "sim" || hello.Version != "v1.2.3" || hello.Tags["site"] != "lobby" ||
		!slices.Contains(hello.Capabilities, link.CapNotice) || !slices.Contains(hello.Capabilities, link.CapScreen) {
		t.Fatalf("connect = %+v, want board, version, tags and the notice and screen capabilities", hello)
	}
	conn.write(t, notice("n-1"))
	ev := waitEvent(t, events, link.EventNotice)
	if ev.Notice.NoticeID != "n-1" || ev.Notice.Text != "Lobby closes at 6" || ev.Expires.IsZero() {
		t.Fatalf("event %+v", ev)
	}
	// Not drawn yet: no ack. The message sent now is the next frame.
	if _, err := c.Send(context.Background(), "before the draw"); err != nil {
		t.Fatal(err)
	}
	if m := next[*link.Message](t, conn); m.Text != "before the draw" {
		t.Fatalf("message %+v", m)
	}
	if err := c.NoticeShown("n-1"); err != nil {
		t.Fatal(err)
	}
	if a := next[*link.NoticeAck](t, conn); a.NoticeID != "n-1" {
		t.Fatalf("ack %+v", a)
	}
	// Resent (its ack was lost, say): acked again, no second event.
	conn.write(t, notice("n-1"))
	if a := next[*link.NoticeAck](t, conn); a.NoticeID != "n-1" {
		t.Fatalf("re-ack %+v", a)
	}
	conn.write(t, notice("n-2"))
	if ev := waitEvent(t, events, link.EventNotice); ev.Notice.NoticeID != "n-2" {
		t.Fatalf("after the resend of n-1 the next event is %v, want n-2", ev)
	}
	if err := c.NoticeShown("nope"); err != link.ErrUnknownNotice {
		t.Fatalf("NoticeShown of an unknown id: %v", err)
	}
	if st := c.Stats(); st.NoticesReacked != 1 || st.Notices != 3 {
		t.Fatalf("stats %+v", st)
	}
	c.Close()

	// A new client on the same state dir: n-1 is acked without an event.
	c2, events2 := noticeClient(t, fs.url(), dir)
	conn2 := fs.accept(t)
	conn2.handshake(t)
	conn2.write(t, notice("n-1"))
	if a := next[*link.NoticeAck](t, conn2); a.NoticeID != "n-1" {
		t.Fatalf("re-ack after restart %+v", a)
	}
	conn2.write(t, notice("n-3"))
	if ev := waitEvent(t, events2, link.EventNotice); ev.Notice.NoticeID != "n-3" {
		t.Fatalf("after restart the first event is %v, want n-3 (n-1 was shown before)", ev)
	}
	_ = c2
}

// NoticeShown while offline: the ack waits and goes after the reconnect.
func TestNoticeAckQueuedWhileOffline(t *testing.T) {
	fs, c, events, conn := noticeSession(t)
	conn.write(t, notice("n-9"))
	waitEvent(t, events, link.EventNotice)
	conn.ws.Close() // the link drops before the notice is drawn
	testwait.Until(t, "the link down", func() bool { return c.Status().State != link.StateConnected })
	if err := c.NoticeShown("n-9"); err != nil {
		t.Fatal(err)
	}
	conn2 := fs.accept(t)
	conn2.handshake(t)
	if a := next[*link.NoticeAck](t, conn2); a.NoticeID != "n-9" {
		t.Fatalf("ack after reconnect %+v", a)
	}
}

// An expired notice is no event and no ack; a bad expires_at does not
// expire.
func TestExpiredNoticeNeverShown(t *testing.T) {
	_, c, events, conn := noticeSession(t)
	old := notice("n-old")
	old.ExpiresAt = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	conn.write(t, old)
	bad := notice("n-bad")
	bad.ExpiresAt = "tomorrow"
	conn.write(t, bad)
	ev := waitEvent(t, events, link.EventNotice)
	if ev.Notice.NoticeID != "n-bad" || !ev.Expires.IsZero() {
		t.Fatalf("first notice event %v (expires %v), want n-bad, not expiring: n-old expired", ev, ev.Expires)
	}
	if err := c.NoticeShown("n-old"); err != link.ErrUnknownNotice {
		t.Fatalf("NoticeShown(n-old) = %v, want ErrUnknownNotice", err)
	}
	if st := c.Stats(); st.NoticesExpired != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func screen(i int) link.Screen {
	return link.Screen{Rows: []string{fmt.Sprintf("screen %d", i), ""}, Backlight: true}
}

// Screens: 200 changes in a row go as a few frames, one per
// ScreenInterval at most, the last one being the latest screen; an
// unchanged screen is no frame; a reconnect sends the current one.
func TestScreenCoalescedAndRateLimited(t *testing.T) {
	fs := newFakeServer(t)
	c, _ := noticeClient(t, fs.url(), t.TempDir())
	c.SetScreen(screen(-1)) // before the link is up: sent on connect
	conn := fs.accept(t)
	conn.handshake(t)
	if s := next[*link.Screen](t, conn); s.Rows[0] != "screen -1" {
		t.Fatalf("first screen %+v", s)
	}
	start := time.Now()
	const n = 200
	for i := range n {
		c.SetScreen(screen(i))
		c.SetScreen(screen(i)) // unchanged: nothing
		time.Sleep(3 * time.Millisecond)
	}
	frames := 0
	for {
		s := next[*link.Screen](t, conn)
		frames++
		if s.Rows[0] == fmt.Sprintf("screen %d", n-1) {
			break
		}
	}
	elapsed := time.Since(start)
	// Rate: one frame per ScreenInterval, plus the one that may go at once.
	if limit := int(elapsed/link.ScreenInterval) + 1; frames > limit {
		t.Fatalf("%d screen frames in %v: more than one per %v", frames, elapsed, link.ScreenInterval)
	}
	if frames >= n/2 {
		t.Fatalf("%d frames for %d screens: not coalesced", frames, n)
	}
	st := c.Stats()
	if st.ScreensCoalesced == 0 || st.Screens != int64(frames+1) {
		t.Fatalf("stats %+v, frames %d", st, frames)
	}
	t.Logf("%d screens set in %v went as %d frames", n, elapsed, frames)

	conn.ws.Close()
	conn2 := fs.accept(t)
	conn2.handshake(t)
	if s := next[*link.Screen](t, conn2); s.Rows[0] != fmt.Sprintf("screen %d", n-1) {
		t.Fatalf("after reconnect %+v, want the current screen", s)
	}
}

// Without the screen capability SetScreen sends nothing.
func TestScreenNeedsCapability(t *testing.T) {
	fs := newFakeServer(t)
	c, err := link.NewClient(link.ClientConfig{URL: fs.url(), PeerID: "plain", StateDir: t.TempDir(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	conn := fs.accept(t)
	conn.handshake(t)
	c.SetScreen(screen(1))
	if _, err := c.Send(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if m := next[*link.Message](t, conn); m.Text != "hello" {
		t.Fatal(m)
	}
	if st := c.Stats(); st.Screens != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// acceptLive accepts connections until one sends its connect frame (those
// of a killed process are closed), answers it and returns the connection.
func (fs *fakeServer) acceptLive(t *testing.T) *fakeConn {
	t.Helper()
	for {
		c := fs.accept(t)
		_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			c.ws.Close()
			continue
		}
		if f, err := link.Decode(data); err != nil || f.FrameType() != link.TypeConnect {
			t.Fatalf("first frame %s", data)
		}
		c.write(t, &link.Connected{ChannelID: "terminal-dev", SessionID: "s2"})
		return c
	}
}

// A device killed (SIGKILL) after drawing a notice and before its ack
// reached the server: the next process on the same state dir acks the
// resent notice without showing it again.
func TestNoticeShownThenKilledBeforeAck(t *testing.T) {
	fs := newFakeServer(t)
	state := t.TempDir()
	first := startChild(t, "notice", fs.url(), state, 0)
	conn := fs.accept(t)
	conn.handshake(t)
	conn.write(t, notice("n-1"))
	first.WaitLine(t, "notice n-1", 10*time.Second)
	conn.ws.Close() // the link drops: this server reads no ack
	first.WaitLine(t, "shown n-1", 10*time.Second)
	first.Signal(t, syscall.SIGKILL)
	first.Wait(t, 10*time.Second)
	for drained := false; !drained; { // the dead process's redials
		select {
		case ws := <-fs.conns:
			ws.Close()
		default:
			drained = true
		}
	}

	second := startChild(t, "notice", fs.url(), state, 0)
	conn2 := fs.acceptLive(t)
	conn2.write(t, notice("n-1"))
	if a := next[*link.NoticeAck](t, conn2); a.NoticeID != "n-1" {
		t.Fatalf("ack %+v", a)
	}
	conn2.write(t, notice("n-2"))
	second.WaitLine(t, "shown n-2", 10*time.Second)
	if got := second.Lines("notice "); !slices.Equal(got, []string{"n-2"}) {
		t.Fatalf("the restarted device showed %v, want only n-2 (n-1 was drawn before the kill)", got)
	}
}

// A server that predates the screen extension answers a screen frame
// with the channel spec's "Unsupported websocket frame type" error: the
// client stops mirroring on that connection and reports no error.
func TestScreenToServerWithoutIt(t *testing.T) {
	_, c, events, conn := noticeSession(t)
	c.SetScreen(screen(1))
	next[*link.Screen](t, conn)
	conn.write(t, &link.Error{Error: "Unsupported websocket frame type: screen"})
	conn.write(t, &link.Error{Error: "a later error"})
	if e := waitEvent(t, events, link.EventError); e.Err.Error() != "a later error" {
		t.Fatalf("first error event %v, want the unsupported screen kept from the caller", e)
	}
	c.SetScreen(screen(2))
	if _, err := c.Send(context.Background(), "after"); err != nil {
		t.Fatal(err)
	}
	if m := next[*link.Message](t, conn); m.Text != "after" {
		t.Fatal(m)
	}
	if st := c.Stats(); st.Screens != 1 {
		t.Fatalf("%d screen frames, want 1: the mirror goes on after the server refused it", st.Screens)
	}
}
