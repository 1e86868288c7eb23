package server

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testpki"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/statusapi"
	"termlink/server/wschannel"
)

// pkiServer is a real Server serving TLS on a loopback port, with the
// test CA that signed its certificate.
type pkiServer struct {
	*Server
	addr string
	ca   *testpki.CA
	dir  string
}

// startTLSServer serves cfg (the default one changed by mutate, which may
// issue more certificates from the CA) over TLS with a certificate from a
// fresh test CA.
func startTLSServer(t *testing.T, mutate func(cfg *config.Config, ca *testpki.CA)) *pkiServer {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "server")
	leaf := ca.Server(t, "server")
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	cfg.TLS = config.TLS{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile}
	if mutate != nil {
		mutate(cfg, ca)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := serveOn(t, cfg, Options{}, ln)
	return &pkiServer{Server: s, addr: ln.Addr().String(), ca: ca, dir: dir}
}

func (p *pkiServer) roots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	return pool
}

// dialTLS opens a WebSocket to channel over wss:// with the server's CA
// and, when client is not nil, that client certificate.
func (p *pkiServer) dialTLS(t *testing.T, channel string, leaf *testpki.Leaf) (*client, *http.Response, error) {
	t.Helper()
	conf := &tls.Config{RootCAs: p.roots()}
	if leaf != nil {
		cert, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	d := &websocket.Dialer{TLSClientConfig: conf, HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial("wss://"+p.addr+"/api/channels/"+channel+"/ws", nil)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { ws.Close() })
	return &client{t: t, ws: ws}, resp, nil
}

func (p *pkiServer) get(t *testing.T, path string, v any) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.roots()}}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + p.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: HTTP %d %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

func (p *pkiServer) events(t *testing.T, channel string) []events.Event {
	var out struct{ Events []events.Event }
	p.get(t, "/api/channels/"+channel+"/events?limit=1000", &out)
	return out.Events
}

// A device connects over wss:// with the test CA, on HTTP/1.1 and TLS
// 1.2 or later, and gets its reply; /api/channels says wss://; a client
// that offers only h2 or only TLS 1.1 gets no connection.
func TestTLSServesWebSocket(t *testing.T) {
	t.Parallel()
	p := startTLSServer(t, nil)
	c, _, err := p.dialTLS(t, "terminal-dev", nil)
	if err != nil {
		t.Fatalf("wss dial: %v", err)
	}
	c.connect("kiosk-1")
	c.send(&link.Message{MessageID: "m1", Text: "over tls"})
	readAs[*link.Ack](c)
	if m := readAs[*link.Message](c); m.Text != "You said: over tls" {
		t.Fatalf("reply %q", m.Text)
	}
	if v := c.ws.UnderlyingConn().(*tls.Conn).ConnectionState().Version; v < tls.VersionTLS12 {
		t.Errorf("TLS version %x, want >= 1.2", v)
	}
	tc, err := tls.Dial("tcp", p.addr, &tls.Config{RootCAs: p.roots(), NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if proto := tc.ConnectionState().NegotiatedProtocol; proto != "http/1.1" {
		t.Errorf("a client offering h2 and http/1.1 got ALPN %q, want http/1.1 (WebSocket upgrades are HTTP/1.1)", proto)
	}
	tc.Close()

	var chs struct {
		Channels []statusapi.ChannelStatus `json:"channels"`
	}
	p.get(t, "/api/channels", &chs)
	if len(chs.Channels) != 1 || !strings.HasPrefix(chs.Channels[0].WebsocketURL, "wss://") || chs.Channels[0].ClientCertRequired {
		t.Errorf("channels %+v: want a wss:// websocket_url", chs.Channels)
	}

	for name, conf := range map[string]*tls.Config{
		"TLS 1.1":  {RootCAs: p.roots(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11},
		"h2 only":  {RootCAs: p.roots(), NextProtos: []string{"h2"}},
		"plain ws": nil,
	} {
		var err error
		if conf == nil {
			_, _, err = websocket.DefaultDialer.Dial("ws://"+p.addr+"/api/channels/terminal-dev/ws", nil)
		} else {
			var tc *tls.Conn
			tc, err = tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", p.addr, conf)
			if err == nil {
				tc.Close()
			}
		}
		if err == nil {
			t.Errorf("%s: connected, want refused", name)
		}
	}
}

// mtlsServer serves channel "secure" with mutual TLS (clientCA: a device
// CA; one device's certificate denied) beside the open terminal-dev.
type mtlsServer struct {
	*pkiServer
	devCA              *testpki.CA
	uri, cn, denied    *testpki.Leaf
	other, expired     *testpki.Leaf
	serverAuthOnly     *testpki.Leaf
	twoPeers, badPeers *testpki.Leaf
}

func startMTLS(t *testing.T) *mtlsServer {
	m := &mtlsServer{}
	m.pkiServer = startTLSServer(t, func(cfg *config.Config, ca *testpki.CA) {
		dir := t.TempDir()
		m.devCA = testpki.NewCA(t, dir, "devices")
		m.uri = m.devCA.Client(t, "uri", "ignored-cn", "termlink:peer/kiosk-1")
		m.cn = m.devCA.Client(t, "cn", "desk-7")
		m.denied = m.devCA.Client(t, "denied", "lost-1", "termlink:peer/lost-1")
		m.expired = m.devCA.Issue(t, "expired", testpki.Opts{CN: "old-1", Client: true,
			NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
		m.serverAuthOnly = m.devCA.Issue(t, "serverauth", testpki.Opts{CN: "kiosk-2"})
		m.twoPeers = m.devCA.Client(t, "two", "x", "termlink:peer/a", "termlink:peer/b")
		m.badPeers = m.devCA.Client(t, "bad", "x", "termlink://peer/a")
		m.other = testpki.NewCA(t, dir, "stranger").Client(t, "other", "kiosk-1", "termlink:peer/kiosk-1")
		ch := cfg.Channels["terminal-dev"]
		ch.Config.ClientCA = m.devCA.File
		ch.Config.DenyCerts = []config.Fingerprint{config.FingerprintOf(m.denied.Cert)}
		cfg.Channels["secure"] = ch
		ch.Config.ClientCA, ch.Config.DenyCerts = "", nil
		cfg.Channels["terminal-dev"] = ch
	})
	return m
}

// Mutual TLS: a certificate from the channel's CA connects as the peer it
// names (URI SAN, else CN); no certificate, another CA's, an expired one,
// one not for client auth, one naming two peers or a malformed peer URI,
// and a denied one are refused before the upgrade with the reason; a
// connect for another peer_id is refused with the certificate's peer in
// the message and close 4003. The open channel on the same listener
// takes devices without a certificate. Each refusal is in the events.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	m := startMTLS(t)

	c, _, err := m.dialTLS(t, "secure", m.uri)
	if err != nil {
		t.Fatalf("dial with the right certificate: %v", err)
	}
	c.connect("kiosk-1")
	c.send(&link.Message{MessageID: "m1", Text: "hello"})
	readAs[*link.Ack](c)
	readAs[*link.Message](c)

	c2, _, err := m.dialTLS(t, "secure", m.cn)
	if err != nil {
		t.Fatalf("dial with a CN-only certificate: %v", err)
	}
	c2.connect("desk-7")

	open, _, err := m.dialTLS(t, "terminal-dev", nil)
	if err != nil {
		t.Fatalf("the open channel refused a device without a certificate: %v", err)
	}
	open.connect("anyone")

	for _, tc := range []struct {
		name   string
		leaf   *testpki.Leaf
		status int
		want   string
	}{
		{"no certificate", nil, 401, "no client certificate"},
		{"other CA", m.other, 403, "client certificate is signed by an unknown authority"},
		{"expired", m.expired, 403, "client certificate expired on"},
		{"not for client auth", m.serverAuthOnly, 403, "not meant for this use"},
		{"denied", m.denied, 403, "client certificate is revoked (on the channel's denyCerts list)"},
		{"two peers", m.twoPeers, 403, "names two peers"},
		{"bad peer URI", m.badPeers, 403, "want termlink:peer/<peer_id>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := m.dialTLS(t, "secure", tc.leaf)
			if err == nil {
				t.Fatal("connected, want refused")
			}
			if resp == nil {
				t.Fatalf("no HTTP answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.want) {
				t.Fatalf("HTTP %d %q, want %d with %q", resp.StatusCode, body, tc.status, tc.want)
			}
		})
	}

	bad, _, err := m.dialTLS(t, "secure", m.uri)
	if err != nil {
		t.Fatal(err)
	}
	bad.send(&link.Connect{PeerID: "kiosk-9", Capabilities: []string{link.CapText}})
	bad.expectError("certificate is for peer kiosk-1, connect says kiosk-9", link.CodeUnauthorized)
	_ = bad.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = bad.ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != wschannel.CloseUnauthorized {
		t.Fatalf("after the mismatch: %v, want close %d", err, wschannel.CloseUnauthorized)
	}
	c.alive() // the real kiosk-1 was not taken over

	var chs struct {
		Channels []statusapi.ChannelStatus `json:"channels"`
	}
	m.get(t, "/api/channels", &chs)
	for _, ch := range chs.Channels {
		if ch.ClientCertRequired != (ch.ChannelID == "secure") {
			t.Errorf("channel %s: client_cert_required %v", ch.ChannelID, ch.ClientCertRequired)
		}
	}

	var refusals []string
	for _, e := range m.events(t, "secure") {
		if e.Event == events.TerminalRefused {
			refusals = append(refusals, e.Detail)
		}
	}
	all := strings.Join(refusals, "\n")
	for _, want := range []string{"no client certificate", "unknown authority", "expired on", "denyCerts", "certificate is for peer kiosk-1, connect says kiosk-9"} {
		if !strings.Contains(all, want) {
			t.Errorf("no refusal event with %q; refusals:\n%s", want, all)
		}
	}
}

// ReloadTLS swaps the certificate for new connections while an open one
// stays up and answers; a pair that does not load leaves the current one.
func TestReloadTLS(t *testing.T) {
	t.Parallel()
	p := startTLSServer(t, nil)
	old, _, err := p.dialTLS(t, "terminal-dev", nil)
	if err != nil {
		t.Fatal(err)
	}
	old.connect("kiosk-1")
	serial := func() string {
		t.Helper()
		c, _, err := p.dialTLS(t, "terminal-dev", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.ws.Close()
		return c.ws.UnderlyingConn().(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()

	next := p.ca.Server(t, "server") // same files, new certificate
	if err := p.ReloadTLS(); err != nil {
		t.Fatalf("ReloadTLS: %v", err)
	}
	if got := serial(); got != next.Cert.SerialNumber.String() || got == first {
		t.Fatalf("after reload the server shows serial %s, want the new %s (was %s)", got, next.Cert.SerialNumber, first)
	}
	old.alive()
	old.send(&link.Message{MessageID: "m1", Text: "still here"})
	readAs[*link.Ack](old)
	readAs[*link.Message](old)

	if err := os.WriteFile(p.Server.cfg.TLS.KeyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = p.ReloadTLS()
	if err == nil || !strings.Contains(err.Error(), "the current one stays") {
		t.Fatalf("ReloadTLS with a broken key: %v, want an error saying the current certificate stays", err)
	}
	if got := serial(); got != next.Cert.SerialNumber.String() {
		t.Fatalf("after a failed reload the server shows serial %s, want %s", got, next.Cert.SerialNumber)
	}
}

// A clientCA channel needs TLS; a missing or empty CA file is refused.
func TestMutualTLSNeedsTLS(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	ch := cfg.Channels["terminal-dev"]
	ch.Config.ClientCA = testpki.NewCA(t, t.TempDir(), "dev").File
	cfg.Channels["terminal-dev"] = ch
	_, err := New(cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "mutual TLS needs TLS") {
		t.Fatalf("New: %v, want mutual TLS needs TLS", err)
	}
}

// ReloadClientCerts takes a new deny list: the open connection of the
// certificate now denied is closed with 4003 and its next dial refused as
// revoked, while other devices stay; turning mutual TLS off is refused
// (it needs a restart) and changes nothing.
func TestReloadClientCerts(t *testing.T) {
	t.Parallel()
	m := startMTLS(t)
	k1, _, err := m.dialTLS(t, "secure", m.uri)
	if err != nil {
		t.Fatal(err)
	}
	k1.connect("kiosk-1")
	d7, _, err := m.dialTLS(t, "secure", m.cn)
	if err != nil {
		t.Fatal(err)
	}
	d7.connect("desk-7")

	with := func(change func(*config.ChannelConfig)) *config.Config {
		cfg := *m.Server.cfg
		cfg.Channels = map[string]config.Channel{}
		for id, ch := range m.Server.cfg.Channels {
			if id == "secure" {
				change(&ch.Config)
			}
			cfg.Channels[id] = ch
		}
		return &cfg
	}
	off := with(func(cc *config.ChannelConfig) { cc.ClientCA, cc.DenyCerts = "", nil })
	if err := m.ReloadClientCerts(off); err == nil || !strings.Contains(err.Error(), "needs a restart") {
		t.Fatalf("turning mutual TLS off: %v, want needs a restart", err)
	}
	k1.alive()

	revoke := with(func(cc *config.ChannelConfig) {
		cc.DenyCerts = append(append([]config.Fingerprint(nil), cc.DenyCerts...), config.FingerprintOf(m.uri.Cert))
	})
	if err := m.ReloadClientCerts(revoke); err != nil {
		t.Fatalf("ReloadClientCerts: %v", err)
	}
	_ = k1.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = k1.ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != wschannel.CloseUnauthorized || !strings.Contains(ce.Text, "revoked") {
		t.Fatalf("kiosk-1 after its certificate was denied: %v, want close %d revoked", err, wschannel.CloseUnauthorized)
	}
	d7.alive()
	_, resp, err := m.dialTLS(t, "secure", m.uri)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("kiosk-1 dialled again: %v %v, want 403", err, resp)
	}
}
