package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/internal/testpki"
)

const tlsCh = `"channels": {"c": {"accountId": "a"%s}}`

func writeCfg(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "termserver.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Relative TLS files are taken from the config file's directory and
// checked at load; snake_case keys work; a deny list is parsed.
func TestLoadTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	leaf := ca.Server(t, "server")
	dev := ca.Client(t, "dev", "kiosk-1")
	fp := FingerprintOf(dev.Cert)
	body := `{"tls": {"cert_file": "server.pem", "keyFile": "server-key.pem"}, ` +
		strings.Replace(tlsCh, "%s", `, "config": {"client_ca": "lab-ca.pem", "denyCerts": ["`+fp.String()+`"]}`, 1) + `}`
	cfg, err := Load(writeCfg(t, dir, body))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS.CertFile != leaf.CertFile || cfg.TLS.KeyFile != leaf.KeyFile || !cfg.TLS.Enabled() {
		t.Errorf("tls = %+v, want the files beside the config", cfg.TLS)
	}
	cc := cfg.Channels["c"].Config
	if cc.ClientCA != ca.File || len(cc.DenyCerts) != 1 || cc.DenyCerts[0] != fp {
		t.Errorf("channel config = %+v", cc)
	}
}

// Each TLS mistake is refused at load with its key's path and the reason.
func TestLoadTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	ca.Server(t, "server")
	other := ca.Server(t, "other")
	if err := os.WriteFile(filepath.Join(dir, "empty.pem"), []byte("no pem here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ch := func(extra string) string { return strings.Replace(tlsCh, "%s", extra, 1) }
	for _, tc := range []struct{ name, body, want string }{
		{"missing key", `{"tls": {"certFile": "server.pem"}, ` + ch("") + `}`, "tls.keyFile: required (a PEM file)"},
		{"unknown key", `{"tls": {"certFile": "server.pem", "keyFile": "server-key.pem", "ca": "x"}, ` + ch("") + `}`, "tls.ca: unknown key"},
		{"unreadable cert", `{"tls": {"certFile": "nope.pem", "keyFile": "server-key.pem"}, ` + ch("") + `}`, "tls.certFile: cannot read " + filepath.Join(dir, "nope.pem") + ": no such file or directory"},
		{"key of another cert", `{"tls": {"certFile": "server.pem", "keyFile": "` + other.KeyFile + `"}, ` + ch("") + `}`, "config: tls: loading the certificate"},
		{"not a string", `{"tls": {"certFile": 3, "keyFile": "server-key.pem"}, ` + ch("") + `}`, "tls.certFile: must be a string"},
		{"clientCA unreadable", `{` + ch(`, "config": {"clientCA": "gone.pem"}`) + `}`, "channels.c.config.clientCA: cannot read"},
		{"clientCA not PEM", `{` + ch(`, "config": {"clientCA": "empty.pem"}`) + `}`, "channels.c.config.clientCA: " + filepath.Join(dir, "empty.pem") + " holds no PEM certificate"},
		{"deny without CA", `{` + ch(`, "config": {"denyCerts": ["`+strings.Repeat("ab", 32)+`"]}`) + `}`, "denyCerts: only allowed with clientCA"},
		{"bad fingerprint", `{` + ch(`, "config": {"clientCA": "lab-ca.pem", "denyCerts": ["abc"]}`) + `}`, "denyCerts[0]: must be the certificate's SHA-256 fingerprint"},
		{"duplicate fingerprint", `{` + ch(`, "config": {"clientCA": "lab-ca.pem", "denyCerts": ["`+strings.Repeat("ab", 32)+`", "sha256:`+strings.Repeat("AB", 32)+`"]}`) + `}`, "denyCerts[1]: the same fingerprint as"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeCfg(t, dir, tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

func TestParseFingerprint(t *testing.T) {
	hex := strings.Repeat("0a", 32)
	colons := strings.TrimSuffix(strings.Repeat("0A:", 32), ":")
	for _, s := range []string{hex, strings.ToUpper(hex), colons, "sha256:" + hex, "SHA256:" + colons, "sha256 Fingerprint=" + colons, "SHA256 Fingerprint=" + hex} {
		f, err := ParseFingerprint(s)
		if err != nil || f[0] != 0x0a || f[31] != 0x0a {
			t.Errorf("ParseFingerprint(%q) = %v, %v", s, f, err)
		}
		if f.String() != colons {
			t.Errorf("String() = %s, want %s", f, colons)
		}
	}
	for _, s := range []string{"", hex[:62], hex + "00", strings.Repeat("zz", 32), colons[:len(colons)-3], "0a:" + hex[2:], strings.Replace(colons, "0A:0A", "0A0:A", 1)} {
		if _, err := ParseFingerprint(s); err == nil {
			t.Errorf("ParseFingerprint(%q) took it", s)
		}
	}
}

func FuzzParseFingerprint(f *testing.F) {
	f.Add(strings.Repeat("0a", 32))
	f.Add(strings.TrimSuffix(strings.Repeat("0A:", 32), ":"))
	f.Add("sha256:" + strings.Repeat("ff", 32))
	f.Add("::::")
	f.Add("sha256 Fingerprint=" + strings.TrimSuffix(strings.Repeat("0A:", 32), ":"))
	f.Fuzz(func(t *testing.T, s string) {
		fp, err := ParseFingerprint(s)
		if err != nil {
			return
		}
		back, err := ParseFingerprint(fp.String())
		if err != nil || back != fp {
			t.Fatalf("%q: round trip of %s gave %v, %v", s, fp, back, err)
		}
	})
}
