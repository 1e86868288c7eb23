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
// number of the last notice queued on it. Notices are numbered in created
// order, so the ones it owes are exactly its peer's open notices numbered
// above the cursor. The mailbox side pushes them into the connection's
// queue, as the dispatcher pushes replies: at connect (pushed behind
// connected, which they wait for) and whenever a notice is created for
// the peer while it is online. The writer only writes them, a bounded
// number per batch; it never calls the mailbox. A new connection starts
// at 0, which is the resend on reconnect; an ack takes a notice out of
// the mailbox for good.

// noticesOnConnect queues every open notice of c's peer behind connected,
// if c listed "notice".
func (c *wsConn) noticesOnConnect() {
	if c.notice {
		c.pushNotices(c.a.rt.notices)
	}
}

// pushNotices queues on c the notices of its peer it has not queued yet
// and records them as sent: each is the connection's to write now, and
// the next connection sends again whatever is not acked.
func (c *wsConn) pushNotices(ns *Notices) {
	var ids []string
	c.mu.Lock()
	if c.state < connClosing {
		for more := true; more; {
			var frames [][]byte
			var next []string
			frames, next, c.noticeSeq, more = ns.due(c.a.id, c.peerID, c.noticeSeq, c.max, time.Now())
			c.notices = append(c.notices, frames...)
			ids = append(ids, next...)
		}
		if len(ids) > 0 {
			c.startWriterLocked()
		}
	}
	c.mu.Unlock()
	if len(ids) > 0 {
		ns.markSent(c.a.id, c.peerID, ids, time.Now())
	}
}

// pushNotices is the mailbox's push for peer; it reports whether the
// peer is connected and takes notices.
func (a *terminalAdapter) pushNotices(peerID string) bool {
	a.mu.Lock()
	c := a.peers[peerID]
	a.mu.Unlock()
	if c == nil || !c.notice {
		return false
	}
	c.pushNotices(a.rt.notices)
	return true
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
		Push: func(chID, peerID string) bool {
			if ch := rt.channels[chID]; ch != nil {
				if a, ok := ch.adapter.(*terminalAdapter); ok {
					return a.pushNotices(peerID)
				}
			}
			return false
		},
	}
}
