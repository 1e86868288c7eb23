package config

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TLS is the top-level "tls" block: termserver serves HTTPS and wss://
// with this certificate (the full chain, leaf first) and key, both PEM.
// SIGHUP reads them again.
type TLS struct {
	CertFile string
	KeyFile  string
}

// Enabled reports whether TLS is configured.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// Fingerprint is the SHA-256 digest of a certificate's DER encoding, what
// `openssl x509 -noout -fingerprint -sha256` prints.
type Fingerprint [sha256.Size]byte

// FingerprintOf returns the fingerprint of cert.
func FingerprintOf(cert *x509.Certificate) Fingerprint { return sha256.Sum256(cert.Raw) }

// String is the fingerprint as openssl prints it: upper-case hex bytes
// separated by colons.
func (f Fingerprint) String() string {
	var b strings.Builder
	for i, c := range f {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02X", c)
	}
	return b.String()
}

// ParseFingerprint reads a certificate's SHA-256 fingerprint: 64 hex
// digits, either case, optionally with a colon between each byte, and
// optionally prefixed "sha256:" or with openssl's whole line
// ("sha256 Fingerprint=AB:CD:...").
func ParseFingerprint(s string) (Fingerprint, error) {
	var f Fingerprint
	h := s
	if label, rest, ok := strings.Cut(h, "="); ok && strings.EqualFold(strings.TrimSpace(label), "sha256 fingerprint") {
		h = rest
	}
	h = strings.TrimPrefix(strings.TrimPrefix(h, "sha256:"), "SHA256:")
	if strings.Contains(h, ":") {
		parts := strings.Split(h, ":")
		if len(parts) != sha256.Size {
			return f, fmt.Errorf("a colon-separated fingerprint must have %d bytes, got %d", sha256.Size, len(parts))
		}
		for _, p := range parts {
			if len(p) != 2 {
				return f, fmt.Errorf("each byte of a colon-separated fingerprint is 2 hex digits, got %q", truncate(p))
			}
		}
		h = strings.Join(parts, "")
	}
	if len(h) != 2*sha256.Size {
		return f, fmt.Errorf("must be the certificate's SHA-256 fingerprint: 64 hex digits (colons allowed), got %d characters", len(h))
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return f, fmt.Errorf("must be the certificate's SHA-256 fingerprint in hex: %v", err)
	}
	copy(f[:], b)
	return f, nil
}

// tls decodes the top-level "tls" block.
func (w *walker) tls(path string, n *node) TLS {
	var t TLS
	f := w.fields(path, n, "tls")
	if f == nil {
		return t
	}
	for _, k := range []struct {
		key string
		dst *string
	}{{"certFile", &t.CertFile}, {"keyFile", &t.KeyFile}} {
		e, ok := f[k.key]
		if !ok {
			w.required(path, k.key, "a PEM file")
			continue
		}
		*k.dst, _ = w.filePath(join(path, e.key), e.val)
	}
	return t
}

// filePath decodes a file name.
func (w *walker) filePath(path string, n *node) (string, bool) {
	s, ok := w.nonEmpty(path, n)
	if ok && strings.ContainsRune(s, 0) {
		w.errorf(path, "must not contain a NUL byte")
		return "", false
	}
	return s, ok
}

// clientCerts decodes a channel's "clientCA" and "denyCerts".
func (w *walker) clientCerts(path string, f map[string]entry, cc *ChannelConfig) {
	if e, ok := f["clientCA"]; ok {
		cc.ClientCA, _ = w.filePath(join(path, e.key), e.val)
	}
	e, ok := f["denyCerts"]
	if !ok {
		return
	}
	p := join(path, e.key)
	if _, has := f["clientCA"]; !has {
		w.errorf(p, "only allowed with clientCA (the deny list refuses client certificates)")
	}
	list, _ := w.strList(p, e.val)
	seen := map[Fingerprint]int{}
	for i, s := range list {
		fp, err := ParseFingerprint(s)
		if err != nil {
			w.errorf(index(p, i), "%v", err)
			continue
		}
		if j, dup := seen[fp]; dup {
			w.errorf(index(p, i), "the same fingerprint as %s", index(p, j))
			continue
		}
		seen[fp] = i
		cc.DenyCerts = append(cc.DenyCerts, fp)
	}
}

// checkTLSFiles resolves the TLS files of cfg against dir (the config
// file's directory) and checks that they can be read and parsed, so a
// mistake stops termserver at start with the key's path in the message.
func checkTLSFiles(cfg *Config, dir string) []*Error {
	var errs []*Error
	fail := func(path, format string, args ...any) {
		errs = append(errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if cfg.TLS.Enabled() {
		cfg.TLS.CertFile = resolveFile(cfg.TLS.CertFile, dir)
		cfg.TLS.KeyFile = resolveFile(cfg.TLS.KeyFile, dir)
		certOK := readable(cfg.TLS.CertFile, "tls.certFile", fail)
		keyOK := readable(cfg.TLS.KeyFile, "tls.keyFile", fail)
		if certOK && keyOK {
			if _, err := LoadKeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile); err != nil {
				fail("tls", "%v", err)
			}
		}
	}
	for id, ch := range cfg.Channels {
		if ch.Config.ClientCA == "" {
			continue
		}
		p := join(join(join("channels", id), "config"), "clientCA")
		ch.Config.ClientCA = resolveFile(ch.Config.ClientCA, dir)
		cfg.Channels[id] = ch
		if readable(ch.Config.ClientCA, p, fail) {
			if _, err := LoadCAFile(ch.Config.ClientCA); err != nil {
				fail(p, "%v", err)
			}
		}
	}
	return errs
}

func resolveFile(file, dir string) string {
	if filepath.IsAbs(file) {
		return file
	}
	return filepath.Join(dir, file)
}

func readable(file, path string, fail func(path, format string, args ...any)) bool {
	f, err := os.Open(file)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = pe.Err.Error()
		}
		fail(path, "cannot read %s: %s", file, msg)
		return false
	}
	f.Close()
	return true
}

// LoadKeyPair reads a PEM certificate chain and its private key, saying
// which file is wrong when one is.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("loading the certificate %s with the key %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("parsing the certificate %s: %w", certFile, err)
		}
	}
	return cert, nil
}

// LoadCAFile reads a PEM file of CA certificates into a pool.
func LoadCAFile(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
