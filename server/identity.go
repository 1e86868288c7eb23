package server

import (
	"context"
	"net"
	"path/filepath"

	"termlink/server/config"
	"termlink/server/identity"
)

// The server's side of device identity (package identity): building its
// Service over the channels, and reloading the client CAs. The
// connection's side (tokens, connect, client certificates) is
// wschannel's.

// Where device identity is kept (issue 25): in cluster mode the cluster's
// KV buckets, so that a token bound on one edge holds on every edge and a
// pairing code asked for through one edge is approved on any node and
// collected through another; else the workspace's file and this
// process's memory. The backend (backend.go) opens them; the identity
// routes and the connections call only identity.Bindings and
// identity.Codes.

// openIdentity opens every channel's learnt credentials
// (workspace/credentials/<channel>.json, or the cluster's) and builds
// the identity Service over them and the backend's pairing codes: a
// capability (its routes: bindings, enrollment).
func (s *Server) openIdentity() (capability, error) {
	dir := filepath.Join(s.cfg.Workspace, "credentials")
	chans := make(map[string]identity.Channel, len(s.rt.Channels))
	for id, ch := range s.rt.Channels {
		b, err := s.backend.openBindings(context.Background(), dir, id, s.opt.NoSync, s.log)
		if err != nil {
			return nil, err
		}
		ch.Bindings = b
		chans[id] = identity.Channel{ID: id, Enabled: ch.Config.Enabled, Config: ch.Config.Config, Bindings: ch.Bindings, Events: ch.Events}
	}
	s.ident = identity.New(identity.Options{Channels: chans, Codes: s.backend.openCodes(context.Background(), s.log), Log: s.log, Gate: s.rt.Outside})
	return s.ident, nil
}

// requiresToken reports whether a channel takes only devices with a
// credential (identity.RequiresToken).
func requiresToken(cc config.ChannelConfig) bool { return identity.RequiresToken(cc) }

// enrollmentOn reports whether any enabled channel takes enrollment (for
// the LAN advertisement's TXT record).
func (s *Server) enrollmentOn() bool {
	for _, ch := range s.cfg.Channels {
		if ch.Enabled && ch.Config.Enrollment {
			return true
		}
	}
	return false
}

// warnOpenChannels logs, when the server listens beyond loopback, each
// channel that takes any device as any peer (no tokens, no enrollment).
func (s *Server) warnOpenChannels(addr net.Addr) {
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return
	}
	for _, id := range s.rt.Order {
		ch := s.rt.Channels[id]
		if ch.Config.Enabled && !requiresToken(ch.Config.Config) {
			s.log.Warn("channel is open: any device may connect as any peer_id (no tokens, no enrollment); add \"tokens\" or \"enrollment\": true to its config",
				"channel_id", id, "addr", addr.String())
		}
	}
}

// ReloadClientCerts reads the clientCA files of cfg's channels again and
// takes their denyCerts lists (tlsconf.TLS.ReloadClients): new
// connections are checked against them, and an open connection whose
// certificate is now denied is closed (4003). Nothing changes when any
// channel's files do not load, or one would turn mutual TLS on or off.
func (s *Server) ReloadClientCerts(cfg *config.Config) error {
	var enabled []string
	for _, id := range s.rt.Order {
		if s.rt.Channels.Adapter(id) != nil {
			enabled = append(enabled, id)
		}
	}
	next, err := s.tls.ReloadClients(cfg, enabled)
	if err != nil {
		return err
	}
	for id, ca := range next {
		s.rt.Channels.Adapter(id).ReloadClientAuth(ca)
	}
	s.log.Info("client CAs and deny lists reloaded", "channels", len(next))
	return nil
}
