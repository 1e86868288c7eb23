package link

import (
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
	var conf *tls.Config
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
			return nil, fmt.Errorf("link: reading CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("link: CA file %s holds no PEM certificate", cfg.CAFile)
		}
		base()
		conf.RootCAs = pool
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		if cfg.CertFile == "" || cfg.KeyFile == "" {
			return nil, errors.New("link: a client certificate needs both CertFile and KeyFile")
		}
		cc := &clientCert{certFile: cfg.CertFile, keyFile: cfg.KeyFile}
		if _, err := cc.load(); err != nil {
			return nil, err
		}
		base()
		conf.GetClientCertificate = cc.get
	}
	return conf, nil
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
