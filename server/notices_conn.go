package server

import (
	"errors"
	"log/slog"
	"time"

	"termlink/link"
	"termlink/server/events"
)

// Notice delivery on a device connection. Only a connection whose connect
// listed "notice" takes part. It keeps a cursor (noticeSeq): the created
// number of the last notice it sent. Notices are numbered in created
// order, so the ones it owes are exactly its peer's open notices numbered
// above the cursor; the connection's single writer takes them from the
// mailbox itself (takeNotices), after connected, a bounded number per
// batch. A new connection starts at 0, which is the resend on reconnect;
// an ack takes a notice out of the mailbox for good.

// noticesOnConnect arms delivery for a connection that listed "notice":
// every open notice of its peer goes out after connected.
func (c *wsConn) noticesOnConnect() {
	if c.notice {
		c.wakeNotices()
	}
}

// wakeNotices tells c's writer to look in the mailbox.
func (c *wsConn) wakeNotices() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.noticesDue = true
	c.startWriterLocked()
}

// wakeNotices is the mailbox's wake-up for peer; it reports whether the
// peer is connected and takes notices.
func (a *terminalAdapter) wakeNotices(peerID string) bool {
	a.mu.Lock()
	c := a.peers[peerID]
	a.mu.Unlock()
	if c == nil || !c.notice {
		return false
	}
	c.wakeNotices()
	return true
}

// takeNotices (the writer, without c.mu) fills b with the notices due.
func (c *wsConn) takeNotices(b *batch) {
	if !b.fetchNotices {
		return
	}
	ns := c.a.rt.notices
	var more bool
	b.notices, b.noticeIDs, c.noticeSeq, more = ns.due(c.a.id, c.peerID, c.noticeSeq, c.max, time.Now())
	if more {
		c.mu.Lock()
		c.noticesDue = true // the writer loops until every due notice is out
		c.mu.Unlock()
	}
}

// sentNotices (the writer) records the notices b carried as sent.
func (c *wsConn) sentNotices(b *batch) {
	if len(b.noticeIDs) > 0 {
		c.a.rt.notices.markSent(c.a.id, c.peerID, b.noticeIDs, time.Now())
	}
}

// handleNoticeAck takes a device's notice_ack out of the mailbox.
func (c *wsConn) handleNoticeAck(f *link.NoticeAck) {
	switch {
	case c.peerID == "":
		c.reject("", link.CodeNotConnected, "send a connect frame with your peer_id before notice_ack frames")
		return
	case !c.notice:
		c.reject("", link.CodeBadFrame, `notice_ack: this connection did not list "notice" in connect.capabilities, so it was sent no notices`)
		return
	}
	err := c.a.rt.notices.ack(c.a.id, c.peerID, f.NoticeID)
	switch {
	case errors.Is(err, errUnknownNotice):
		c.reject("", link.CodeBadFrame, "notice_ack: peer "+c.peerID+" has no notice "+f.NoticeID)
	case err != nil:
		c.a.log.Error("notice ack not recorded", "peer_id", c.peerID, "notice_id", f.NoticeID, "err", err)
		c.reject("", "unavailable", "notice_ack for "+f.NoticeID+" was not recorded ("+err.Error()+"); send it again")
	}
}

// noticeOptions wires the mailboxes to the channels: their bound, events
// and live connections.
func (rt *Runtime) noticeOptions(noSync bool, log *slog.Logger) noticeOptions {
	return noticeOptions{
		NoSync: noSync, Logger: log, Metrics: &rt.metrics.reg,
		MaxPerPeer: func(chID string) int {
			if ch := rt.channels[chID]; ch != nil && ch.cfg.Config.MaxNoticesPerPeer > 0 {
				return ch.cfg.Config.MaxNoticesPerPeer
			}
			return DefaultMaxNoticesPerPeer
		},
		Event: func(chID string, e events.Event) {
			if ch := rt.channels[chID]; ch != nil {
				ch.events.Add(e)
			}
		},
		Wake: func(chID, peerID string) bool {
			if ch := rt.channels[chID]; ch != nil {
				if a, ok := ch.adapter.(*terminalAdapter); ok {
					return a.wakeNotices(peerID)
				}
			}
			return false
		},
	}
}
