package identity

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"termlink/internal/testpki"
	"termlink/server/config"
)

func FuzzPeerURI(f *testing.F) {
	for _, s := range []string{"termlink:peer/kiosk-1", "termlink://peer/a", "TERMLINK:peer/x", "termlink:peer/", "termlink:peer/a?b",
		"spiffe://x/y", "termlink:peer/%41", "termlink:device/a", "termlink:peer/a/b", "termlink:peer/a#f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		id, ours, err := peerFromURI(u)
		if err != nil || !ours {
			if id != "" {
				t.Fatalf("%q: id %q with err %v ours %v", s, id, err, ours)
			}
			return
		}
		if !ValidPeerID(id) {
			t.Fatalf("%q gave peer_id %q, not a valid id", s, id)
		}
		u2, err := url.Parse("termlink:peer/" + id)
		if err != nil {
			t.Fatal(err)
		}
		if id2, ok, err := peerFromURI(u2); err != nil || !ok || id2 != id {
			t.Fatalf("round trip of %q: %q %v %v", id, id2, ok, err)
		}
	})
}

// ClientAuth.Check without a handshake: each certificate a device may
// present gets the peer it names or the status and reason of its
// refusal; a deny list refuses one certificate of a good CA.
func TestClientAuthCheck(t *testing.T) {
	dir := t.TempDir()
	devCA := testpki.NewCA(t, dir, "devices")
	uri := devCA.Client(t, "uri", "ignored-cn", "termlink:peer/kiosk-1")
	cn := devCA.Client(t, "cn", "desk-7")
	denied := devCA.Client(t, "denied", "lost-1")
	badCN := devCA.Client(t, "badcn", "not a peer id")
	noName := devCA.Client(t, "noname", "")
	other := devCA.Client(t, "spiffe", "desk-8", "spiffe://example/x")
	serverOnly := devCA.Issue(t, "serveronly", testpki.Opts{CN: "kiosk-2"})
	expired := devCA.Issue(t, "expired", testpki.Opts{CN: "old-1", Client: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	stranger := testpki.NewCA(t, dir, "stranger").Client(t, "stranger", "kiosk-1")

	ca, err := NewClientAuth(config.ChannelConfig{ClientCA: devCA.File, DenyCerts: []config.Fingerprint{config.FingerprintOf(denied.Cert)}})
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Denies(config.FingerprintOf(denied.Cert)) || ca.Denies(config.FingerprintOf(uri.Cert)) {
		t.Fatal("Denies does not follow denyCerts")
	}
	state := func(l *testpki.Leaf) *tls.ConnectionState {
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{l.Cert}}
	}
	for _, tc := range []struct {
		name   string
		st     *tls.ConnectionState
		peer   string
		status int
		reason string
	}{
		{"URI SAN", state(uri), "kiosk-1", 0, ""},
		{"common name", state(cn), "desk-7", 0, ""},
		{"another scheme's URI, then CN", state(other), "desk-8", 0, ""},
		{"no TLS", nil, "", http.StatusUnauthorized, "requires mutual TLS"},
		{"no certificate", &tls.ConnectionState{}, "", http.StatusUnauthorized, "no client certificate"},
		{"denied", state(denied), "", http.StatusForbidden, "revoked (on the channel's denyCerts list)"},
		{"another CA", state(stranger), "", http.StatusForbidden, "unknown authority"},
		{"expired", state(expired), "", http.StatusForbidden, "expired on"},
		{"not for client auth", state(serverOnly), "", http.StatusForbidden, "not meant for this use"},
		{"CN not a peer_id", state(badCN), "", http.StatusForbidden, "is not a valid peer_id"},
		{"names no peer", state(noName), "", http.StatusForbidden, "names no peer"},
	} {
		peer, status, reason := ca.Check(tc.st, time.Now())
		if peer != tc.peer || status != tc.status || !strings.Contains(reason, tc.reason) || (tc.reason == "") != (reason == "") {
			t.Errorf("%s: %q %d %q, want %q %d %q", tc.name, peer, status, reason, tc.peer, tc.status, tc.reason)
		}
	}
	if _, err := NewClientAuth(config.ChannelConfig{ClientCA: dir + "/missing.pem"}); err == nil {
		t.Error("a missing clientCA file loaded")
	}
}

// PeerIdentity: one URI SAN of ours wins over the CN; two different ones
// or a malformed one refuse the certificate.
func TestPeerIdentity(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "devices")
	for _, tc := range []struct {
		cn   string
		uris []string
		want string // "" = refused
		why  string
	}{
		{"cn-1", []string{"termlink:peer/a", "termlink:peer/a"}, "a", ""},
		{"cn-1", []string{"TERMLINK:peer/b"}, "b", ""},
		{"cn-1", []string{"termlink:peer/a", "termlink:peer/b"}, "", "names two peers"},
		{"cn-1", []string{"termlink://peer/a"}, "", "want termlink:peer/<peer_id>"},
		{"cn-1", []string{"termlink:peer/a?x=1"}, "", "want termlink:peer/<peer_id>"},
		{"cn-1", []string{"termlink:peer/-a"}, "", "must be 1-128 characters"},
		{"cn-1", nil, "cn-1", ""},
	} {
		leaf := ca.Client(t, "c", tc.cn, tc.uris...)
		got, err := PeerIdentity(leaf.Cert)
		switch {
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("%v: %q %v, want %q", tc.uris, got, err, tc.want)
		case tc.want == "" && (err == nil || !strings.Contains(err.Error(), tc.why)):
			t.Errorf("%v: %q %v, want an error with %q", tc.uris, got, err, tc.why)
		}
	}
}
