package config

import (
	"path/filepath"
	"strings"
	"testing"

	"termlink/release"
)

// The "releases" block: its bounds (both spellings), the public key file
// resolved against the config's directory and checked at load, and clear
// errors for what is wrong.
func TestReleasesBlock(t *testing.T) {
	const ch = `"channels": {"terminal-dev": {"accountId": "local"}}`
	cfg, err := Parse([]byte(`{` + ch + `, "releases": {"maxBytes": 2097152, "max_releases": 3}}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Releases.MaxBytes != 2<<20 || cfg.Releases.MaxReleases != 3 || cfg.Releases.PublicKeyFile != "" {
		t.Fatalf("releases %+v", cfg.Releases)
	}
	for _, tc := range []struct{ body, want string }{
		{`"releases": {"maxBytes": 1000}`, "releases.maxBytes"},
		{`"releases": {"maxReleases": 0}`, "releases.maxReleases"},
		{`"releases": {"maxReleases": 1001}`, "releases.maxReleases"},
		{`"releases": {"publicKeyFile": ""}`, "releases.publicKeyFile"},
		{`"releases": {"publicKey": "x"}`, "releases.publicKey"},
		{`"releases": true`, "releases"},
	} {
		if _, err := Parse([]byte(`{` + ch + `, ` + tc.body + `}`)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.body, err, tc.want)
		}
	}

	dir := t.TempDir()
	if _, err := release.GenerateKey(filepath.Join(dir, "keys")); err != nil {
		t.Fatal(err)
	}
	cfg, err = Load(writeCfg(t, dir, `{`+ch+`, "releases": {"publicKeyFile": "keys/release.pub"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Releases.PublicKeyFile != filepath.Join(dir, "keys", "release.pub") {
		t.Fatalf("publicKeyFile %q, want it resolved against the config's directory", cfg.Releases.PublicKeyFile)
	}
	for _, tc := range []struct{ file, want string }{
		{"keys/missing.pub", "no such file"},
		{"keys/release.key", "not a PEM \"PUBLIC KEY\""},
	} {
		_, err := Load(writeCfg(t, dir, `{`+ch+`, "releases": {"publicKeyFile": "`+tc.file+`"}}`))
		if err == nil || !strings.Contains(err.Error(), "releases.publicKeyFile") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming releases.publicKeyFile and %q", tc.file, err, tc.want)
		}
	}
}
