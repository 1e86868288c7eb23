package server

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"termlink/link"
	"termlink/server/events"
	"termlink/server/notices"
	"termlink/server/registry"
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
// the mailbox for good. The mailboxes are package notices'; this file is
// the connection's side and the wiring.

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
func (c *wsConn) pushNotices(ns notices.Mailboxes) {
	var ids []string
	c.mu.Lock()
	if c.state < connClosing {
		for more := true; more; {
			var frames [][]byte
			var next []string
			frames, next, c.noticeSeq, more = ns.Due(c.a.id, c.peerID, c.noticeSeq, c.max, time.Now())
			c.notices = append(c.notices, frames...)
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
	err := c.a.rt.notices.Ack(c.a.id, c.peerID, f.NoticeID)
	switch {
	case errors.Is(err, notices.ErrUnknownNotice):
		c.reject("", link.CodeBadFrame, "notice_ack: peer "+c.peerID+" has no notice "+f.NoticeID)
	case err != nil:
		c.a.log.Error("notice ack not recorded", "peer_id", c.peerID, "notice_id", f.NoticeID, "err", err)
		c.reject("", "unavailable", "notice_ack for "+f.NoticeID+" was not recorded ("+err.Error()+"); send it again")
	}
}

// noticeOptions wires the mailboxes to the channels (their bound, events,
// live connections, whether they exist) and to the device registry (the
// peers a broadcast reaches, notices_pending). Both are looked up when
// called: New builds them after the mailboxes open and before it starts
// them or serves the API, and nothing calls these before then.
func (rt *Runtime) noticeOptions(noSync bool, log *slog.Logger) notices.Options {
	return notices.Options{
		NoSync: noSync, Logger: log, Metrics: &rt.metrics.reg,
		Directory: registryDirectory{rt},
		Changed:   func(chID, peerID string) { rt.fleet.reg.Changed(chID, peerID) },
		MaxPerPeer: func(chID string) int {
			if ch := rt.channels[chID]; ch != nil && ch.cfg.Config.MaxNoticesPerPeer > 0 {
				return ch.cfg.Config.MaxNoticesPerPeer
			}
			return notices.DefaultMaxPerPeer
		},
		Event: func(chID string, e events.Event) {
			if ch := rt.channels[chID]; ch != nil {
				ch.events.Add(e)
			}
		},
		Push: func(chID, peerID string) bool {
			if ch := rt.channels[chID]; ch != nil && ch.pushNotices != nil {
				return ch.pushNotices(peerID)
			}
			return false
		},
		Channel: func(chID string) (configured, enabled bool) {
			ch := rt.channels[chID]
			return ch != nil, ch != nil && ch.adapter != nil
		},
	}
}

// registryDirectory is the device registry as a notices.PeerDirectory:
// every device the server has seen, online or not.
type registryDirectory struct{ rt *Runtime }

// PeersWithTags implements notices.PeerDirectory.
func (d registryDirectory) PeersWithTags(channelID string, tags map[string]string) []string {
	var out []string
	for _, p := range d.rt.fleet.reg.List(channelID, registry.Filter{Tags: tags}) {
		out = append(out, p.PeerID)
	}
	return out
}

// pushFromAgent turns an agent's unsolicited output (a Nuum frame after
// its turn ended, a Terminal Protocol v1 "notice" line) into a notice for
// the peer of the session.
func (s *Server) pushFromAgent(sessionKey, text string) {
	chID, peer, ok := s.peerOfSession(sessionKey)
	text = strings.TrimSpace(text)
	if !ok || text == "" {
		s.log.Warn("agent output outside a turn dropped: no peer for its session", "session", sessionKey)
		return
	}
	if err := s.rt.notices.FromAgent(chID, peer, text); err != nil {
		s.log.Warn("agent push not stored as a notice", "session", sessionKey, "err", err)
	}
}

// peerOfSession splits a session key (channel:account:peer[:thread]).
func (s *Server) peerOfSession(key string) (channelID, peerID string, ok bool) {
	chID, rest, ok := strings.Cut(key, ":")
	ch := s.rt.channels[chID]
	if !ok || ch == nil {
		return "", "", false
	}
	rest, ok = strings.CutPrefix(rest, ch.cfg.AccountID+":")
	if !ok {
		return "", "", false
	}
	peer, _, _ := strings.Cut(rest, ":")
	return chID, peer, idRE.MatchString(peer)
}
