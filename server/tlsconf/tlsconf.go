// Package tlsconf is termserver's TLS: the certificate, swapped
// atomically by Reload (SIGHUP) so that new handshakes get the new one
// while open connections keep theirs, the client CAs of the channels
// that require mutual TLS (package identity), the listener that serves
// them, and the session ticket keys that let devices resume their TLS
// sessions across a restart.
//
// # Session resumption across restarts
//
// A device that reconnects offers the ticket of its last session; with
// the key that made it the server resumes the session: no certificate
// sent or checked, no signature made (a restart of 10,000 devices is
// otherwise 10,000 full handshakes at once). The keys are kept in the
// workspace (TicketKeysFile, "<unix seconds> <hex>" a line, newest
// first, mode 0600 in a 0700 directory, replaced whole): the newest
// encrypts new tickets for 24 h, every key decrypts for 7 days from its
// making (Go's own rotation and its longest ticket lifetime). The check
// runs at start, at Reload (SIGHUP) and at a handshake once the newest
// key is due (in the background). A file that does not load is logged
// with the reason and replaced by fresh keys (those tickets miss: a
// full handshake); a workspace that cannot be written is logged and the
// keys stay in memory. The server never fails to start for them.
//
// Security: the file protects resumption secrets; whoever reads it can
// decrypt tickets. With TLS 1.3, Go resumes only in psk_dhe_ke mode (a
// fresh ECDHE on every resumption), so a stolen key lets an attacker
// neither read recorded traffic passively nor a session's traffic after
// its handshake; it lets them impersonate the server to a device that
// offers one of its tickets, until the ticket expires — as the
// certificate's key would, which sits beside it. TLS 1.2 tickets are
// another matter: they carry the session's master secret, so a stolen
// key would decrypt recorded TLS 1.2 sessions. termserver still takes
// TLS 1.2 (MinVersion: devices with older stacks), but a client that
// does not offer TLS 1.3 gets tickets of in-memory keys only, random at
// each start (as before this file existed): TLS 1.2 devices resume
// within one server's life, never across a restart, and nothing on disk
// can open their sessions. Mutual TLS is not weakened: a resumed session
// carries its client certificate chain, and the channel verifies it at
// every upgrade against its clientCA and denyCerts as for a full
// handshake (package wschannel).
package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/identity"
	"termlink/server/metrics"
	"termlink/server/wschannel"
)

// TLS is the server's TLS; a nil *TLS is plain HTTP.
type TLS struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
	conf              *tls.Config                     // TLS 1.3 clients: tickets of the workspace's keys
	conf12            *tls.Config                     // clients without TLS 1.3: in-memory ticket keys
	clients           map[string]*identity.ClientAuth // by channel id; only mutual TLS channels
	tickets           *tickets
	handshakes        atomic.Pointer[metrics.CounterVec] // by resumed; nil until Metrics
}

// Load loads what cfg.TLS and the channels' clientCA name; nil when TLS
// is off. The session ticket keys come from the workspace (TicketKeysFile;
// made when missing or unreadable, kept in memory when it cannot be
// written: log says so, Load does not fail for it).
func Load(cfg *config.Config, log *slog.Logger) (*TLS, error) {
	return load(cfg, log, time.Now)
}

func load(cfg *config.Config, log *slog.Logger, now func() time.Time) (*TLS, error) {
	if log == nil {
		log = slog.Default()
	}
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
		NextProtos:       []string{"http/1.1"},
		GetCertificate:   func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return t.cert.Load(), nil },
		VerifyConnection: t.countHandshake,
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
	// TLS 1.2 tickets carry the session's master secret under the
	// ticket key: a client without TLS 1.3 gets in-memory keys (random
	// at each start, as before), never the workspace's (package doc).
	t.conf12 = t.conf.Clone()
	t.conf.GetConfigForClient = t.configFor
	ws := cfg.Workspace
	if ws != "" {
		ws = filepath.Join(ws, filepath.FromSlash(TicketKeysFile))
	}
	t.tickets = &tickets{path: ws, log: log, now: now, set: t.conf.SetSessionTicketKeys, set12: t.conf12.SetSessionTicketKeys}
	t.tickets.load()
	return t, nil
}

// configFor picks the config of a client hello: the main one (workspace
// ticket keys) for TLS 1.3, the one with in-memory ticket keys for a
// client that offers only TLS 1.2. It also rotates the ticket keys when
// they are due (an atomic load until then).
func (t *TLS) configFor(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	t.tickets.maybeRotate()
	if slices.Contains(hello.SupportedVersions, tls.VersionTLS13) {
		return nil, nil
	}
	return t.conf12, nil
}

// Metrics registers termlink_tls_handshakes_total{resumed}.
func (t *TLS) Metrics(reg *metrics.Registry) {
	if t == nil {
		return
	}
	t.handshakes.Store(reg.NewCounterVec("termlink_tls_handshakes_total",
		"TLS handshakes completed, by whether they resumed a session (a ticket: no certificate sent or checked, no signature made).", "resumed"))
}

func (t *TLS) countHandshake(cs tls.ConnectionState) error {
	if c := t.handshakes.Load(); c != nil {
		if cs.DidResume {
			c.Inc("true")
		} else {
			c.Inc("false")
		}
	}
	return nil
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
// says why. The session ticket keys rotate when due.
func (t *TLS) Reload(log *slog.Logger) error {
	if t == nil {
		return errors.New("TLS is not configured: nothing to reload")
	}
	t.tickets.rotate()
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
