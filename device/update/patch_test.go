package update

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/release"
	"termlink/release/delta"
)

// makePatch writes the patch of from into to (signed by priv as m's
// release) and returns its path and manifest.
func makePatch(t *testing.T, priv ed25519.PrivateKey, from, to string, m *release.Manifest) (string, *release.PatchManifest) {
	t.Helper()
	oldb, _ := os.ReadFile(from)
	newb, _ := os.ReadFile(to)
	var p bytes.Buffer
	if err := delta.Diff(oldb, newb, &p); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "patch")
	os.WriteFile(path, p.Bytes(), 0o644)
	fs, ps := sha256.Sum256(oldb), sha256.Sum256(p.Bytes())
	pm := &release.PatchManifest{Version: m.Version, Platform: m.Platform, FromSHA256: hex.EncodeToString(fs[:]), Size: m.Size, SHA256: m.SHA256,
		PatchSize: int64(p.Len()), PatchSHA256: hex.EncodeToString(ps[:])}
	pm.Sign(priv)
	return path, pm
}

// binaryPair writes two files that differ as two builds of one program
// do (a version string, a block inserted, scattered bytes changed) and
// returns their paths. Apply never runs them; a real build's size made
// the patch under the race detector take a minute of the race step
// (delta's own tests and the rollout e2e tests patch real binaries).
func binaryPair(t *testing.T) (v1, v2 string) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	var old bytes.Buffer
	for old.Len() < 192<<10 {
		if r.IntN(3) == 0 {
			old.WriteString("termd v1.0.0 runtime.gopanic main.main ")
			continue
		}
		var blk [64]byte
		for i := range blk {
			blk[i] = byte(r.Uint32())
		}
		old.Write(blk[:])
	}
	newb := bytes.ReplaceAll(old.Bytes(), []byte("v1.0.0"), []byte("v1.1.0"))
	newb = append(newb[:len(newb)/3:len(newb)/3], append(bytes.Repeat([]byte("new code "), 120), newb[len(newb)/3:]...)...)
	for i := 0; i < 40; i++ {
		newb[r.IntN(len(newb))] ^= 0x5a
	}
	dir := t.TempDir()
	v1, v2 = filepath.Join(dir, "v1"), filepath.Join(dir, "v2")
	if err := os.WriteFile(v1, old.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v2, newb, 0o755); err != nil {
		t.Fatal(err)
	}
	return v1, v2
}

// A patch of the running binary, signed and applying into the release,
// stages the release having downloaded only the patch; each way a patch
// can fail (a manifest another key signed, a corrupt patch, a patch
// missing on the server, a patch of another binary) stages the release
// all the same from the whole binary, the note saying why.
func TestApplyPatch(t *testing.T) {
	t.Parallel()
	pub, priv, _ := newKey(t)
	_, otherPriv, _ := newKey(t)
	v1, v2 := binaryPair(t)
	m := sign(t, priv, "v1.1.0", v2)
	patch, pm := makePatch(t, priv, v1, v2, m)
	want, _ := os.ReadFile(v2)
	corrupt := filepath.Join(t.TempDir(), "corrupt")
	pb, _ := os.ReadFile(patch)
	pb[delta.HeaderSize] |= 0x06 // the control stream's first DEFLATE block: BTYPE 11, reserved
	os.WriteFile(corrupt, pb, 0o644)
	cs := sha256.Sum256(pb)
	cpm := *pm
	cpm.PatchSHA256 = hex.EncodeToString(cs[:]) // signed as it is: only applying it finds it wrong
	cpm.Sign(priv)
	otherKey := *pm
	otherKey.Sign(otherPriv)
	otherFrom := *pm
	otherFrom.FromSHA256 = strings.Repeat("ab", 32)
	otherFrom.Sign(priv)

	for _, c := range []struct {
		name    string
		pm      *release.PatchManifest
		file    string // "" : not on the server
		note    string
		binHits bool // the whole binary was downloaded
	}{
		{"patched", pm, patch, "patched: downloaded a patch of", false},
		{"another key", &otherKey, patch, "patch failed: patch manifest: release signature does not match", true},
		{"corrupt", &cpm, corrupt, "patch failed: applying the patch: corrupt patch", true},
		{"missing", pm, "", "patch failed: downloading the patch: downloading the release: 404", true},
		{"another source", &otherFrom, patch, "patch failed: the patch is made from sha256 abababab", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, v1)
			srv := newFileServer(t)
			purl := srv.URL + "/nopatch"
			if c.file != "" {
				purl = srv.serve("patch", c.file)
			}
			binURL := srv.serve("v2", v2)
			var notes []string
			err := Apply(context.Background(), Options{URL: binURL, Manifest: m, Key: pub, Version: "v1.0.0", Worker: f.w,
				Patch: c.pm, PatchURL: purl, PatchFrom: f.exe, Note: func(s string) { notes = append(notes, s) }})
			if err != nil {
				t.Fatal(err)
			}
			if got := <-f.msgs; got != "update" {
				t.Errorf("the supervisor was told %q", got)
			}
			if got, _ := os.ReadFile(f.exe + StagedSuffix); !bytes.Equal(got, want) {
				t.Error("the staged binary is not v2")
			}
			if len(notes) != 1 || !strings.HasPrefix(notes[0], c.note) {
				t.Errorf("notes %q, want one starting %q", notes, c.note)
			}
			if c.binHits != (strings.HasSuffix(notes[0], "fetching the full binary")) {
				t.Errorf("note %q", notes[0])
			}
			if left, _ := filepath.Glob(f.exe + StagedSuffix + "-*"); len(left) != 0 {
				t.Errorf("files left: %v", left)
			}
			if c.name == "another key" && srv.hits.Load() != 1 {
				t.Errorf("%d requests: the patch was fetched before its signature was checked", srv.hits.Load())
			}
			if c.name == "patched" && srv.hits.Load() != 1 {
				t.Errorf("%d requests, want the patch's only", srv.hits.Load())
			}
		})
	}
	// The binary's sha256 is kept in the state dir by path, size, time.
	dir := t.TempDir()
	s1, err := BinarySHA256(v1, dir)
	if err != nil || s1 != pm.FromSHA256 {
		t.Fatalf("BinarySHA256 %s %v, want %s", s1, err, pm.FromSHA256)
	}
	if b, err := os.ReadFile(filepath.Join(dir, binarySumFile)); err != nil || !strings.Contains(string(b), s1) {
		t.Fatalf("cache: %s %v", b, err)
	}
}
