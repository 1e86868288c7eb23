package identity

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"termlink/internal/certmsg"
	"termlink/server/config"
)

// Mutual TLS per channel. The listener asks every client for a
// certificate (the server's tls.go); a channel with clientCA refuses the
// upgrade of a connection that has none, whose certificate is on its
// denyCerts list, or that does not chain to its CA, and remembers the
// peer_id the certificate names: connect must use that peer_id.

// peerURIScheme and peerURIPath make a device's identity URI SAN,
// termlink:peer/<peer_id>.
const (
	peerURIScheme = "termlink"
	peerURIPath   = "peer/"
)

// peerIDRE is what a peer_id may be (the server checks connect frames
// with the same rule).
var peerIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)

// ValidPeerID reports whether s may be a peer_id: 1-128 characters of
// A-Z a-z 0-9 . _ @ + -, starting with a letter or digit.
func ValidPeerID(s string) bool { return peerIDRE.MatchString(s) }

// ClientAuth is a mutual TLS channel's CA pool and deny list.
type ClientAuth struct {
	file string
	pool *x509.CertPool
	deny map[config.Fingerprint]bool
}

// NewClientAuth loads cc's clientCA and takes its denyCerts.
func NewClientAuth(cc config.ChannelConfig) (*ClientAuth, error) {
	pool, err := config.LoadCAFile(cc.ClientCA)
	if err != nil {
		return nil, err
	}
	ca := &ClientAuth{file: cc.ClientCA, pool: pool, deny: map[config.Fingerprint]bool{}}
	for _, fp := range cc.DenyCerts {
		ca.deny[fp] = true
	}
	return ca, nil
}

// Denies reports whether the certificate of fingerprint fp is denied.
func (ca *ClientAuth) Denies(fp config.Fingerprint) bool { return ca.deny[fp] }

// Check verifies the client certificate of a connection: the peer_id it
// names, or the HTTP status and the reason to refuse it.
func (ca *ClientAuth) Check(st *tls.ConnectionState, now time.Time) (peer string, status int, reason string) {
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
	if !ValidPeerID(cn) {
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
	if !ValidPeerID(id) {
		return "", true, fmt.Errorf("URI SAN %q: peer_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + -", u.String(), id)
	}
	return id, true, nil
}
