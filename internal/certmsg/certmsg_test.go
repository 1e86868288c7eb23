package certmsg

import (
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"termlink/internal/testpki"
)

// Each verification failure x509 reports is named, with what to check.
func TestDescribe(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	other := testpki.NewCA(t, dir, "other")
	leaf := ca.Server(t, "server").Cert
	expired := ca.Issue(t, "old", testpki.Opts{CN: "old", DNS: []string{"localhost"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)}).Cert
	future := ca.Issue(t, "future", testpki.Opts{CN: "future", DNS: []string{"localhost"},
		NotBefore: time.Now().Add(24 * time.Hour), NotAfter: time.Now().Add(48 * time.Hour)}).Cert
	cnOnly := ca.Issue(t, "cn", testpki.Opts{CN: "legacy.example"}).Cert
	pool := func(c *testpki.CA) *x509.CertPool { p := x509.NewCertPool(); p.AddCert(c.Cert); return p }
	verify := func(c *x509.Certificate, roots *x509.CertPool, host string) error {
		_, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: host})
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"unknown authority", verify(leaf, pool(other), ""), `server certificate is signed by an unknown authority (issuer "CN=lab,O=termlink test") (check --ca-file)`},
		{"expired", verify(expired, pool(ca), ""), "server certificate expired on 2020-01-02T03:04:05Z"},
		{"not yet valid", verify(future, pool(ca), ""), "server certificate is not valid before"},
		{"host name", verify(leaf, pool(ca), "termserver.example"), "server certificate is for localhost, 127.0.0.1, ::1, not termserver.example"},
		{"common name only", verify(cnOnly, pool(ca), "legacy.example"), "server certificate is for legacy.example (common name only: no subjectAltName), not legacy.example"},
	} {
		got, ok := Describe(tc.err, "server certificate", "check --ca-file")
		if !ok || !strings.Contains(got, tc.want) {
			t.Errorf("%s: Describe(%v) = %q, %v; want %q", tc.name, tc.err, got, ok, tc.want)
		}
	}
	if msg, ok := Describe(errors.New("connection refused"), "server certificate", ""); ok {
		t.Errorf("a network error described as a certificate problem: %q", msg)
	}
}
