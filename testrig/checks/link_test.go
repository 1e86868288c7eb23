package checks

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"termlink/internal/testwait"
	"testing"
	"time"

	"termlink/server"
	"termlink/server/config"
)

// startServer runs the real termserver in-process on a loopback port, with
// the default channel (terminal-dev, built-in echo agent) and tokens.
func startServer(t *testing.T, tokens config.Tokens) (addr string) {
	t.Helper()
	s := newServer(t, tokens)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, 2*time.Second) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func newServer(t *testing.T, tokens config.Tokens) *server.Server {
	t.Helper()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	ch := cfg.Channels[config.DefaultChannelID]
	ch.Config.Tokens = tokens
	cfg.Channels[config.DefaultChannelID] = ch
	s, err := server.New(cfg, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startTLSServer serves the real server's handler over TLS with
// httptest's self-signed certificate, and writes that certificate to a
// PEM file for --ca-file.
func startTLSServer(t *testing.T) (url, caFile string) {
	t.Helper()
	s := newServer(t, config.Tokens{})
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	ts.StartTLS()
	s.Start()
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	if err := os.WriteFile(caFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(ts.URL, "https://", "wss://", 1), caFile
}

// selfSigned returns a fresh self-signed CA certificate in PEM: one that
// did not sign the test server's certificate.
func selfSigned(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestLinkTest(t *testing.T) {
	plain := startServer(t, config.Tokens{})
	withTokens := startServer(t, config.Tokens{Any: []string{"s3cret"}})
	perPeer := startServer(t, config.Tokens{ByPeer: map[string]string{"kiosk-1": "k1-token"}})
	tlsURL, caFile := startTLSServer(t)
	otherCA := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(otherCA, selfSigned(t), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	tests := []struct {
		name    string
		o       LinkOptions
		pass    bool
		summary string
	}{
		{"plain", LinkOptions{Server: plain}, true, "connected in"},
		{"http URL and channel path", LinkOptions{Server: "http://" + plain + "/api/channels/terminal-dev/ws"}, true, "message answered in"},
		{"token accepted", LinkOptions{Server: plain, Token: "unused"}, true, "ping p50"},
		{"good token", LinkOptions{Server: withTokens, Token: "s3cret"}, true, "ping p50"},
		{"token in connect only", LinkOptions{Server: perPeer, Token: "k1-token", PeerID: "kiosk-1"}, true, "ping p50"},
		{"bad token", LinkOptions{Server: withTokens, Token: "wrong"}, false,
			"the server refused the token (HTTP 401): check --token against the channel's tokens in the server config (unauthorized: the bearer token is not valid for channel terminal-dev)"},
		{"no token", LinkOptions{Server: withTokens}, false, "the server wants a token: pass --token (connect refused for peer_id termrig-link-test: no token"},
		{"token of another peer", LinkOptions{Server: perPeer, Token: "k1-token"}, false,
			"the server refused the token: connect refused for peer_id termrig-link-test: this token belongs to another peer_id in the config"},
		{"TLS without CA", LinkOptions{Server: tlsURL}, false, "the server's certificate is not trusted: pass --ca-file"},
		{"TLS with CA", LinkOptions{Server: tlsURL, CAFile: caFile}, true, "message answered in"},
		{"TLS with the wrong CA", LinkOptions{Server: tlsURL, CAFile: otherCA}, false, "the server's certificate is not trusted, not even with --ca-file"},
		{"CA file missing", LinkOptions{Server: tlsURL, CAFile: "/nonexistent/ca.pem"}, false, "reading --ca-file: open /nonexistent/ca.pem: no such file or directory"},
		{"wss to a plain server", LinkOptions{Server: "wss://" + plain}, false, "does not speak TLS: use ws:// instead of wss://"},
		{"ws to a TLS server", LinkOptions{Server: strings.Replace(tlsURL, "wss://", "ws://", 1)}, false, "the server speaks TLS: use wss:// instead of ws://"},
		{"wrong channel", LinkOptions{Server: plain, Channel: "nope"}, false, "no such channel on the server (HTTP 404"},
		{"nothing listens", LinkOptions{Server: refused}, false, "nothing listens at " + refused + ": is termserver running"},
		{"bad URL", LinkOptions{Server: "ftp://x"}, false, "scheme must be ws, wss, http or https"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Pings = 5
			// Each case has its own verdict, never "no answer": a bound
			// the check never reaches on a loaded machine (3 s did, for
			// a TLS handshake under qemu beside stress-ng).
			tt.o.Timeout = answerWithin
			res := LinkTest(context.Background(), tt.o)
			var b strings.Builder
			res.WriteText(&b)
			t.Logf("\n%s", b.String())
			if res.Pass != tt.pass || !strings.Contains(res.Summary, tt.summary) {
				t.Fatalf("pass %v summary %q; want %v and %q", res.Pass, res.Summary, tt.pass, tt.summary)
			}
			if tt.pass {
				for _, m := range []string{"connect_ms", "ping_p50_ms", "ping_p99_ms", "echo_ms"} {
					if v, ok := res.Metric(m); !ok || v <= 0 {
						t.Errorf("metric %s = %v, %v", m, v, ok)
					}
				}
				if n, _ := res.Metric("pings"); n != 5 {
					t.Errorf("pings %v", n)
				}
				if !strings.Contains(strings.Join(res.Details, "\n"), `"You said: termrig link-test `) {
					t.Errorf("no echo reply in details: %q", res.Details)
				}
			}
		})
	}
}

func TestLinkTestInterrupted(t *testing.T) {
	addr := startServer(t, config.Tokens{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := LinkTest(ctx, LinkOptions{Server: addr, Timeout: time.Second})
	if res.Pass || !strings.Contains(res.Summary, "interrupted") {
		t.Fatalf("pass %v summary %q", res.Pass, res.Summary)
	}
}

// A server that requires a client certificate in the TLS handshake (not
// termserver, which asks and answers 401 with its reason): the verdict
// points at --cert and --key, not at a token.
func TestLinkTestHandshakeWantsClientCert(t *testing.T) {
	s := newServer(t, config.Tokens{})
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	ts.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	res := LinkTest(context.Background(), LinkOptions{Server: strings.Replace(ts.URL, "https://", "wss://", 1), CAFile: caFile, Pings: 1, Timeout: answerWithin})
	if res.Pass || !strings.Contains(res.Summary, "the server wants a client certificate (TLS handshake): pass --cert and --key") ||
		strings.Contains(res.Summary, "token") {
		t.Fatalf("pass %v, summary %q", res.Pass, res.Summary)
	}
}

// answerWithin bounds a link test whose case has a verdict of its own:
// testwait's deadline (a loaded machine is slow, never that slow).
const answerWithin = testwait.Deadline
