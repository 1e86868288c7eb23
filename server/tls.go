package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/identity"
	"termlink/server/throttle"
	"termlink/server/wschannel"
)

// serverTLS is termserver's TLS: the certificate, swapped atomically by
// ReloadTLS (SIGHUP) so that new handshakes get the new one while open
// connections keep theirs, and the client CAs of the channels that
// require mutual TLS (package identity).
type serverTLS struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
	conf              *tls.Config
	clients           map[string]*identity.ClientAuth // by channel id; only mutual TLS channels
}

// newServerTLS loads what cfg.TLS and the channels' clientCA name; nil
// when TLS is off.
func newServerTLS(cfg *config.Config) (*serverTLS, error) {
	clients := map[string]*identity.ClientAuth{}
	for id, ch := range cfg.Channels {
		if ch.Config.ClientCA == "" || !ch.Enabled {
			continue
		}
		if !cfg.TLS.Enabled() {
			return nil, fmt.Errorf("channels.%s.config.clientCA: mutual TLS needs TLS: set the tls block (or --tls-cert and --tls-key)", id)
		}
		ca, err := identity.NewClientAuth(ch.Config)
		if err != nil {
			return nil, fmt.Errorf("channels.%s.config.clientCA: %w", id, err)
		}
		clients[id] = ca
	}
	if !cfg.TLS.Enabled() {
		return nil, nil
	}
	if cfg.TLS.KeyFile == "" {
		return nil, errors.New("tls: a certificate file is given but no key file (tls.keyFile or --tls-key)")
	}
	t := &serverTLS{certFile: cfg.TLS.CertFile, keyFile: cfg.TLS.KeyFile, clients: clients}
	cert, err := config.LoadKeyPair(t.certFile, t.keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	t.cert.Store(&cert)
	t.conf = &tls.Config{
		MinVersion: tls.VersionTLS12,
		// HTTP/1.1 only: a WebSocket upgrade is an HTTP/1.1 request.
		NextProtos:     []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return t.cert.Load(), nil },
	}
	if len(clients) > 0 {
		// One listener serves every channel: the handshake asks for a
		// certificate without requiring or verifying one; the channel's
		// handler verifies it against its own clientCA and answers
		// 401/403 with the reason (wschannel). The request names no CA
		// (ClientCAs unset): a client then sends its certificate even
		// when another CA signed it, and is told so, instead of sending
		// none and being told it has none.
		t.conf.ClientAuth = tls.RequestClientCert
	}
	return t, nil
}

// client is the mutual TLS of channel id; nil without.
func (t *serverTLS) client(id string) *identity.ClientAuth {
	if t == nil {
		return nil
	}
	return t.clients[id]
}

// listener is what hs serves: ln with every connection counted by guard
// and, with TLS, in TLS (HTTP/1.1 only) over wschannel's stall
// connections (a write deadline bounds a stall, not the whole write).
func (t *serverTLS) listener(hs *http.Server, ln net.Listener, guard *wschannel.ConnGuard) net.Listener {
	if t == nil {
		return guard.Listener(ln)
	}
	hs.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){} // no h2
	return tls.NewListener(guard.Listener(wschannel.StallListener(ln)), t.conf)
}

// TLSEnabled reports whether the server serves TLS.
func (s *Server) TLSEnabled() bool { return s.tls != nil }

// ReloadTLS reads the certificate and key files again and, when they load,
// uses them for every new connection; open connections keep theirs.
// When they do not load, the current certificate stays and the error
// says why.
func (s *Server) ReloadTLS() error {
	t := s.tls
	if t == nil {
		return errors.New("TLS is not configured: nothing to reload")
	}
	cert, err := config.LoadKeyPair(t.certFile, t.keyFile)
	if err != nil {
		s.log.Error("TLS certificate not reloaded: keeping the current one", "err", err)
		return fmt.Errorf("TLS certificate not reloaded (the current one stays): %w", err)
	}
	old := t.cert.Swap(&cert)
	leaf := cert.Leaf
	if time.Now().After(leaf.NotAfter) {
		s.log.Warn("the reloaded TLS certificate has expired; devices will refuse it", "not_after", leaf.NotAfter)
	}
	s.log.Info("TLS certificate reloaded", "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "previous_serial", old.Leaf.SerialNumber.String())
	return nil
}

// logStart says at start what TLS serves.
func (t *serverTLS) logStart(log *slog.Logger) {
	if t == nil {
		return
	}
	leaf := t.cert.Load().Leaf
	log.Info("TLS on", "cert", t.certFile, "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "mutual_tls_channels", len(t.clients))
	// A warning, not a refusal: Debian's ssl-cert group reads keys (0640).
	if err := link.CheckPrivateFile(t.keyFile); err != nil {
		log.Warn("the TLS key file is not private", "err", err)
	}
}

// httpErrorLog is http.Server's ErrorLog. net/http logs a line for each
// failed TLS handshake (a scanner, a half-open connection, a client that
// does not trust the certificate) and for each failed accept; anyone who
// can open connections could fill the log with them. httpErrorLog admits
// them through the one rule for what strangers can make the server
// write (package throttle): the first of a kind at WARN, then at most
// one line and one summary with the count per every (a minute in
// Serve), whatever the number of addresses. Every other line goes to
// the logger as it comes.
type httpErrorLog struct {
	log  *slog.Logger
	gate *throttle.Gate
}

// rateLimitedPrefixes are the net/http lines httpErrorLog counts, and
// what it calls them.
var rateLimitedPrefixes = []struct{ prefix, msg string }{
	{"http: TLS handshake error from ", "TLS handshake failed"},
	{"http: Accept error: ", "accepting a connection failed"},
}

func newHTTPErrorLog(log *slog.Logger, every time.Duration) *httpErrorLog {
	return &httpErrorLog{log: log, gate: throttle.New(log, throttle.Options{Burst: 1, KindBurst: 1, Every: every})}
}

// Write takes one line from net/http's log.Logger.
func (e *httpErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	for _, k := range rateLimitedPrefixes {
		if detail, ok := strings.CutPrefix(line, k.prefix); ok {
			e.gate.Warn(k.msg, "", k.msg, "detail", detail, "note", fmt.Sprintf("more of these are counted and logged at most once every %v", e.gateEvery()))
			return len(p), nil
		}
	}
	e.log.Warn(throttle.Cut(line, 4096))
	return len(p), nil
}

func (e *httpErrorLog) gateEvery() time.Duration { return e.gate.Every() }

// Close logs what is counted and not yet logged.
func (e *httpErrorLog) Close() { e.gate.Close() }
