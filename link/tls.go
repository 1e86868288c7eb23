package link

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"sync"

	"termlink/internal/certmsg"
)

// tlsConfig is the TLS of wss://: TLSConfig as the base, the CAs of
// CAFile as the roots, and the client certificate of CertFile and KeyFile
// (mutual TLS). nil when none of these is set (the system roots).
func (cfg ClientConfig) tlsConfig() (*tls.Config, error) {
	conf, _, err := cfg.tlsConfigCert()
	return conf, err
}

// dialTLSConfig is the client's TLS for its WebSocket dials: tlsConfig
// with a session cache of its own, held for the client's life (the
// dialer's config is built once per Client), so every reconnect offers
// the last session's ticket and a server that knows its key (termserver
// keeps them across restarts) resumes it: no certificate chain to
// verify here, no signature to make there. A TLSConfig that brings its
// own ClientSessionCache keeps it; one with its own GetClientCertificate
// gets none (the client cannot tell when that certificate changes, and a
// resumed session carries the certificate of the handshake that made
// it).
func (cfg ClientConfig) dialTLSConfig() (*tls.Config, error) {
	conf, cc, err := cfg.tlsConfigCert()
	if err != nil {
		return nil, err
	}
	if conf == nil {
		conf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if conf.ClientSessionCache != nil || (cc == nil && conf.GetClientCertificate != nil) {
		return conf, nil
	}
	conf.ClientSessionCache = &sessionCache{lru: tls.NewLRUClientSessionCache(1 + len(cfg.Fallbacks)), cert: cc}
	return conf, nil
}

// sessionCache is the client's TLS session cache. With a client
// certificate (CertFile), a session is kept under the certificate it was
// made with, read again at each dial: a renewed certificate misses the
// old sessions, so the next dial is a full handshake that sends it (a
// resumed session would present the old one to the server until it
// expired).
//
// crypto/tls drops a session whose resumption failed, for any reason: a
// timeout or a reset too. In a reconnect storm that turns every
// handshake the busy server did not finish in time into a full one,
// which costs it more and makes more time out. A dropped session is
// kept aside and offered again, at most keptRetries times in a row (a
// session the server refuses for itself, a corrupted one, then goes); a
// new session replaces it.
type sessionCache struct {
	lru  tls.ClientSessionCache
	cert *clientCert // nil: no client certificate

	mu    sync.Mutex
	aside map[string]*keptSession // by cache key
}

type keptSession struct {
	cs    *tls.ClientSessionState
	tries int
}

const keptRetries = 3

func (s *sessionCache) Get(key string) (*tls.ClientSessionState, bool) {
	if s.cert != nil {
		_, _ = s.cert.load() // at each dial; when the files do not load, the last good one
	}
	key = s.key(key)
	if cs, _ := s.lru.Get(key); cs != nil { // Put(key, nil) of a key it lacks stores a nil
		return cs, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.aside[key]
	if k == nil {
		return nil, false
	}
	if k.tries++; k.tries >= keptRetries {
		delete(s.aside, key)
	}
	return k.cs, true
}

func (s *sessionCache) Put(key string, cs *tls.ClientSessionState) {
	key = s.key(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cs != nil {
		delete(s.aside, key)
	} else if old, ok := s.lru.Get(key); ok && old != nil {
		if s.aside == nil {
			s.aside = map[string]*keptSession{}
		}
		s.aside[key] = &keptSession{cs: old}
	}
	s.lru.Put(key, cs)
}

func (s *sessionCache) key(key string) string {
	if s.cert == nil {
		return key
	}
	s.cert.mu.Lock()
	defer s.cert.mu.Unlock()
	if s.cert.last == nil || len(s.cert.last.Certificate) == 0 {
		return key
	}
	return fmt.Sprintf("%s\x00%x", key, sha256.Sum256(s.cert.last.Certificate[0]))
}

func (cfg ClientConfig) tlsConfigCert() (*tls.Config, *clientCert, error) {
	var conf *tls.Config
	var cc *clientCert
	if cfg.TLSConfig != nil {
		conf = cfg.TLSConfig.Clone()
	}
	base := func() {
		if conf == nil {
			conf = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("link: reading CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("link: CA file %s holds no PEM certificate", cfg.CAFile)
		}
		base()
		conf.RootCAs = pool
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		if cfg.CertFile == "" || cfg.KeyFile == "" {
			return nil, nil, errors.New("link: a client certificate needs both CertFile and KeyFile")
		}
		cc = &clientCert{certFile: cfg.CertFile, keyFile: cfg.KeyFile}
		if _, err := cc.load(); err != nil {
			return nil, nil, err
		}
		base()
		conf.GetClientCertificate = cc.get
	}
	return conf, cc, nil
}

// clientCert reads the client certificate at each handshake, so a renewed
// certificate is used from the next dial on; when the files no longer
// load, the last good one is sent.
type clientCert struct {
	certFile, keyFile string
	mu                sync.Mutex
	last              *tls.Certificate
}

func (c *clientCert) load() (*tls.Certificate, error) {
	if err := CheckPrivateFile(c.keyFile); err != nil {
		return nil, fmt.Errorf("link: client key: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("link: loading the client certificate %s with the key %s: %w", c.certFile, c.keyFile, err)
	}
	c.mu.Lock()
	c.last = &cert
	c.mu.Unlock()
	return &cert, nil
}

func (c *clientCert) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if cert, err := c.load(); err == nil {
		return cert, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, nil
}

// CheckPrivateFile refuses a secret file (a private key, a token) that
// group or others may read or write: whoever can read it can be this
// device.
func CheckPrivateFile(file string) error {
	fi, err := os.Stat(file)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s: %w", file, pe.Err)
		}
		return err
	}
	if runtime.GOOS == "windows" { // no Unix mode bits
		return nil
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s is accessible by group or others (mode %04o); it must be private to this user: chmod 600 %s", file, perm, file)
	}
	return nil
}

// describeTLSError explains a failed TLS handshake with the server.
func describeTLSError(err error) (string, bool) {
	if msg, ok := certmsg.Describe(err, "server certificate", "check --ca-file"); ok {
		return msg, true
	}
	var alert tls.AlertError
	if errors.As(err, &alert) {
		return "the server refused the TLS handshake: " + err.Error(), true
	}
	return "", false
}
