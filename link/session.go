package link

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/gorilla/websocket"
)

// session is one connection of a Client: a reader goroutine, a writer
// goroutine (the only one that writes frames, each with a deadline), and
// the session loop in the caller's goroutine, which owns the protocol
// state and feeds the writer.
type session struct {
	c  *Client
	ws *websocket.Conn

	out  chan []byte    // frames for the writer
	in   chan Frame     // frames from the reader
	wake func()         // Send and Cancel poke the loop
	kick chan struct{}  // cap 1
	stop chan struct{}  // closed at teardown: reader and writer return
	dead chan struct{}  // closed by fail
	once sync.Once      // guards dead and why
	why  string         // first failure
	wg   sync.WaitGroup // reader and writer

	readWait atomic.Int64 // read deadline, ns: handshake, then heartbeat + pong timeout

	// Guarded by Client.mu.
	toSend  []*outMsg // messages to send on this connection, in order
	cancels []string  // cancel frames to send

	// Loop-owned.
	inflight    map[string]struct{}         // sent on this connection, no final answer (nor busy) yet
	busyB       *backoff.ExponentialBackOff // paces resends after busy; nil until the first
	busyUntil   time.Time                   // no message is sent before this
	busyT       *time.Timer                 // fires at busyUntil
	screenAt    time.Time                   // when the last screen frame went
	noScreen    atomic.Bool                 // the server does not take screen frames
	screenT     *time.Timer                 // fires when a held-back screen is due
	streams     map[string]*streamState     // deltas taken on this connection, by message (stream.go)
	deltaLogged map[string]struct{}         // ignored deltas logged on this connection: reason and message
	pingAt      time.Time                   // when the ping not answered yet went (HeartbeatRTT)
}

func newSession(c *Client, ws *websocket.Conn) *session {
	s := &session{c: c, ws: ws, out: make(chan []byte, c.cfg.Window+8), in: make(chan Frame, 16),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), dead: make(chan struct{}),
		inflight: map[string]struct{}{}, streams: map[string]*streamState{}, deltaLogged: map[string]struct{}{}}
	s.wake = func() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return s
}

// fail records why the connection is dead (the first reason wins) and
// wakes the loop.
func (s *session) fail(why string) {
	s.once.Do(func() {
		s.why = why
		close(s.dead)
	})
}

func (s *session) reason() string {
	<-s.dead
	return s.why
}

// run serves the connection until it dies or ctx ends; up is how long it
// was connected.
func (s *session) run(ctx context.Context) (up time.Duration, reason string) {
	c := s.c
	s.ws.SetReadLimit(MaxFrameBytes)
	s.readWait.Store(int64(c.cfg.ConnectTimeout))
	s.wg.Add(2)
	go s.reader()
	go s.writer()
	defer s.teardown()

	connected, why := s.handshake(ctx)
	if connected == nil {
		return 0, why
	}
	hb := s.heartbeat(connected)
	start := time.Now()
	c.sessions.Add(1)
	c.register(s)
	defer c.unregister(s)
	c.log.Info("link up", "session_id", connected.SessionID, "heartbeat", hb)
	c.setState(Event{State: StateConnected, SessionID: connected.SessionID, Heartbeat: hb})

	ping := time.NewTicker(hb)
	defer ping.Stop()
	s.busyT = time.NewTimer(time.Hour)
	s.busyT.Stop()
	defer s.busyT.Stop()
	s.screenT = time.NewTimer(time.Hour)
	s.screenT.Stop()
	defer s.screenT.Stop()
	pingFrame := MustEncode(&Ping{})
	for {
		if !s.pump() {
			return time.Since(start), s.reason()
		}
		select {
		case f := <-s.in:
			s.handle(f)
		case <-s.kick:
		case <-s.busyT.C:
		case <-s.screenT.C:
		case <-ping.C:
			if s.write(pingFrame) && s.pingAt.IsZero() {
				s.pingAt = time.Now()
			}
		case <-s.dead:
			return time.Since(start), s.reason()
		case <-ctx.Done():
			s.goodbye()
			return time.Since(start), "closed by the device"
		}
	}
}

// handshake sends connect and waits for connected.
func (s *session) handshake(ctx context.Context) (*Connected, string) {
	c := s.c
	if !s.write(MustEncode(&Connect{PeerID: c.cfg.PeerID, DeviceName: c.cfg.DeviceName,
		Capabilities: c.cfg.Capabilities, ThreadID: c.cfg.ThreadID, UserID: c.cfg.UserID,
		Board: c.cfg.Board, Version: c.cfg.Version, Tags: c.connectTags(),
		Platform: c.cfg.Platform, SettingsVersion: c.settingsVersion.Load(), BinarySHA256: c.cfg.BinarySHA256})) {
		return nil, s.reason()
	}
	t := time.NewTimer(c.cfg.ConnectTimeout)
	defer t.Stop()
	for {
		select {
		case f := <-s.in:
			switch f := f.(type) {
			case *Connected:
				return f, ""
			case *Error:
				c.emit(Event{Kind: EventError, Code: f.Code, MessageID: f.MessageID, Err: errors.New(f.Error)})
				if f.Code == CodeUnauthorized || f.MessageID == "" {
					return nil, "connect refused: " + f.Error
				}
			case *Ping:
				s.write(MustEncode(&Pong{}))
			}
		case <-s.dead:
			// The server's refusal (an error frame) comes just before its
			// close: the reader may have queued it when the close made the
			// connection dead, and select picks either at random. The
			// refusal says why; the close only that it happened.
			for {
				select {
				case f := <-s.in:
					if e, ok := f.(*Error); ok && (e.Code == CodeUnauthorized || e.MessageID == "") {
						c.emit(Event{Kind: EventError, Code: e.Code, MessageID: e.MessageID, Err: errors.New(e.Error)})
						return nil, "connect refused: " + e.Error
					}
					continue
				default:
				}
				break
			}
			return nil, s.reason()
		case <-t.C:
			return nil, fmt.Sprintf("no connected frame within %s of connect", c.cfg.ConnectTimeout)
		case <-ctx.Done():
			s.goodbye()
			return nil, "closed by the device"
		}
	}
}

// teardown closes the socket and waits for the reader and the writer.
func (s *session) teardown() {
	s.fail("closed")
	close(s.stop)
	s.ws.Close()
	s.wg.Wait()
}

// goodbye tells the server the device is leaving (close frame 1000).
func (s *session) goodbye() {
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "device closing")
	_ = s.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
}

// write hands a frame to the writer; false when the connection is dead.
func (s *session) write(b []byte) bool {
	select {
	case s.out <- b:
		return true
	case <-s.dead:
		return false
	}
}

func (s *session) writer() {
	defer s.wg.Done()
	for {
		select {
		case b := <-s.out:
			_ = s.ws.SetWriteDeadline(time.Now().Add(s.c.cfg.WriteTimeout))
			if err := s.ws.WriteMessage(websocket.TextMessage, b); err != nil {
				s.fail(describeIOError("write", err, s.c.cfg.WriteTimeout))
				s.ws.Close() // unblock the reader at once
				return
			}
		case <-s.stop:
			return
		}
	}
}

func (s *session) reader() {
	defer s.wg.Done()
	for {
		wait := time.Duration(s.readWait.Load())
		_ = s.ws.SetReadDeadline(time.Now().Add(wait))
		kind, data, err := s.ws.ReadMessage()
		if err != nil {
			s.fail(describeIOError("read", err, wait))
			return
		}
		f, err := Decode(data)
		if err != nil || kind != websocket.TextMessage {
			if err == nil {
				err = errors.New("binary frame")
			}
			s.c.emit(Event{Kind: EventError, Code: CodeBadFrame, Err: fmt.Errorf("server sent a frame this client cannot read: %w", err)})
			continue
		}
		if cf, ok := f.(*Connected); ok {
			// Set here, before the next read starts: from now on a
			// heartbeat plus the pong timeout without a frame is death.
			s.readWait.Store(int64(s.heartbeat(cf) + s.c.cfg.PongTimeout))
		}
		select {
		case s.in <- f:
		case <-s.stop:
			return
		}
	}
}

// heartbeat is the ping interval: the server's, else the configured one.
func (s *session) heartbeat(f *Connected) time.Duration {
	if f.HeartbeatSeconds > 0 {
		return time.Duration(f.HeartbeatSeconds) * time.Second
	}
	return s.c.cfg.Heartbeat
}

func describeIOError(op string, err error, wait time.Duration) string {
	var ne net.Error
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &ne) && ne.Timeout() && op == "read":
		return fmt.Sprintf("no frame from the server for %s: link dead", wait)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("write did not finish within %s: link dead", wait)
	case errors.As(err, &ce):
		if ce.Text != "" {
			return fmt.Sprintf("server closed the connection (%d): %s", ce.Code, ce.Text)
		}
		return fmt.Sprintf("server closed the connection (%d)", ce.Code)
	}
	return op + ": " + err.Error()
}

// pump sends queued notice acks, the screen (when one is due), queued
// cancels and as many queued messages as the window allows (messages in
// flight on this connection plus answers waiting for the caller's
// confirmation), unless a busy answer holds sending back; false when the
// connection died meanwhile.
func (s *session) pump() bool {
	c := s.c
	msgs := 0
	now := time.Now()
	holding := now.Before(s.busyUntil)
	c.mu.Lock()
	frames, acks, screen, screenWait := c.pendingPushLocked(s, now)
	frames = c.pendingFleetLocked(frames)
	for _, id := range s.cancels {
		frames = append(frames, MustEncode(&Cancel{MessageID: id}))
	}
	s.cancels = nil
	for !holding && len(s.inflight)+c.unconf < c.cfg.Window && len(s.toSend) > 0 {
		m := s.toSend[0]
		s.toSend[0] = nil
		s.toSend = s.toSend[1:]
		if m.answered {
			continue
		}
		if m.sends > 0 {
			c.resent.Add(1)
		}
		m.sends++
		s.inflight[m.id] = struct{}{}
		msgs++
		frames = append(frames, m.frame())
	}
	if len(s.toSend) == 0 {
		s.toSend = nil
	}
	c.mu.Unlock()
	if screenWait > 0 {
		s.screenT.Reset(screenWait)
	}
	c.noticeAcks.Add(int64(acks))
	if screen {
		c.screens.Add(1)
	}
	for _, b := range frames {
		if !s.write(b) {
			return false
		}
	}
	c.sent.Add(int64(msgs))
	return true
}

// handle takes one frame from the server.
func (s *session) handle(f Frame) {
	c := s.c
	switch f := f.(type) {
	case *Ack:
		if s.answerAcked(f) { // clientchoice.go
			return
		}
		// An ack does not free the message's place in the window: the
		// server has it, the answer is still to come. Acks of messages
		// not in flight here (answered already) are not reported.
		if _, ok := s.inflight[f.MessageID]; ok {
			if s.busyB != nil {
				s.busyB.Reset() // the server takes messages again
			}
			c.emit(Event{Kind: EventAck, MessageID: f.MessageID, Ack: f})
		}
		if f.Duplicate && f.Reply != nil {
			delete(s.inflight, f.MessageID)
			s.endStream(f.MessageID)
			r := *f.Reply
			if r.MessageID == "" {
				r.MessageID = f.MessageID
			}
			c.complete(&r) // drops a second copy
		}
	case *Message:
		if !f.IsReply() {
			c.emit(Event{Kind: EventError, MessageID: f.MessageID, Code: CodeBadFrame,
				Err: errors.New("server sent a message frame that is not an assistant reply")})
			return
		}
		delete(s.inflight, f.MessageID)
		s.endStream(f.MessageID)
		c.complete(f)
	case *Progress:
		// Only for messages in flight here: at most Window of them, each
		// coalesced to its latest text in the event queue.
		if _, ok := s.inflight[f.MessageID]; ok {
			c.emit(Event{Kind: EventProgress, MessageID: f.MessageID, Text: f.Text})
		}
	case *Delta:
		s.delta(f) // stream.go
	case *Notice:
		c.notice(s, f)
	case *Question:
		c.question(f) // clientchoice.go
	case *Update, *Settings, *Diag:
		c.fleetRequest(f) // fleetclient.go
	case *Error:
		s.handleError(f)
	case *Ping:
		s.write(MustEncode(&Pong{}))
	case *Pong:
		c.pongs.Add(1)
		if !s.pingAt.IsZero() {
			c.rttNanos.Store(int64(time.Since(s.pingAt)))
			s.pingAt = time.Time{}
		}
	case *Connected:
	default:
		c.emit(Event{Kind: EventError, Code: CodeBadFrame, Err: fmt.Errorf("server sent a %s frame", f.FrameType())})
	}
}

func (s *session) handleError(f *Error) {
	c := s.c
	if s.unsupported(f) {
		return
	}
	_, inflight := s.inflight[f.MessageID]
	if f.MessageID != "" {
		delete(s.inflight, f.MessageID)
	}
	switch {
	case f.Code == CodeBusy && f.MessageID != "":
		// Retryable, never a final answer: the message stays in the
		// outbox and goes again after a backoff, on this connection.
		if inflight {
			c.busy.Add(1)
			s.holdForBusy()
			c.requeue(s, f.MessageID)
			c.log.Debug("server busy: resending later", "message_id", f.MessageID, "until", s.busyUntil.Format("15:04:05.000"), "reason", f.Error)
		}
		return
	case isAnswerRefusal(f.Code) && f.MessageID != "":
		// An answer to a question that is closed, unknown, or with an
		// option it does not have: final (clientchoice.go).
		if c.refuse(f) {
			return
		}
	case f.Code == CodeBadMessage && f.MessageID != "":
		// Blank, too long, bad id: resending cannot help.
		s.endStream(f.MessageID)
		if c.refuse(f) {
			return
		}
	case f.Code == CodeNotConnected, f.Code == CodeUnauthorized:
		s.fail("server: " + f.Error)
	case f.MessageID != "" && f.Code != CodeUnknownRun && c.unanswered(f.MessageID):
		// The server could not take the message (e.g. its log failed):
		// reconnect after a backoff and resend everything in order.
		s.fail(fmt.Sprintf("server did not take message %s: %s", f.MessageID, f.Error))
	}
	c.emit(Event{Kind: EventError, MessageID: f.MessageID, Code: f.Code, Err: errors.New(f.Error)})
}

// holdForBusy holds message sending back for the next wait of the busy
// backoff (jittered, growing up to RetryMax; reset by the next ack).
func (s *session) holdForBusy() {
	if s.busyB == nil {
		s.busyB = s.c.newBackoff()
	}
	wait := s.c.nextWait(s.busyB)
	s.busyUntil = time.Now().Add(wait)
	s.busyT.Stop()
	select { // drain a fire that raced the Stop
	case <-s.busyT.C:
	default:
	}
	s.busyT.Reset(wait)
}
