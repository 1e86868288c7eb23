package wschannel

import (
	"fmt"
	"net/http"
	"time"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/identity"
)

// The connection's side of device identity (package identity): the
// bearer token before the upgrade, the connect frame's token, the client
// certificate, and the mutual TLS reload.

// tokenKnown is the check before the WebSocket upgrade: the bearer token
// is configured or learnt.
func (a *terminalAdapter) tokenKnown(token string) bool {
	return identity.TokenKnown(a.cfg.Config.Tokens, a.creds, token)
}

// authorizeConnect runs Authorize for a connect frame and records a
// refusal (peer, remote address, reason; never the token) in the events
// log. It reports whether the connect may go on; an enrolled peer's
// frame gets the name and tags the operator approved it with.
func (c *wsConn) authorizeConnect(f *link.Connect, token string) (bool, string) {
	a, peerID := c.a, f.PeerID
	res := a.creds.Authorize(a.cfg.Config.Tokens, peerID, token, c.remote)
	res.Apply(f)
	if res.Bound {
		a.events.Add(events.Event{Event: identity.EvCredentialBound, PeerID: peerID,
			Detail: "list token bound to this peer_id on first use (remote=" + c.remote + ")"})
		a.log.Info("list token bound to its first peer", "peer_id", peerID, "remote", c.remote) // once per list token
	}
	if res.OK {
		return true, ""
	}
	what := "connect refused"
	if res.Takeover {
		what = "takeover refused"
		if identity.GateNet(a.outside, gateTakeoverLog, c.remote, peerID) {
			a.log.Warn("takeover refused: a connection presented a token that is not this peer's", "peer_id", a.outside.Field(peerID), "remote", c.remote)
		}
	}
	a.refused(c.remote, events.Event{Event: events.TerminalRefused, PeerID: peerID,
		Detail: what + " (remote=" + c.remote + "): " + res.Why})
	return false, res.Why
}

// sharedCredential is the glob whose shared token let c in as f's peer
// (identity.SharedCredential: what authorizeConnect's Decide said) and
// how many peers that token may have, for the registry to count; "" for
// the peer's own credential, a client certificate, or no token.
func (c *wsConn) sharedCredential(f *link.Connect) (glob string, max int) {
	if !identity.RequiresToken(c.a.cfg.Config) || c.cert().fp != (config.Fingerprint{}) {
		return "", 0
	}
	tok := c.headerToken()
	if tok == "" {
		tok = f.Token
	}
	glob, max, _ = identity.SharedCredential(c.a.cfg.Config.Tokens, f.PeerID, tok)
	return glob, max
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
	a.refused(r.RemoteAddr, events.Event{Event: events.TerminalRefused,
		Detail: fmt.Sprintf("%d before upgrade: %s; from %s", status, reason, r.RemoteAddr)})
	http.Error(w, "unauthorized: "+reason, status)
	return certIdentity{}, false
}

// certAllows checks connect's peer_id against the certificate's; on a
// mismatch the device is told and the connection closed.
func (c *wsConn) certAllows(peerID string) bool {
	if c.cert().peer == "" || c.cert().peer == peerID {
		return true
	}
	why := fmt.Sprintf("certificate is for peer %s, connect says %s", c.cert().peer, peerID)
	c.a.refused(c.remote, events.Event{Event: events.TerminalRefused, PeerID: peerID, Detail: "connect refused: " + why})
	c.sendError("", link.CodeUnauthorized, why)
	c.closeWith(CloseUnauthorized, "unauthorized")
	return false
}

// ReloadClientAuth implements Adapter.
func (a *terminalAdapter) ReloadClientAuth(ca *identity.ClientAuth) {
	a.clientAuth.Store(ca)
	a.closeDenied(ca)
}

// closeDenied closes the open connections whose certificate ca denies.
func (a *terminalAdapter) closeDenied(ca *identity.ClientAuth) {
	var denied []*wsConn
	a.mu.Lock()
	for _, c := range a.conns {
		if c.cert().peer != "" && ca.Denies(c.cert().fp) {
			denied = append(denied, c)
		}
	}
	a.mu.Unlock()
	for _, c := range denied {
		a.events.Add(events.Event{Event: events.TerminalRefused, PeerID: c.cert().peer,
			Detail: "certificate revoked (denyCerts, reloaded): connection closed; SHA-256 " + c.cert().fp.String()})
		c.closeWith(CloseUnauthorized, "client certificate revoked")
	}
}

// AuthorizeHTTP implements Adapter: what ServeUpgrade and the connect
// ask of a device, for a request that has no connect frame (its token
// must come in the header).
func (a *terminalAdapter) AuthorizeHTTP(r *http.Request) (peer string, status int, why string) {
	if ca := a.clientAuth.Load(); ca != nil {
		if peer, status, why = ca.Check(r.TLS, time.Now()); status != 0 {
			return "", status, why
		}
	}
	if !identity.RequiresToken(a.cfg.Config) {
		return peer, 0, ""
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "", http.StatusUnauthorized, "no token: channel " + a.id + " takes only devices with a credential; send Authorization: Bearer <the device's channel token>"
	}
	tok, ok := httpapi.Bearer(auth)
	if !ok || !a.tokenKnown(tok) {
		return "", http.StatusUnauthorized, "the bearer token is not valid for channel " + a.id
	}
	return peer, 0, ""
}

// Kinds of what a stranger's refused connection makes the adapter write
// (throttle: per remote network, and in all).
const (
	gateTakeoverLog = "takeover refused (log)"
)

// refused records a refusal that a device or a stranger at remote
// caused, through the server's gate (Deps.Outside): a burst per remote
// network and per event name, then a summary; a flood of bad tokens or
// certificates cannot push the channel's other events out.
func (a *terminalAdapter) refused(remote string, e events.Event) {
	if identity.GateNet(a.outside, e.Event, remote, e.Detail) {
		a.events.Add(e)
	}
}
