package server

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/identity"
)

// The server's side of device identity (package identity): building its
// Service over the channels, and the few calls the connection makes. The
// channel adapter's package takes this glue when it moves.

// openCreds opens every channel's learnt credentials
// (workspace/credentials/<channel>.json).
func (rt *Runtime) openCreds(workspace string, noSync bool, log *slog.Logger) error {
	dir := filepath.Join(workspace, "credentials")
	for id, ch := range rt.channels {
		b, err := identity.OpenLocalBindings(dir, id, noSync, log)
		if err != nil {
			return err
		}
		ch.creds = b
	}
	return nil
}

// identityRoutes builds the identity Service over the channels and
// registers its routes (bindings, enrollment).
func (s *Server) identityRoutes(mux httpapi.Mux) {
	chans := make(map[string]identity.Channel, len(s.rt.channels))
	for id, ch := range s.rt.channels {
		chans[id] = identity.Channel{ID: id, Enabled: ch.adapter != nil, Config: ch.cfg.Config, Bindings: ch.creds, Events: ch.events}
	}
	s.ident = identity.New(identity.Options{Channels: chans, Log: s.log})
	s.ident.Routes(mux)
}

// deviceOpen reports whether a route takes no admin token: the device
// WebSocket and the enroll endpoints (auth.go's guard).
func deviceOpen(pattern string) bool {
	return pattern == wsPattern || identity.DeviceRoute(pattern)
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
	for _, id := range s.rt.order {
		ch := s.rt.channels[id]
		if ch.cfg.Enabled && !requiresToken(ch.cfg.Config) {
			s.log.Warn("channel is open: any device may connect as any peer_id (no tokens, no enrollment); add \"tokens\" or \"enrollment\": true to its config",
				"channel_id", id, "addr", addr.String())
		}
	}
}

// tokenKnown is the check before the WebSocket upgrade: the bearer token
// is configured or learnt.
func (a *terminalAdapter) tokenKnown(token string) bool {
	return identity.TokenKnown(a.cfg.Config.Tokens, a.ch.creds, token)
}

// authorizeConnect runs Authorize for a connect frame and records a
// refusal (peer, remote address, reason; never the token) in the events
// log. It reports whether the connect may go on; an enrolled peer's
// frame gets the name and tags the operator approved it with.
func (c *wsConn) authorizeConnect(f *link.Connect, token string) (bool, string) {
	a, peerID := c.a, f.PeerID
	res := a.ch.creds.Authorize(a.cfg.Config.Tokens, peerID, token, c.remote)
	res.Apply(f)
	if res.Bound {
		a.ch.events.Add(events.Event{Event: identity.EvCredentialBound, PeerID: peerID,
			Detail: "list token bound to this peer_id on first use (remote=" + c.remote + ")"})
		a.log.Info("list token bound to its first peer", "peer_id", peerID, "remote", c.remote)
	}
	if res.OK {
		return true, ""
	}
	what := "connect refused"
	if res.Takeover {
		what = "takeover refused"
		a.log.Warn("takeover refused: a connection presented a token that is not this peer's", "peer_id", peerID, "remote", c.remote)
	}
	a.ch.events.Add(events.Event{Event: events.TerminalRefused, PeerID: peerID,
		Detail: what + " (remote=" + c.remote + "): " + res.Why})
	return false, res.Why
}

// certIdentity is what a connection's client certificate proved: the
// peer it names and its fingerprint (for a deny list reloaded later).
type certIdentity struct {
	peer string
	fp   config.Fingerprint
}

// checkClientCert refuses, before the upgrade, a connection to a mutual
// TLS channel without an acceptable certificate; it returns what the
// certificate proved (zero on a channel without clientCA).
func (a *terminalAdapter) checkClientCert(w http.ResponseWriter, r *http.Request) (certIdentity, bool) {
	ca := a.clientAuth.Load()
	if ca == nil {
		return certIdentity{}, true
	}
	peer, status, reason := ca.Check(r.TLS, time.Now())
	if status == 0 {
		return certIdentity{peer: peer, fp: config.FingerprintOf(r.TLS.PeerCertificates[0])}, true
	}
	a.ch.events.Add(events.Event{Event: events.TerminalRefused,
		Detail: fmt.Sprintf("%d before upgrade: %s; from %s", status, reason, r.RemoteAddr)})
	http.Error(w, "unauthorized: "+reason, status)
	return certIdentity{}, false
}

// certAllows checks connect's peer_id against the certificate's; on a
// mismatch the device is told and the connection closed.
func (c *wsConn) certAllows(peerID string) bool {
	if c.cert.peer == "" || c.cert.peer == peerID {
		return true
	}
	why := fmt.Sprintf("certificate is for peer %s, connect says %s", c.cert.peer, peerID)
	c.a.ch.events.Add(events.Event{Event: events.TerminalRefused, PeerID: peerID, Detail: "connect refused: " + why})
	c.sendError("", link.CodeUnauthorized, why)
	c.closeWith(CloseUnauthorized, "unauthorized")
	return false
}

// ReloadClientCerts reads the clientCA files of cfg's channels again and
// takes their denyCerts lists: new connections are checked against them,
// and an open connection whose certificate is now denied is closed (4003).
// A channel cannot turn mutual TLS on or off this way (the listener asks
// for certificates or not from the start): that needs a restart. Nothing
// changes when any channel's files do not load.
func (s *Server) ReloadClientCerts(cfg *config.Config) error {
	next := map[*terminalAdapter]*identity.ClientAuth{}
	for _, id := range s.rt.order {
		a, ok := s.rt.channels[id].adapter.(*terminalAdapter)
		if !ok {
			continue
		}
		cc := cfg.Channels[id].Config
		had := a.clientAuth.Load() != nil
		switch {
		case had != (cc.ClientCA != ""):
			return fmt.Errorf("channels.%s.config.clientCA: turning mutual TLS on or off needs a restart; client certificates not reloaded", id)
		case !had:
			continue
		}
		ca, err := identity.NewClientAuth(cc)
		if err != nil {
			return fmt.Errorf("channels.%s.config.clientCA: %w; client certificates not reloaded", id, err)
		}
		next[a] = ca
	}
	for a, ca := range next {
		a.clientAuth.Store(ca)
		a.closeDenied(ca)
	}
	s.log.Info("client CAs and deny lists reloaded", "channels", len(next))
	return nil
}

// closeDenied closes the open connections whose certificate ca denies.
func (a *terminalAdapter) closeDenied(ca *identity.ClientAuth) {
	var denied []*wsConn
	a.mu.Lock()
	for c := range a.conns {
		if c.cert.peer != "" && ca.Denies(c.cert.fp) {
			denied = append(denied, c)
		}
	}
	a.mu.Unlock()
	for _, c := range denied {
		a.ch.events.Add(events.Event{Event: events.TerminalRefused, PeerID: c.cert.peer,
			Detail: "certificate revoked (denyCerts, reloaded): connection closed; SHA-256 " + c.cert.fp.String()})
		c.closeWith(CloseUnauthorized, "client certificate revoked")
	}
}
