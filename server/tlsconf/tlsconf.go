// Package tlsconf is termserver's TLS: the certificate, swapped
// atomically by Reload (SIGHUP) so that new handshakes get the new one
// while open connections keep theirs, the client CAs of the channels
// that require mutual TLS (package identity), and the listener that
// serves them.
package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/identity"
	"termlink/server/wschannel"
)

// TLS is the server's TLS; a nil *TLS is plain HTTP.
type TLS struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
	conf              *tls.Config
	clients           map[string]*identity.ClientAuth // by channel id; only mutual TLS channels
}

// Load loads what cfg.TLS and the channels' clientCA name; nil when TLS
// is off.
func Load(cfg *config.Config) (*TLS, error) {
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
	t := &TLS{certFile: cfg.TLS.CertFile, keyFile: cfg.TLS.KeyFile, clients: clients}
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

// Client is the mutual TLS of channel id; nil without.
func (t *TLS) Client(id string) *identity.ClientAuth {
	if t == nil {
		return nil
	}
	return t.clients[id]
}

// Listener is what hs serves: ln with every connection counted by guard
// and, with TLS, in TLS (HTTP/1.1 only) over wschannel's stall
// connections (a write deadline bounds a stall, not the whole write).
func (t *TLS) Listener(hs *http.Server, ln net.Listener, guard *wschannel.ConnGuard) net.Listener {
	if t == nil {
		return guard.Listener(ln)
	}
	hs.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){} // no h2
	return tls.NewListener(guard.Listener(wschannel.StallListener(ln)), t.conf)
}

// Reload reads the certificate and key files again and, when they load,
// uses them for every new connection; open connections keep theirs.
// When they do not load, the current certificate stays and the error
// says why.
func (t *TLS) Reload(log *slog.Logger) error {
	if t == nil {
		return errors.New("TLS is not configured: nothing to reload")
	}
	cert, err := config.LoadKeyPair(t.certFile, t.keyFile)
	if err != nil {
		log.Error("TLS certificate not reloaded: keeping the current one", "err", err)
		return fmt.Errorf("TLS certificate not reloaded (the current one stays): %w", err)
	}
	old := t.cert.Swap(&cert)
	leaf := cert.Leaf
	if time.Now().After(leaf.NotAfter) {
		log.Warn("the reloaded TLS certificate has expired; devices will refuse it", "not_after", leaf.NotAfter)
	}
	log.Info("TLS certificate reloaded", "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "previous_serial", old.Leaf.SerialNumber.String())
	return nil
}

// LogStart says at start what TLS serves.
func (t *TLS) LogStart(log *slog.Logger) {
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

// ReloadClients reads the clientCA files of cfg's channels ids (the
// enabled ones) again, with their denyCerts lists. A channel cannot turn
// mutual TLS on or off this way (the listener asks for certificates or
// not from the start): that needs a restart. It returns the mutual TLS
// channels' new client auth, or nothing when any channel's files do not
// load.
func (t *TLS) ReloadClients(cfg *config.Config, ids []string) (map[string]*identity.ClientAuth, error) {
	next := map[string]*identity.ClientAuth{}
	for _, id := range ids {
		cc := cfg.Channels[id].Config
		had := t.Client(id) != nil // the adapter's from the start
		switch {
		case had != (cc.ClientCA != ""):
			return nil, fmt.Errorf("channels.%s.config.clientCA: turning mutual TLS on or off needs a restart; client certificates not reloaded", id)
		case !had:
			continue
		}
		ca, err := identity.NewClientAuth(cc)
		if err != nil {
			return nil, fmt.Errorf("channels.%s.config.clientCA: %w; client certificates not reloaded", id, err)
		}
		next[id] = ca
	}
	return next, nil
}
