package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"termlink/release"
	"termlink/release/delta"
	"termlink/server/releases"
)

// The delta command (issue 43): a signed patch that makes a signed
// release of an older binary, uploaded beside the release; a device
// running the older binary downloads the patch instead of the whole
// binary (and the whole binary when the patch fails).

func (a *app) releaseDelta(_ context.Context, args []string) error {
	fs, usage := a.newFlagSet("release delta", `--from OLD_BINARY --to NEW_BINARY --key DIR/release.key [--out PATCH]

Writes a patch that makes NEW_BINARY of OLD_BINARY (package release/delta),
and its manifest PATCH.json signed with the release key: the sha256 of
OLD_BINARY, and the version, platform, size and sha256 of NEW_BINARY's
signed manifest (NEW_BINARY.release.json: termrig release sign first).
The patch is applied here once and its result checked before it is signed.`)
	from := fs.String("from", "", "the older `binary` devices run (required)")
	to := fs.String("to", "", "the new release's `binary`, signed already (required)")
	keyFile := fs.String("key", "", "the private `key` file (release.key; required)")
	out := fs.String("out", "", "the patch's `path` (default NEW_BINARY.from-SHA.patch; its manifest is PATH.json)")
	if _, err := parseArgs(fs, usage, args, 0, 0, "nothing"); err != nil {
		return err
	}
	switch {
	case *from == "" || *to == "":
		return usagef("--from and --to are required (the older binary and the new release's)")
	case *keyFile == "":
		return usagef("--key is required (release.key from termrig release keygen)")
	}
	priv, err := release.LoadPrivateKey(*keyFile)
	if err != nil {
		return err
	}
	mpath := *to + release.ManifestSuffix
	m, _, err := readManifest(mpath)
	if err != nil {
		return err
	}
	if err := m.Verify(priv.Public().(ed25519.PublicKey)); err != nil {
		return fmt.Errorf("%s: %w (is it signed with %s?)", mpath, err, *keyFile)
	}
	if err := checkLocal(*to, m, mpath); err != nil {
		return err
	}
	oldb, err := os.ReadFile(*from)
	if err != nil {
		return err
	}
	newb, err := os.ReadFile(*to)
	if err != nil {
		return err
	}
	fromSum := sha256.Sum256(oldb)
	pm := &release.PatchManifest{Version: m.Version, Platform: m.Platform, FromSHA256: hex.EncodeToString(fromSum[:]), Size: m.Size, SHA256: m.SHA256}
	if pm.FromSHA256 == pm.SHA256 {
		return fmt.Errorf("%s and %s are the same binary: no patch to make", *from, *to)
	}
	if fm, _, err := readManifest(*from + release.ManifestSuffix); err == nil && fm.SHA256 == pm.FromSHA256 {
		pm.FromVersion = fm.Version
	}
	start := time.Now()
	var patch bytes.Buffer
	if err := delta.Diff(oldb, newb, &patch); err != nil {
		return err
	}
	took := time.Since(start)
	var check bytes.Buffer
	if err := delta.Apply(bytes.NewReader(oldb), int64(len(oldb)), bytes.NewReader(patch.Bytes()), int64(patch.Len()), m.Size, &check); err != nil || !bytes.Equal(check.Bytes(), newb) {
		return fmt.Errorf("the patch made does not make %s (%v): not written", *to, err)
	}
	if int64(patch.Len()) > release.MaxPatchBytes {
		return fmt.Errorf("the patch is %d bytes, more than a patch's %d", patch.Len(), release.MaxPatchBytes)
	}
	psum := sha256.Sum256(patch.Bytes())
	pm.PatchSize, pm.PatchSHA256 = int64(patch.Len()), hex.EncodeToString(psum[:])
	pm.Sign(priv)
	if *out == "" {
		*out = *to + ".from-" + pm.FromSHA256[:12] + ".patch"
	}
	if err := writeAtomic(*out, patch.Bytes()); err != nil {
		return err
	}
	if err := writeAtomic(*out+release.PatchManifestSuffix, pm.Marshal()); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "patch of %s for %s from sha256 %s: %d bytes, %.1f%% of the %d-byte binary (made in %s)\nwrote %s and %s\n",
		pm.Version, pm.Platform, pm.FromSHA256[:16], pm.PatchSize, 100*float64(pm.PatchSize)/float64(pm.Size), pm.Size,
		took.Round(time.Millisecond), *out, *out+release.PatchManifestSuffix)
	return nil
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// patchManifestOf is the patch manifest of an upload's file (rest[0], or
// PATCH.json), or nil when the file is not a patch (no such manifest).
func patchManifestOf(bin string, rest []string) (*release.PatchManifest, []byte, string, error) {
	path := bin + release.PatchManifestSuffix
	if len(rest) > 0 {
		path = rest[0]
	}
	b, err := readBoundedFile(path, release.MaxManifestBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, "", nil
	}
	if err != nil {
		return nil, nil, "", err
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(b, &probe) != nil || probe["patch_sha256"] == nil {
		return nil, nil, "", nil // not a patch's: a release's manifest
	}
	pm, err := release.ParsePatchManifest(b)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return pm, b, path, nil
}

func readBoundedFile(path string, max int) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) > max {
		return nil, fmt.Errorf("%s: %d bytes, more than a manifest's %d", path, len(b), max)
	}
	return b, err
}

// uploadPatch stores a patch beside its release on the server.
func (a *app) uploadPatch(ctx context.Context, c *apiClient, path string, pm *release.PatchManifest, raw []byte, mpath string, timeout time.Duration) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pm.CheckPatch(f); err != nil {
		return fmt.Errorf("%s does not match %s: %w", path, mpath, err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+"/api/releases/"+pm.Version+"/"+pm.Platform, f)
	if err != nil {
		return err
	}
	req.ContentLength = pm.PatchSize
	req.Header.Set("Content-Type", releases.BinaryContentType)
	req.Header.Set(releases.PatchManifestHeader, base64.StdEncoding.EncodeToString(raw))
	if _, err := c.do(req, "uploading a patch of "+pm.Version+" for "+pm.Platform); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "stored a patch of %s for %s from sha256 %s on %s: %d bytes, sha256 %s\n",
		pm.Version, pm.Platform, pm.FromSHA256[:16], c.base, pm.PatchSize, pm.PatchSHA256)
	return nil
}
