package wschannel

import (
	"time"
)

// Notice delivery on a device connection. Only a connection whose connect
// listed "notice" takes part. It keeps a cursor (noticeSeq): the created
// number of the last notice queued on it. Notices are numbered in created
// order, so the ones it owes are exactly its peer's open notices numbered
// above the cursor. The mailbox side pushes them into the connection's
// queue, as the runtime pushes replies: at connect (pushed behind
// connected, which they wait for) and whenever a notice is created for
// the peer while it is online (PushNotices). The writer only writes them,
// a bounded number per batch; it never calls the mailbox. A new
// connection starts at 0, which is the resend on reconnect; an ack takes
// a notice out of the mailbox for good. The mailboxes are package
// notices'; this file is the connection's side.

// noticesOnConnect queues every open notice of c's peer behind connected,
// if c listed "notice".
func (c *wsConn) noticesOnConnect() {
	if c.notice {
		c.pushNotices(c.a.notices)
	}
}

// pushNotices queues on c the notices of its peer it has not queued yet
// and records them as sent: each is the connection's to write now, and
// the next connection sends again whatever is not acked.
func (c *wsConn) pushNotices(ns Mailboxes) {
	var ids []string
	c.mu.Lock()
	if c.state < connClosing {
		for more := true; more; {
			var frames [][]byte
			var next []string
			frames, next, c.noticeSeq, more = ns.Due(c.a.id, c.peerID, c.noticeSeq, c.maxFrames(), time.Now())
			if len(frames) > 0 {
				q := c.busy()
				q.notices = append(q.notices, frames...)
			}
			ids = append(ids, next...)
		}
		if len(ids) > 0 {
			c.startWriterLocked()
		}
	}
	c.mu.Unlock()
	if len(ids) > 0 {
		ns.MarkSent(c.a.id, c.peerID, ids, time.Now())
	}
}

// PushNotices implements Adapter: the mailbox's push for peer.
func (a *terminalAdapter) PushNotices(peerID string) bool {
	a.mu.Lock()
	c := a.peers[peerID]
	a.mu.Unlock()
	if c == nil || !c.notice {
		return false
	}
	c.pushNotices(a.notices)
	return true
}
