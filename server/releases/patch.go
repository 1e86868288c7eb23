package releases

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"termlink/server/httpapi"
	"time"

	"termlink/release"
)

// Patches (issue 43): a signed patch (package release/delta) that makes
// a stored release of the binary whose SHA-256 it names, kept beside the
// release in the same Storage under the release's key and ".from-" and
// that SHA-256 (a platform's key part has no dot), so both storages keep
// them with no change. A patch is uploaded only beside its release (its
// manifest's result is the release's size and SHA-256), at most
// MaxPatchesPerRelease of them per release, its bytes counted in the
// store's budget; deleting the release deletes its patches. A rollout
// sends a device a patch when the binary the device said it runs is a
// patch's source (Patch), and the device falls back to the release's
// binary by itself when anything about the patch is wrong.

// MaxPatchesPerRelease bounds the patches kept beside one release.
const MaxPatchesPerRelease = 8

// PatchManifestHeader carries a patch upload's manifest (base64 of the
// patch manifest's bytes) on the release's upload route: the body is
// then the patch.
const PatchManifestHeader = "X-Release-Patch-Manifest"

const patchInfix = ".from-"

// patchKey is a patch's key in a Storage.
func patchKey(version, platform, from string) string {
	return key(version, platform) + patchInfix + from
}

// isPatchKey reports whether a Storage's key is a patch's.
func isPatchKey(k string) bool {
	_, plat, _ := strings.Cut(k, "/")
	return strings.Contains(plat, patchInfix)
}

// DevicePatchURL is the path a device fetches a patch from (an update
// frame's patch_url).
func DevicePatchURL(channelID, version, platform, from string) string {
	return "/api/channels/" + channelID + "/releases/" + version + "/" + platform + "/patches/" + from
}

func (s *Store) patchesLocked() int {
	n := 0
	for _, e := range s.entries {
		if e.patch != nil {
			n++
		}
	}
	return n
}

// checkPatch is check for a patch's record.
func (s *Store) checkPatch(r Record) (*stored, error) {
	m, err := release.ParsePatchManifest(r.Manifest)
	if err != nil {
		return nil, fmt.Errorf("stored patch %s: %w", r.Key, err)
	}
	if k := patchKey(m.Version, m.Platform, m.FromSHA256); k != r.Key {
		return nil, fmt.Errorf("stored patch %s: its manifest is for %s %s from %s", r.Key, m.Version, m.Platform, m.FromSHA256)
	}
	if r.Size != m.PatchSize {
		return nil, fmt.Errorf("stored patch %s: its file is %d bytes, its manifest says %d", r.Key, r.Size, m.PatchSize)
	}
	if r.SignatureChecked && s.opt.PublicKey != nil {
		if err := m.Verify(s.opt.PublicKey); err != nil {
			return nil, fmt.Errorf("stored patch %s: recorded as signed with the release key: %v", r.Key, err)
		}
	}
	return &stored{Entry: Entry{Version: m.Version, Platform: m.Platform, Size: m.PatchSize, SHA256: m.PatchSHA256,
		UploadedAt: r.UploadedAt.UTC(), UploadedBy: r.UploadedBy, SignatureChecked: r.SignatureChecked,
		FromSHA256: m.FromSHA256, FromVersion: m.FromVersion}, patch: m}, nil
}

// Patches are the patches stored beside release version for platform
// ("" for either: every version's, every platform's), by version,
// platform, source.
func (s *Store) Patches(version, platform string) []Entry {
	s.mu.Lock()
	out := []Entry{} // the API's "patches": [] when none
	for _, e := range s.entries {
		if e.patch != nil && (version == "" || e.Version == version) && (platform == "" || e.Platform == platform) {
			out = append(out, e.Entry)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		if a.Platform != b.Platform {
			return a.Platform < b.Platform
		}
		return a.FromSHA256 < b.FromSHA256
	})
	return out
}

// Patch is the manifest of the patch that makes release version for
// platform of the binary whose SHA-256 is from, when one is stored and
// its release too (a patch is never sent without its release to fall
// back to).
func (s *Store) Patch(version, platform, from string) (*release.PatchManifest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[patchKey(version, platform, from)]
	r := s.entries[key(version, platform)]
	if e == nil || e.patch == nil || r == nil || r.manifest == nil || e.patch.Matches(r.manifest) != nil {
		return nil, false
	}
	return e.patch, true
}

// reservePatch takes the room for an upload of patch m, or says why
// there is none.
func (s *Store) reservePatch(m *release.PatchManifest) error {
	k := patchKey(m.Version, m.Platform, m.FromSHA256)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.entries[key(m.Version, m.Platform)]
	n := 0
	for ek, e := range s.entries {
		if e.patch != nil && strings.HasPrefix(ek, key(m.Version, m.Platform)+patchInfix) {
			n++
		}
	}
	for ik := range s.inflight {
		if strings.HasPrefix(ik, key(m.Version, m.Platform)+patchInfix) {
			n++
		}
	}
	switch {
	case r == nil || r.manifest == nil:
		return refuse(404, "no release %s for %s is stored: upload the release before its patches", m.Version, m.Platform)
	case m.Matches(r.manifest) != nil:
		return refuse(422, "patch refused: %v", m.Matches(r.manifest))
	case s.entries[k] != nil:
		return refuse(409, "a patch of %s for %s from %s is already stored: delete the release to replace it", m.Version, m.Platform, m.FromSHA256[:16])
	case s.inflight[k]:
		return refuse(409, "that patch of %s for %s is being uploaded by another request", m.Version, m.Platform)
	case n >= MaxPatchesPerRelease:
		return refuse(507, "release %s for %s has %d patches, its most", m.Version, m.Platform, n)
	case m.PatchSize > s.opt.MaxBytes || s.used+s.reserved+m.PatchSize > s.opt.MaxBytes:
		return refuse(507, "the release store has %d of %d bytes in use: the patch's %d more do not fit (config releases.maxBytes)",
			s.used+s.reserved, s.opt.MaxBytes, m.PatchSize)
	}
	s.inflight[k] = true
	s.reserved += m.PatchSize
	return nil
}

// PutPatch stores the patch read from body, as m describes it, beside
// its release, by operator by: PutPatch checks its signature (with a
// release key configured), that its release is stored and is what it
// makes, the room left, and the body against m.
func (s *Store) PutPatch(ctx context.Context, m *release.PatchManifest, body io.Reader, by string) (Entry, error) {
	if err := s.Ready(); err != nil {
		return Entry{}, err
	}
	checked := false
	if s.opt.PublicKey != nil {
		if err := m.Verify(s.opt.PublicKey); err != nil {
			return Entry{}, refuse(422, "patch of %s for %s refused: %v (the server's release key, config releases.publicKeyFile)", m.Version, m.Platform, err)
		}
		checked = true
	}
	if err := s.reservePatch(m); err != nil {
		return Entry{}, err
	}
	k := patchKey(m.Version, m.Platform, m.FromSHA256)
	defer func() {
		s.mu.Lock()
		delete(s.inflight, k)
		s.reserved -= m.PatchSize
		s.mu.Unlock()
	}()
	r := Record{Key: k, Manifest: m.Marshal(), UploadedAt: time.Now().UTC().Truncate(time.Millisecond), UploadedBy: by, SignatureChecked: checked}
	cr := &checkReader{r: ctxReader{ctx, body}, size: m.PatchSize, sum: m.PatchSHA256, what: "patch", h: sha256.New()}
	got, err := s.st.Create(ctx, r, cr)
	switch {
	case cr.refusal != nil:
		return Entry{}, cr.refusal
	case cr.bodyErr != nil:
		return Entry{}, refuse(400, "upload of a patch of %s for %s ended after %d of %d bytes: %v", m.Version, m.Platform, cr.n, m.PatchSize, cr.bodyErr)
	case errors.Is(err, ErrExists):
		return Entry{}, refuse(409, "a patch of %s for %s from %s is already stored", m.Version, m.Platform, m.FromSHA256[:16])
	case errors.Is(err, ErrFull):
		return Entry{}, refuse(507, "the release storage refuses the patch's %d bytes (config releases.maxBytes)", m.PatchSize)
	case err != nil:
		return Entry{}, fmt.Errorf("storing a patch of %s for %s: %w", m.Version, m.Platform, err)
	case !cr.ok:
		return Entry{}, fmt.Errorf("storing a patch of %s for %s: the storage stopped after %d of %d bytes", m.Version, m.Platform, cr.n, m.PatchSize)
	}
	e, err := s.check(got)
	if err != nil {
		return Entry{}, fmt.Errorf("storing a patch of %s for %s: %w", m.Version, m.Platform, err)
	}
	s.mu.Lock()
	s.setLocked(k, e)
	s.mu.Unlock()
	s.event(EventUploaded, fmt.Sprintf("patch of %s %s from %s by %s: %d bytes", m.Version, m.Platform, m.FromSHA256[:16], by, m.PatchSize))
	s.opt.Log.Info("release patch stored", "version", m.Version, "platform", m.Platform, "from_sha256", m.FromSHA256,
		"patch_size", m.PatchSize, "size", m.Size, "by", by, "signature_checked", checked, "where", s.st.Info().Where)
	return e.Entry, nil
}

// OpenPatch opens a stored patch, its size and SHA-256 checked against
// its manifest before it is returned (as OpenBinary).
func (s *Store) OpenPatch(ctx context.Context, version, platform, from string) (Binary, Entry, error) {
	if err := s.Ready(); err != nil {
		return nil, Entry{}, err
	}
	k := patchKey(version, platform, from)
	s.mu.Lock()
	e := s.entries[k]
	s.mu.Unlock()
	if e == nil {
		return nil, Entry{}, refuse(404, "no patch of %s for %s from %s is stored", version, platform, from)
	}
	b, err := s.st.Open(ctx, k, e.Size)
	if errors.Is(err, ErrNotFound) {
		return nil, Entry{}, refuse(404, "no patch of %s for %s from %s is stored", version, platform, from)
	}
	if err != nil {
		return nil, Entry{}, fmt.Errorf("reading a patch of %s for %s: %w", version, platform, err)
	}
	if err := s.verify(k, e, b); err != nil {
		b.Close()
		return nil, Entry{}, err
	}
	return b, e.Entry, nil
}

// deletePatches removes the patches of a release just deleted.
func (s *Store) deletePatches(ctx context.Context, version, platform, by string) {
	prefix := key(version, platform) + patchInfix
	var keys []string
	s.mu.Lock()
	for k := range s.entries {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	for _, k := range keys {
		err := s.st.Delete(ctx, k)
		if err != nil && !errors.Is(err, ErrNotFound) {
			s.opt.Log.Warn("release store: a deleted release's patch not removed", "key", k, "err", err)
			continue
		}
		s.mu.Lock()
		s.dropLocked(k)
		s.mu.Unlock()
		s.event(EventDeleted, fmt.Sprintf("patch %s by %s (with its release)", k, by))
	}
}

// putPatch is a patch's upload: the release's upload route with a
// PatchManifestHeader.
func (s *Store) putPatch(w http.ResponseWriter, r *http.Request, op, version, platform, hdr string) error {
	if len(hdr) > base64.StdEncoding.EncodedLen(release.MaxManifestBytes) {
		return refuse(400, "%s: longer than a manifest's %d bytes", PatchManifestHeader, release.MaxManifestBytes)
	}
	b, err := base64.StdEncoding.DecodeString(hdr)
	if err != nil {
		return refuse(400, "%s: not base64: %v", PatchManifestHeader, err)
	}
	m, err := release.ParsePatchManifest(b)
	if err != nil {
		return refuse(400, "%v", err)
	}
	if m.Version != version || m.Platform != platform {
		return refuse(400, "the patch manifest is for %s %s, the path says %s %s", m.Version, m.Platform, version, platform)
	}
	if r.ContentLength >= 0 && r.ContentLength != m.PatchSize {
		return refuse(422, "the body is %d bytes, the patch manifest says the patch is %d", r.ContentLength, m.PatchSize)
	}
	body := &stallReader{r: r.Body, rc: http.NewResponseController(w), stall: s.opt.Stall}
	e, err := s.PutPatch(r.Context(), m, body, op)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusCreated, e)
	return nil
}

// servePatch serves a patch (Range, If-Range), its manifest in
// PatchManifestHeader.
func (s *Store) servePatch(w http.ResponseWriter, r *http.Request, version, platform, from string) {
	s.mu.Lock()
	var m *release.PatchManifest
	if e := s.entries[patchKey(version, platform, from)]; e != nil {
		m = e.patch
	}
	s.mu.Unlock()
	f, e, err := s.OpenPatch(r.Context(), version, platform, from)
	if err != nil {
		answer(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", BinaryContentType)
	w.Header().Set("ETag", `"`+e.SHA256+`"`)
	if m != nil {
		w.Header().Set(PatchManifestHeader, base64.StdEncoding.EncodeToString(m.Marshal()))
	}
	if rg, ok := satisfiableRanges(r.Header.Get("Range"), e.Size); ok {
		r.Header.Set("Range", rg)
	}
	sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: s.opt.Stall}
	http.ServeContent(sw, r, "", e.UploadedAt, f)
}
