package link_test

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"termlink/internal/testpki"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/servertest"
)

// tlsServer runs a real termserver serving TLS with leaf; clientCA, when
// set, makes terminal-dev a mutual TLS channel with deny as its deny list.
func tlsServer(t *testing.T, leaf *testpki.Leaf, clientCA string, deny ...*testpki.Leaf) *servertest.Server {
	t.Helper()
	return servertest.Start(t, func(cfg *config.Config) {
		cfg.TLS = config.TLS{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile}
		ch := cfg.Channels["terminal-dev"]
		ch.Config.ClientCA = clientCA
		for _, l := range deny {
			ch.Config.DenyCerts = append(ch.Config.DenyCerts, config.FingerprintOf(l.Cert))
		}
		cfg.Channels["terminal-dev"] = ch
	})
}

// refused starts a device with cfg and waits until it is offline; its
// reason must hold every string in want.
func refused(t *testing.T, cfg link.ClientConfig, want ...string) {
	t.Helper()
	cfg.RetryInitial = time.Minute // one attempt is enough
	d := newDevice(t, cfg)
	d.waitState(link.StateWaiting, time.Time{}, 20*time.Second)
	reason := d.Status().Reason
	for _, w := range want {
		if !strings.Contains(reason, w) {
			t.Errorf("offline reason %q, want it to say %q", reason, w)
		}
	}
}

// Over real TLS on loopback: with the test CA the device connects and
// gets its reply; a wrong CA, an expired server certificate and one for
// another host name each keep it offline with a reason that says which.
func TestClientServerCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	stranger := testpki.NewCA(t, dir, "stranger")

	good := tlsServer(t, ca.Server(t, "good"), "")
	d := newDevice(t, link.ClientConfig{URL: good.URL, CAFile: ca.File})
	d.waitState(link.StateConnected, time.Time{}, 20*time.Second)
	id := d.send("over wss")
	d.waitReplies([]string{id}, 20*time.Second)

	t.Run("wrong CA", func(t *testing.T) {
		refused(t, link.ClientConfig{URL: good.URL, CAFile: stranger.File},
			"server certificate is signed by an unknown authority", "check --ca-file")
	})
	t.Run("expired", func(t *testing.T) {
		old := ca.Issue(t, "expired", testpki.Opts{CN: "localhost", DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
			NotBefore: time.Now().Add(-72 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
		s := tlsServer(t, old, "")
		refused(t, link.ClientConfig{URL: s.URL, CAFile: ca.File},
			"server certificate expired on "+old.Cert.NotAfter.UTC().Format(time.RFC3339))
	})
	t.Run("wrong host name", func(t *testing.T) {
		s := tlsServer(t, ca.Issue(t, "elsewhere", testpki.Opts{CN: "elsewhere", DNS: []string{"termserver.example"}}), "")
		refused(t, link.ClientConfig{URL: s.URL, CAFile: ca.File},
			"server certificate is for termserver.example, not 127.0.0.1")
	})
}

// Mutual TLS through link.Client: the right certificate connects and is
// answered; no certificate, another CA's, a certificate for another peer
// and a denied one keep the device offline with the server's reason; a
// key file others may read is refused before anything is dialled.
func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	devCA := testpki.NewCA(t, dir, "devices")
	kiosk := devCA.Client(t, "kiosk-1", "kiosk-1", "termlink:peer/kiosk-1")
	lost := devCA.Client(t, "lost", "lost-1")
	s := tlsServer(t, ca.Server(t, "server"), devCA.File, lost)
	base := link.ClientConfig{URL: s.URL, CAFile: ca.File, PeerID: "kiosk-1"}

	ok := base
	ok.CertFile, ok.KeyFile = kiosk.CertFile, kiosk.KeyFile
	d := newDevice(t, ok)
	d.waitState(link.StateConnected, time.Time{}, 20*time.Second)
	id := d.send("with my certificate")
	d.waitReplies([]string{id}, 20*time.Second)

	t.Run("no certificate", func(t *testing.T) {
		refused(t, base, "401", "no client certificate")
	})
	t.Run("other CA", func(t *testing.T) {
		c := base
		other := testpki.NewCA(t, t.TempDir(), "other").Client(t, "k", "kiosk-1", "termlink:peer/kiosk-1")
		c.CertFile, c.KeyFile = other.CertFile, other.KeyFile
		refused(t, c, "403", "client certificate is signed by an unknown authority")
	})
	t.Run("identity mismatch", func(t *testing.T) {
		c := ok
		c.PeerID = "kiosk-9"
		refused(t, c, "certificate is for peer kiosk-1, connect says kiosk-9")
	})
	t.Run("denied", func(t *testing.T) {
		c := base
		c.PeerID, c.CertFile, c.KeyFile = "lost-1", lost.CertFile, lost.KeyFile
		refused(t, c, "403", "revoked")
	})
	t.Run("key readable by others", func(t *testing.T) {
		leaky := devCA.Client(t, "leaky", "kiosk-5")
		if err := os.Chmod(leaky.KeyFile, 0o644); err != nil {
			t.Fatal(err)
		}
		c := base
		c.CertFile, c.KeyFile, c.StateDir = leaky.CertFile, leaky.KeyFile, t.TempDir()
		_, err := link.NewClient(c)
		if err == nil || !strings.Contains(err.Error(), "accessible by group or others (mode 0644)") {
			t.Fatalf("NewClient with a 0644 key: %v", err)
		}
	})
	d.send("still connected") // none of the refused devices took kiosk-1 over
	if st := d.Status(); st.State != link.StateConnected {
		t.Fatalf("kiosk-1 is %v after the refusals", st.State)
	}
}
