package link_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"termlink/internal/testpki"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
)

// handshakes reads termlink_tls_handshakes_total{resumed="true"} from the
// server's /metrics (a request of its own: a full handshake).
func handshakes(t *testing.T, ts *testServer, ca *testpki.CA, resumed bool) int {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + ts.addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(fmt.Sprintf(`termlink_tls_handshakes_total\{resumed="%v"\} (\d+)`, resumed)).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// tlsTestServer is the restartable test server with TLS of leaf; with
// clientCA, terminal-dev is a mutual TLS channel.
func tlsTestServer(t *testing.T, leaf *testpki.Leaf, clientCA string) *testServer {
	return newTestServer(t, nil, func(cfg *config.Config) {
		cfg.TLS = config.TLS{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile}
		ch := cfg.Channels["terminal-dev"]
		ch.Config.ClientCA = clientCA
		cfg.Channels["terminal-dev"] = ch
	})
}

// A device reconnecting to a restarted termserver (same workspace, same
// port) resumes its TLS session: link.Client keeps a session cache for
// its life, termserver its ticket keys in the workspace. Without either
// the reconnect is a full handshake.
func TestClientResumesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	ts := tlsTestServer(t, ca.Server(t, "server"), "")
	cfg := link.ClientConfig{URL: "wss://" + ts.addr + "/api/channels/terminal-dev/ws", CAFile: ca.File}
	fastRetry(&cfg)
	d := newDevice(t, cfg)
	reconnectResumed(t, d, ts, ca)
	id := d.send("resumed")
	d.waitReplies([]string{id}, 20*time.Second)
}

// Mutual TLS: a resumed session carries the device's certificate and the
// channel checks it as at a full handshake; a device whose certificate
// files were renewed sends the new certificate at its next dial (its
// sessions are kept by certificate) instead of resuming the old one,
// which the server now denies.
func TestClientResumesWithItsCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	devCA := testpki.NewCA(t, dir, "devices")
	kiosk := devCA.Client(t, "kiosk-1", "kiosk-1", "termlink:peer/kiosk-1")
	ts := tlsTestServer(t, ca.Server(t, "server"), devCA.File)
	cfg := link.ClientConfig{URL: "wss://" + ts.addr + "/api/channels/terminal-dev/ws", CAFile: ca.File, PeerID: "kiosk-1",
		CertFile: kiosk.CertFile, KeyFile: kiosk.KeyFile}
	fastRetry(&cfg)
	d := newDevice(t, cfg)
	reconnectResumed(t, d, ts, ca)

	renewed := devCA.Client(t, "kiosk-1", "kiosk-1", "termlink:peer/kiosk-1") // same files, new certificate
	ch := ts.cfg.Channels["terminal-dev"]
	ch.Config.DenyCerts = []config.Fingerprint{config.FingerprintOf(kiosk.Cert)}
	ts.cfg.Channels["terminal-dev"] = ch
	restarted := time.Now()
	ts.restart()
	d.waitState(link.StateConnected, restarted, 20*time.Second)
	if n := handshakes(t, ts, ca, true); n != 0 {
		t.Fatalf("after the renewal the device resumed %d sessions, want a full handshake with the new certificate", n)
	}
	id := d.send("renewed")
	d.waitReplies([]string{id}, 20*time.Second)

	// The server still checks a resumed session's certificate: deny the
	// renewed one too; the resumed reconnect is refused as revoked.
	ch.Config.DenyCerts = append(ch.Config.DenyCerts, config.FingerprintOf(renewed.Cert))
	ts.cfg.Channels["terminal-dev"] = ch
	ts.restart()
	testwait.Until(t, "the device refused as revoked", func() bool {
		st := d.Status()
		return st.State != link.StateConnected && regexp.MustCompile(`revoked`).MatchString(st.Reason)
	})
	if n := handshakes(t, ts, ca, true); n < 1 {
		t.Fatalf("the refused reconnects resumed %d sessions, want at least one (the channel refused a resumed session)", n)
	}
}

// reconnectResumed waits for d to connect, restarts ts and checks that
// d's reconnect to it resumed its session (the only resumption there).
func reconnectResumed(t *testing.T, d *device, ts *testServer, ca *testpki.CA) {
	t.Helper()
	d.waitState(link.StateConnected, time.Time{}, 20*time.Second)
	restarted := time.Now()
	ts.restart()
	d.waitState(link.StateConnected, restarted, 20*time.Second)
	if n := handshakes(t, ts, ca, true); n != 1 {
		t.Fatalf("the restarted server resumed %d sessions, want the device's one", n)
	}
}
