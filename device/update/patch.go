package update

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"termlink/internal/durable"
	"termlink/release"
	"termlink/release/delta"
)

// Patches (issue 43). An update frame may carry a patch (package
// release/delta) made from the binary this device said it runs, beside
// the whole binary. The patch's manifest is verified against the pinned
// key before anything is fetched, and must make the very release the
// release manifest describes; the patch is downloaded (at most its
// manifest's size, resumed like a binary), checked, and applied into the
// staged file: the old binary read where the patch says, the new one
// written sequentially and hashed as it goes, so neither is held in
// memory. Any failure — signature, download, a patch that does not
// apply, a result of another size or SHA-256 — falls back to the whole
// binary by itself, and Options.Note says so; the checks, the staging,
// the health gate and the rollback after are the whole binary's.

// tryPatch makes part (the staged file's download) from o's patch, and
// reports whether it did; false after a note of why, when there was a
// patch (the caller downloads the whole binary).
func (o *Options) tryPatch(ctx context.Context, client *http.Client, m *release.Manifest, part string, log *slog.Logger) bool {
	if o.Patch == nil {
		return false
	}
	n, err := o.applyPatch(ctx, client, m, part, log)
	if err == nil {
		o.note(fmt.Sprintf("patched: downloaded a patch of %d bytes for a binary of %d", n, m.Size))
		return true
	}
	os.Remove(part)
	removeOtherPatches(o.Worker.Exe+StagedSuffix, "") // the whole binary now: a partial patch is of no use
	if ctx.Err() != nil {
		return false
	}
	why := err.Error()
	if len(why) > 600 {
		why = why[:600] + "…"
	}
	log.Warn("the patch failed; downloading the whole binary", "version", m.Version, "err", err)
	o.note("patch failed: " + why + "; fetching the full binary")
	return false
}

func (o *Options) note(s string) {
	if o.Note != nil {
		o.Note(s)
	}
}

// applyPatch downloads, checks and applies the patch into part; it
// returns the patch's size.
func (o *Options) applyPatch(ctx context.Context, client *http.Client, m *release.Manifest, part string, log *slog.Logger) (int64, error) {
	pm := o.Patch
	if err := pm.Verify(o.Key); err != nil {
		return 0, fmt.Errorf("patch manifest: %w", err)
	}
	if err := pm.Matches(m); err != nil {
		return 0, err
	}
	from := o.PatchFrom
	if from == "" {
		from = o.Worker.Exe
	}
	old, err := os.Open(from)
	if err != nil {
		return 0, fmt.Errorf("the running binary: %w", err)
	}
	defer old.Close()
	fi, err := old.Stat()
	if err != nil {
		return 0, err
	}
	if sum, err := BinarySHA256(from, o.Worker.StateDir); err != nil {
		return 0, fmt.Errorf("hashing the running binary: %w", err)
	} else if sum != pm.FromSHA256 {
		return 0, fmt.Errorf("the patch is made from sha256 %s, this binary's is %s", pm.FromSHA256[:16], sum[:16])
	}
	ppath := o.Worker.Exe + StagedSuffix + "-" + pm.PatchSHA256[:16] + ".patch"
	removeOtherPatches(o.Worker.Exe+StagedSuffix, ppath)
	log.Info("downloading a patch", "version", pm.Version, "patch_size", pm.PatchSize, "size", pm.Size, "to", ppath)
	if err := download(ctx, client, o.PatchURL, o.Token, ppath, &release.Manifest{Version: pm.Version, Size: pm.PatchSize}); err != nil {
		return 0, fmt.Errorf("downloading the patch: %w", err)
	}
	defer os.Remove(ppath) // applied or not, its result is what stays
	pf, err := os.Open(ppath)
	if err != nil {
		return 0, err
	}
	defer pf.Close()
	if err := pm.CheckPatch(pf); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrChecksum, err)
	}
	if err := checkSpace(part, pm.Size); err != nil {
		return 0, err
	}
	out, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, diskErr("opening "+part, err)
	}
	defer out.Close()
	h := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(out, h), 64<<10)
	if err := delta.Apply(old, fi.Size(), pf, pm.PatchSize, pm.Size, w); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return 0, diskErr("writing "+part, err)
		}
		return 0, fmt.Errorf("applying the patch: %w", err)
	}
	if err := w.Flush(); err != nil {
		return 0, diskErr("writing "+part, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != m.SHA256 {
		return 0, fmt.Errorf("%w: the patched binary's sha256 is %s, the manifest says %s", ErrChecksum, sum, m.SHA256)
	}
	if err := out.Sync(); err != nil {
		return 0, diskErr("fsync of "+part, err)
	}
	return pm.PatchSize, out.Close()
}

// removeOtherPatches deletes downloaded patches other than keep.
func removeOtherPatches(staged, keep string) {
	old, _ := filepath.Glob(staged + "-*.patch")
	for _, p := range old {
		if p != keep && strings.HasSuffix(p, ".patch") {
			os.Remove(p)
		}
	}
}

// binarySumFile caches BinarySHA256 in the state dir.
const binarySumFile = "binary_sha256.json"

type binarySum struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime_ns"`
	SHA256  string `json:"sha256"`
}

// BinarySHA256 is the SHA-256 of the file at path (the running binary:
// connect's binary_sha256), hashed once and kept in stateDir by path,
// size and modification time ("" stateDir: not kept).
func BinarySHA256(path, stateDir string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	want := binarySum{Path: path, Size: fi.Size(), ModTime: fi.ModTime().UnixNano()}
	cache := filepath.Join(stateDir, binarySumFile)
	if stateDir != "" {
		if b, err := os.ReadFile(cache); err == nil && len(b) < 4096 {
			var got binarySum
			if json.Unmarshal(b, &got) == nil && got.Path == want.Path && got.Size == want.Size && got.ModTime == want.ModTime && len(got.SHA256) == 64 {
				return got.SHA256, nil
			}
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	n, sum, err := release.Digest(f)
	if err != nil {
		return "", err
	}
	if n != want.Size {
		return sum, nil // changed while read: not kept
	}
	want.SHA256 = sum
	if stateDir != "" {
		_ = durable.WriteFile(cache, func(w *bufio.Writer) error { return json.NewEncoder(w).Encode(want) }, false)
	}
	return sum, nil
}
