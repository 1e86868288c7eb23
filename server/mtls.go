package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"termlink/internal/certmsg"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
)

// Mutual TLS per channel. The listener asks every client for a
// certificate (serverTLS); a channel with clientCA refuses the upgrade of
// a connection that has none, whose certificate is on its denyCerts list,
// or that does not chain to its CA, and remembers the peer_id the
// certificate names: connect must use that peer_id.

// peerURIScheme and peerURIPath make a device's identity URI SAN,
// termlink:peer/<peer_id>.
const (
	peerURIScheme = "termlink"
	peerURIPath   = "peer/"
)

// clientAuth is a mutual TLS channel's CA pool and deny list.
type clientAuth struct {
	file string
	pool *x509.CertPool
	deny map[config.Fingerprint]bool
}

// newClientAuth loads cc's clientCA.
func newClientAuth(cc config.ChannelConfig) (*clientAuth, error) {
	pool, err := config.LoadCAFile(cc.ClientCA)
	if err != nil {
		return nil, err
	}
	ca := &clientAuth{file: cc.ClientCA, pool: pool, deny: map[config.Fingerprint]bool{}}
	for _, fp := range cc.DenyCerts {
		ca.deny[fp] = true
	}
	return ca, nil
}

// check verifies the client certificate of a connection: the peer_id it
// names, or the HTTP status and the reason to refuse it.
func (ca *clientAuth) check(st *tls.ConnectionState, now time.Time) (peer string, status int, reason string) {
	if st == nil {
		return "", http.StatusUnauthorized, "this channel requires mutual TLS: connect with wss:// and a client certificate"
	}
	if len(st.PeerCertificates) == 0 {
		return "", http.StatusUnauthorized, "no client certificate: this channel requires one signed by its clientCA (termd --cert and --key)"
	}
	leaf := st.PeerCertificates[0]
	fp := config.FingerprintOf(leaf)
	if ca.deny[fp] {
		return "", http.StatusForbidden, fmt.Sprintf("client certificate is revoked (on the channel's denyCerts list): CN %q, serial %s, SHA-256 %s",
			leaf.Subject.CommonName, leaf.SerialNumber, fp)
	}
	inter := x509.NewCertPool()
	for _, c := range st.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: ca.pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		msg, ok := certmsg.Describe(err, "client certificate", "it must be signed by this channel's clientCA")
		if !ok {
			msg = "client certificate not accepted: " + err.Error()
		}
		return "", http.StatusForbidden, fmt.Sprintf("%s (CN %q)", msg, leaf.Subject.CommonName)
	}
	peer, err = PeerIdentity(leaf)
	if err != nil {
		return "", http.StatusForbidden, err.Error()
	}
	return peer, 0, ""
}

// PeerIdentity is the peer_id a client certificate names: its URI SAN
// termlink:peer/<peer_id> when it has one, else its subject's common name.
func PeerIdentity(cert *x509.Certificate) (string, error) {
	found := ""
	for _, u := range cert.URIs {
		id, ours, err := peerFromURI(u)
		switch {
		case err != nil:
			return "", fmt.Errorf("client certificate: %w", err)
		case !ours:
		case found != "" && found != id:
			return "", fmt.Errorf("client certificate names two peers (termlink:peer/%s and termlink:peer/%s): it must name one", found, id)
		default:
			found = id
		}
	}
	if found != "" {
		return found, nil
	}
	cn := cert.Subject.CommonName
	if cn == "" {
		return "", fmt.Errorf("client certificate names no peer: give it the URI SAN %s:%s<peer_id> or the peer_id as its common name", peerURIScheme, peerURIPath)
	}
	if !idRE.MatchString(cn) {
		return "", fmt.Errorf("client certificate's common name %q is not a valid peer_id (1-128 characters of A-Z a-z 0-9 . _ @ + -); give it the URI SAN %s:%s<peer_id>", cn, peerURIScheme, peerURIPath)
	}
	return cn, nil
}

// peerFromURI reads termlink:peer/<peer_id>. ours is false for a URI of
// another scheme (left alone); a termlink URI of another shape is an error.
func peerFromURI(u *url.URL) (id string, ours bool, err error) {
	if !strings.EqualFold(u.Scheme, peerURIScheme) {
		return "", false, nil
	}
	want := fmt.Sprintf("want %s:%s<peer_id>", peerURIScheme, peerURIPath)
	if u.Opaque == "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", true, fmt.Errorf("URI SAN %q: %s", u.String(), want)
	}
	id, ok := strings.CutPrefix(u.Opaque, peerURIPath)
	if !ok {
		return "", true, fmt.Errorf("URI SAN %q: %s", u.String(), want)
	}
	if !idRE.MatchString(id) {
		return "", true, fmt.Errorf("URI SAN %q: peer_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + -", u.String(), id)
	}
	return id, true, nil
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
	peer, status, reason := ca.check(r.TLS, time.Now())
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
	next := map[*terminalAdapter]*clientAuth{}
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
		ca, err := newClientAuth(cc)
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
func (a *terminalAdapter) closeDenied(ca *clientAuth) {
	var denied []*wsConn
	a.mu.Lock()
	for c := range a.conns {
		if c.cert.peer != "" && ca.deny[c.cert.fp] {
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
