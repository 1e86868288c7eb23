package server

import (
	"context"
	"log/slog"
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
	s.rt.notices, err = s.rt.backend.openNotices(context.Background(), filepath.Join(s.cfg.Workspace, "notices"), s.rt.noticeOptions(s.opt.NoSync, s.log))
	return s.rt.notices, err
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
		Event: rt.channels.event,
		Push: func(chID, peerID string) bool {
			if a := rt.channels.adapter(chID); a != nil {
				return a.PushNotices(peerID)
			}
			return false
		},
		Channel: func(chID string) (configured, enabled bool) {
			return rt.channels.exists(chID), rt.channels.adapter(chID) != nil
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
	return chID, peer, wschannel.ValidID(peer)
}
