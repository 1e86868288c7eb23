package release

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func testPatchManifest(t *testing.T) (*PatchManifest, ed25519.PublicKey) {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	m := &PatchManifest{Version: "1.3.0", Platform: "linux/arm/6", FromSHA256: strings.Repeat("a", 64), FromVersion: "1.2.0",
		Size: 1000, SHA256: strings.Repeat("b", 64), PatchSize: 10, PatchSHA256: strings.Repeat("c", 64)}
	m.Sign(priv)
	return m, pub
}

func TestPatchManifest(t *testing.T) {
	m, pub := testPatchManifest(t)
	got, err := ParsePatchManifest(m.Marshal())
	if err != nil || *got != *m {
		t.Fatalf("parsed %+v %v", got, err)
	}
	if err := got.Verify(pub); err != nil {
		t.Fatal(err)
	}
	// Each signed field changed: the signature no longer holds.
	for _, change := range []func(*PatchManifest){
		func(m *PatchManifest) { m.FromSHA256 = strings.Repeat("d", 64) },
		func(m *PatchManifest) { m.PatchSize++ },
		func(m *PatchManifest) { m.PatchSHA256 = strings.Repeat("e", 64) },
		func(m *PatchManifest) { m.Size++ },
		func(m *PatchManifest) { m.FromVersion = "1.1.0" },
	} {
		c := *m
		change(&c)
		if err := c.Verify(pub); !errors.Is(err, ErrBadSignature) {
			t.Errorf("changed %+v: %v", c, err)
		}
	}
	// A release manifest's signature over the same words is not a patch's.
	rm := &Manifest{Version: m.Version, Platform: m.Platform, Size: m.Size, SHA256: m.SHA256, Signature: m.Signature}
	if err := rm.Verify(pub); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a patch's signature taken for a release's: %v", err)
	}
	for name, edit := range map[string]func(map[string]any){
		"unknown field":   func(v map[string]any) { v["extra"] = 1 },
		"patch too large": func(v map[string]any) { v["patch_size"] = MaxPatchBytes + 1 },
		"bad from":        func(v map[string]any) { v["from_sha256"] = "xyz" },
		"itself":          func(v map[string]any) { v["from_sha256"] = v["sha256"] },
	} {
		var v map[string]any
		json.Unmarshal(m.Marshal(), &v)
		edit(v)
		b, _ := json.Marshal(v)
		if _, err := ParsePatchManifest(b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if err := m.CheckPatch(bytes.NewReader(make([]byte, 11))); err == nil || !strings.Contains(err.Error(), "more than 10") {
		t.Errorf("a longer patch: %v", err)
	}
}

// FuzzParsePatchManifest: whatever the bytes, a manifest is refused or
// parsed into one that marshals back to what parses the same.
func FuzzParsePatchManifest(f *testing.F) {
	m := &PatchManifest{Version: "1.3.0", Platform: "linux/arm/6", FromSHA256: strings.Repeat("a", 64), Size: 1000,
		SHA256: strings.Repeat("b", 64), PatchSize: 10, PatchSHA256: strings.Repeat("c", 64), Signature: strings.Repeat("A", 86) + "=="}
	f.Add(m.Marshal())
	f.Add([]byte(`{"version":"1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParsePatchManifest(b)
		if err != nil {
			return
		}
		again, err := ParsePatchManifest(got.Marshal())
		if err != nil || *again != *got {
			t.Fatalf("parsed %+v; its Marshal parses as %+v %v", got, again, err)
		}
	})
}
