package link

import (
	"slices"
	"strings"
	"time"
)

// ScreenInterval is the least time between two screen frames: at most
// four a second go to the server, however often the screen changes.
const ScreenInterval = 250 * time.Millisecond

// maxReceived bounds the notices handed to the caller and not yet shown
// that the client remembers (for their expiry); past it the oldest go.
const maxReceived = 256

// DefaultCapabilities are the capabilities listed in connect when
// ClientConfig.Capabilities is nil: text, progress, cancel.
func DefaultCapabilities() []string { return []string{CapText, CapProgress, CapCancel} }

// NoticeShown confirms that the caller has drawn the notice id (an
// EventNotice): the id is kept in the state dir, so that the notice is
// never shown again when the server resends it, and only then is its
// notice_ack sent (at once, or as soon as the link is up). A notice the
// server sends again after that is acked again without an event.
//
// ErrUnknownNotice: no notice with that id was received. Another error
// says the state dir could not keep the id (it is kept in memory, and the
// ack goes anyway).
func (c *Client) NoticeShown(id string) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	exp, ok := c.received[id]
	c.mu.Unlock()
	if !ok && !c.shown.Shown(id) {
		return ErrUnknownNotice
	}
	// Durable before the ack: a crash between the two makes the server
	// resend the notice, and the client acks it again without an event.
	err := c.shown.Mark(id, exp)
	c.mu.Lock()
	if _, ok := c.received[id]; ok {
		delete(c.received, id)
		c.recvList = slices.DeleteFunc(c.recvList, func(s string) bool { return s == id })
	}
	c.acks = append(c.acks, id)
	if s := c.sess; s != nil {
		s.wake()
	}
	c.mu.Unlock()
	return err
}

// SetScreen gives the client what the display shows now, for the
// server's mirror of it (capability "screen"; without it in
// Capabilities, SetScreen does nothing). The latest screen wins: it is
// sent only when it differs from the last one sent, at most one frame per
// ScreenInterval, and only while connected; after a reconnect the current
// screen is sent once.
func (c *Client) SetScreen(scr Screen) {
	if !slices.Contains(c.cfg.Capabilities, CapScreen) {
		return
	}
	scr.Rows = slices.Clone(scr.Rows)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || (c.screen != nil && sameScreen(c.screen, &scr)) {
		return
	}
	if c.screenQ && c.sess != nil {
		c.screensCoalesced.Add(1) // the one waiting is replaced
	}
	c.screen, c.screenQ = &scr, true
	if s := c.sess; s != nil {
		s.wake()
	}
}

func sameScreen(a, b *Screen) bool {
	return slices.Equal(a.Rows, b.Rows) && a.CursorRow == b.CursorRow && a.CursorCol == b.CursorCol &&
		a.CursorOn == b.CursorOn && a.Backlight == b.Backlight
}

// notice takes a notice frame from the server (the session loop calls
// it): one drawn before is acked again; an expired one is dropped; any
// other goes to the caller as an EventNotice.
func (c *Client) notice(s *session, n *Notice) {
	c.notices.Add(1)
	c.log.Debug("notice received", "notice_id", n.NoticeID, "priority", n.Priority, "expires_at", n.ExpiresAt)
	if c.shown.Shown(n.NoticeID) {
		c.noticesReacked.Add(1)
		c.log.Debug("notice shown before: acking it again", "notice_id", n.NoticeID)
		c.noticeAcks.Add(1)
		s.write(MustEncode(&NoticeAck{NoticeID: n.NoticeID}))
		return
	}
	exp, ok := parseExpiry(n.ExpiresAt)
	if !ok {
		c.log.Warn("notice: expires_at is not an RFC 3339 time; treating the notice as not expiring",
			"notice_id", n.NoticeID, "expires_at", n.ExpiresAt)
	}
	if !exp.IsZero() && !time.Now().Before(exp) {
		c.noticesExpired.Add(1)
		c.log.Info("notice arrived after its expiry: not shown", "notice_id", n.NoticeID, "expires_at", n.ExpiresAt)
		return
	}
	c.mu.Lock()
	if _, ok := c.received[n.NoticeID]; !ok {
		c.recvList = append(c.recvList, n.NoticeID)
		if over := len(c.recvList) - maxReceived; over > 0 {
			for _, old := range c.recvList[:over] {
				delete(c.received, old)
			}
			c.recvList = slices.Delete(c.recvList, 0, over)
		}
	}
	c.received[n.NoticeID] = exp
	c.mu.Unlock()
	nc := *n
	c.emit(Event{Kind: EventNotice, Notice: &nc, Expires: exp})
}

// pendingPushLocked returns the notice acks and the screen frame due on
// s now (c.mu held); wait > 0 says when the held-back screen is due.
func (c *Client) pendingPushLocked(s *session, now time.Time) (frames [][]byte, acks int, screen bool, wait time.Duration) {
	for _, id := range c.acks {
		frames = append(frames, MustEncode(&NoticeAck{NoticeID: id}))
	}
	acks = len(c.acks)
	c.acks = nil
	if c.screenQ && c.screen != nil && !s.noScreen.Load() {
		if next := s.screenAt.Add(ScreenInterval); now.Before(next) {
			return frames, acks, false, next.Sub(now)
		}
		frames = append(frames, MustEncode(c.screen))
		c.screenQ = false
		s.screenAt = now
		screen = true
	}
	return frames, acks, screen, 0
}

// unsupportedPrefix starts the channel spec's error for a frame type the
// server does not know ("Unsupported websocket frame type: example").
const unsupportedPrefix = "Unsupported websocket frame type: "

// unsupported takes the error a server that predates an extension gives
// for the extension frames this client sends unasked (screen,
// notice_ack): the screen mirror stops for this connection, and the
// caller is not bothered (true). False for any other error.
func (s *session) unsupported(f *Error) bool {
	rest, ok := strings.CutPrefix(f.Error, unsupportedPrefix)
	if !ok || f.MessageID != "" {
		return false
	}
	typ, _, _ := strings.Cut(rest, " ")
	switch Type(typ) {
	case TypeScreen:
		if !s.noScreen.Swap(true) {
			s.c.log.Info("the server does not take screen frames: no screen mirror on this connection", "error", f.Error)
		}
		return true
	case TypeNoticeAck:
		s.c.log.Warn("the server does not take notice_ack frames", "error", f.Error)
		return true
	}
	return false
}
