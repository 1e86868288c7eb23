// Package testpki makes certificates for tests that run real TLS on
// loopback: a CA, server certificates for 127.0.0.1 and localhost, client
// certificates with a termlink peer URI, expired ones and ones for the
// wrong host. Keys are ECDSA P-256 (fast to make); files go to a
// directory the test owns (t.TempDir()), never into the repository.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

var serials atomic.Int64

func init() { serials.Store(time.Now().UnixNano() & 0xffffffffff) }

// CA is a certificate authority for tests.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	File string // the CA certificate, PEM
	dir  string
}

// Leaf is a certificate the CA issued, with its files.
type Leaf struct {
	Cert     *x509.Certificate
	CertFile string // PEM certificate
	KeyFile  string // PEM PKCS#8 private key, mode 0600
}

// Opts describe a leaf certificate. Zero NotBefore/NotAfter: valid from an
// hour ago for a day.
type Opts struct {
	CN        string
	DNS       []string
	IPs       []net.IP
	URIs      []string
	NotBefore time.Time
	NotAfter  time.Time
	Client    bool // ExtKeyUsageClientAuth instead of ServerAuth
}

// NewCA makes a CA named name whose files go in dir.
func NewCA(tb testing.TB, dir, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serials.Add(1)),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"termlink test"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		tb.Fatalf("testpki: CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	file := filepath.Join(dir, name+"-ca.pem")
	writePEM(tb, file, "CERTIFICATE", der, 0o644)
	return &CA{Cert: cert, Key: key, File: file, dir: dir}
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(tb testing.TB, name string) *Leaf {
	return ca.Issue(tb, name, Opts{CN: "localhost", DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}})
}

// Client issues a client certificate with common name cn and the given
// URI SANs (e.g. "termlink:peer/kiosk-1").
func (ca *CA) Client(tb testing.TB, name, cn string, uris ...string) *Leaf {
	return ca.Issue(tb, name, Opts{CN: cn, URIs: uris, Client: true})
}

// Issue makes a certificate as o says; its files are dir/name.pem and
// dir/name-key.pem.
func (ca *CA) Issue(tb testing.TB, name string, o Opts) *Leaf {
	tb.Helper()
	key := newKey(tb)
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	eku := x509.ExtKeyUsageServerAuth
	if o.Client {
		eku = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serials.Add(1)),
		Subject:      pkix.Name{CommonName: o.CN},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{eku},
		DNSNames:     o.DNS,
		IPAddresses:  o.IPs,
	}
	for _, s := range o.URIs {
		u, err := url.Parse(s)
		if err != nil {
			tb.Fatalf("testpki: URI %q: %v", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		tb.Fatalf("testpki: %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	l := &Leaf{Cert: cert, CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	writePEM(tb, l.CertFile, "CERTIFICATE", der, 0o644)
	writePEM(tb, l.KeyFile, "PRIVATE KEY", pk, 0o600)
	return l
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("testpki: key: %v", err)
	}
	return key
}

func writePEM(tb testing.TB, file, typ string, der []byte, mode os.FileMode) {
	tb.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		tb.Fatalf("testpki: %v", err)
	}
	if err := os.Chmod(file, mode); err != nil { // the umask may have taken bits
		tb.Fatalf("testpki: %v", err)
	}
}
