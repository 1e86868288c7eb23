package release

import (
	"bytes"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeygenSignVerify(t *testing.T) {
	dir := t.TempDir()
	pub, err := GenerateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, PrivateKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key: %v %v, want mode 0600", fi, err)
	}
	if _, err := GenerateKey(dir); err == nil || !strings.Contains(err.Error(), "never overwritten") {
		t.Fatalf("second keygen: %v, want a refusal", err)
	}
	priv, err := LoadPrivateKey(filepath.Join(dir, PrivateKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := LoadPublicKey(filepath.Join(dir, PublicKeyFile))
	if err != nil || !pinned.Equal(pub) {
		t.Fatalf("public key %v %v", pinned, err)
	}
	bin := filepath.Join(dir, "termd")
	data := []byte("\x7fELF pretend binary")
	os.WriteFile(bin, data, 0o755)
	m, err := Sign(priv, "1.2.0", "linux/arm/6", bin)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseManifest(m.Marshal())
	if err != nil || *got != *m {
		t.Fatalf("round trip %+v %v", got, err)
	}
	if err := got.Verify(pinned); err != nil {
		t.Fatal(err)
	}
	if err := got.CheckBinary(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	// Another key, a changed field, another binary: each refused.
	other, _, _ := ed25519.GenerateKey(nil)
	if err := got.Verify(other); err != ErrBadSignature {
		t.Fatalf("other key: %v", err)
	}
	changed := *got
	changed.Version = "1.2.1"
	if err := changed.Verify(pinned); err != ErrBadSignature {
		t.Fatalf("changed version: %v", err)
	}
	if err := got.CheckBinary(bytes.NewReader(data[:5])); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated: %v", err)
	}
	flipped := bytes.Clone(data)
	flipped[0] ^= 1
	if err := got.CheckBinary(bytes.NewReader(flipped)); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("flipped: %v", err)
	}
}

func TestParseManifestErrors(t *testing.T) {
	sig := strings.Repeat("A", 86) + "=="
	sum := strings.Repeat("a", 64)
	for _, tt := range []struct{ in, want string }{
		{`{`, "unexpected EOF"},
		{`{"version":"1","platform":"linux/arm/6","size":1,"sha256":"` + sum + `","signature":"` + sig + `","x":1}`, `unknown field "x"`},
		{`{"version":"","platform":"linux/arm/6","size":1,"sha256":"` + sum + `","signature":"` + sig + `"}`, `version ""`},
		{`{"version":"1","platform":"arm","size":1,"sha256":"` + sum + `","signature":"` + sig + `"}`, `platform "arm"`},
		{`{"version":"1","platform":"linux/arm/6","size":0,"sha256":"` + sum + `","signature":"` + sig + `"}`, `size 0`},
		{`{"version":"1","platform":"linux/arm/6","size":1,"sha256":"ABC","signature":"` + sig + `"}`, `sha256 "ABC"`},
		{`{"version":"1","platform":"linux/arm/6","size":1,"sha256":"` + sum + `","signature":"xx"}`, `signature: want`},
		{`{"version":"1","platform":"linux/arm/6","size":1,"sha256":"` + sum + `","signature":"` + sig + `"} {}`, `more than one`},
		{strings.Repeat(" ", MaxManifestBytes+1), "more than"},
	} {
		if _, err := ParseManifest([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseManifest(%.60s) = %v, want %q", tt.in, err, tt.want)
		}
	}
}

func TestCurrentPlatform(t *testing.T) {
	if err := CheckPlatform(CurrentPlatform()); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"version":"1.0","platform":"linux/arm/6","size":10,"sha256":"` + strings.Repeat("0", 64) + `","signature":"` + strings.Repeat("A", 86) + `=="}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		// What it accepts is well formed and survives a round trip.
		again, err := ParseManifest(m.Marshal())
		if err != nil || *again != *m {
			t.Fatalf("round trip of %+v: %+v %v", m, again, err)
		}
	})
}
