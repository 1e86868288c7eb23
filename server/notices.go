package server

import (
	"context"
	"path/filepath"
	"strings"

	"termlink/server/notices"
	"termlink/server/registry"
	"termlink/server/wschannel"
)

// The notice mailboxes' wiring (package notices): their options over the
// channels and the device registry, an agent's push, and the notice_ack
// frame's route. Delivery on a device's connection is wschannel's.

// openNotices opens the notice mailboxes through the backend (its
// storage: the workspace's WAL, or the cluster's KV bucket; the rules are
// package notices' either way): a capability.
func (s *Server) openNotices() (c capability, err error) {
	s.notices, err = s.backend.openNotices(context.Background(), filepath.Join(s.cfg.Workspace, "notices"), s.noticeOptions())
	return s.notices, err
}

// noticeOptions wires the mailboxes to the channels (their bound, events,
// live connections, whether they exist) and to the device registry (the
// peers a broadcast reaches, notices_pending). Both are looked up when
// called: New builds them after the mailboxes open and before it starts
// them or serves the API, and nothing calls these before then.
func (s *Server) noticeOptions() notices.Options {
	rt := s.rt
	return notices.Options{
		NoSync: s.opt.NoSync, Logger: s.log, Metrics: &rt.Metrics.Reg,
		Directory: registryDirectory{s},
		Changed:   func(chID, peerID string) { s.fleet.reg.Changed(chID, peerID) },
		MaxPerPeer: func(chID string) int {
			if ch := rt.Channels[chID]; ch != nil && ch.Config.Config.MaxNoticesPerPeer > 0 {
				return ch.Config.Config.MaxNoticesPerPeer
			}
			return notices.DefaultMaxPerPeer
		},
		Event: rt.Channels.Event,
		Push: func(chID, peerID string) bool {
			if a := rt.Channels.Adapter(chID); a != nil {
				return a.PushNotices(peerID)
			}
			return false
		},
		Channel: func(chID string) (configured, enabled bool) {
			return rt.Channels.Exists(chID), rt.Channels.Adapter(chID) != nil
		},
	}
}

// registryDirectory is the device registry as a notices.PeerDirectory:
// every device the server has seen, online or not.
type registryDirectory struct{ s *Server }

// PeersWithTags implements notices.PeerDirectory.
func (d registryDirectory) PeersWithTags(channelID string, tags map[string]string) []string {
	var out []string
	for _, p := range d.s.fleet.reg.List(channelID, registry.Filter{Tags: tags}) {
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
	if err := s.notices.FromAgent(chID, peer, text); err != nil {
		s.log.Warn("agent push not stored as a notice", "session", sessionKey, "err", err)
	}
}

// peerOfSession splits a session key (channel:account:peer[:thread]).
func (s *Server) peerOfSession(key string) (channelID, peerID string, ok bool) {
	chID, rest, ok := strings.Cut(key, ":")
	ch := s.rt.Channels[chID]
	if !ok || ch == nil {
		return "", "", false
	}
	rest, ok = strings.CutPrefix(rest, ch.Config.AccountID+":")
	if !ok {
		return "", "", false
	}
	peer, _, _ := strings.Cut(rest, ":")
	return chID, peer, wschannel.ValidID(peer)
}
