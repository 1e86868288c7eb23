package releasestest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"termlink/internal/testwait"
	"termlink/release"
	"termlink/server/releases"
)

// Patch is n random bytes signed by priv as a patch of from's binary
// into the release m describes.
func Patch(t *testing.T, priv ed25519.PrivateKey, m *release.Manifest, from string, n int) ([]byte, *release.PatchManifest) {
	t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	sum := sha256.Sum256(b)
	pm := &release.PatchManifest{Version: m.Version, Platform: m.Platform, FromSHA256: from, Size: m.Size, SHA256: m.SHA256,
		PatchSize: int64(n), PatchSHA256: hex.EncodeToString(sum[:])}
	pm.Sign(priv)
	return b, pm
}

func putPatch(t *testing.T, srv *httptest.Server, pm *release.PatchManifest, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("PUT", srv.URL+"/api/releases/"+pm.Version+"/"+pm.Platform, bytes.NewReader(body))
	req.Header.Set("Content-Type", releases.BinaryContentType)
	req.Header.Set(releases.PatchManifestHeader, base64.StdEncoding.EncodeToString(pm.Marshal()))
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// patches: a patch is uploaded beside its release only, listed, served
// (whole and resumed) and found by its source's sha256, seen by another
// handle, bounded per release, and deleted with its release.
func patches(t *testing.T, h Harness) {
	r := newRig(t, h)
	s := r.open(releases.Options{PublicKey: r.pub})
	srv := serve(t, s)
	bin, m := Binary(t, r.priv, "1.3.0", "linux/arm/6", 100<<10)
	from := strings.Repeat("ab", 32)
	pb, pm := Patch(t, r.priv, m, from, 20<<10)
	if code, body := putPatch(t, srv, pm, pb); code != 404 || !strings.Contains(string(body), "upload the release before its patches") {
		t.Fatalf("a patch before its release: HTTP %d %s", code, body)
	}
	if _, err := s.Put(context.Background(), m, bytes.NewReader(bin), "otto"); err != nil {
		t.Fatal(err)
	}
	other := *pm
	other.SHA256 = strings.Repeat("cd", 32)
	other.Sign(r.priv)
	if code, body := putPatch(t, srv, &other, pb); code != 422 || !strings.Contains(string(body), "the release is 1.3.0") {
		t.Fatalf("a patch making another binary: HTTP %d %s", code, body)
	}
	if code, body := putPatch(t, srv, pm, pb[:len(pb)-1]); code != 422 {
		t.Fatalf("a truncated patch: HTTP %d %s", code, body)
	}
	if code, body := putPatch(t, srv, pm, pb); code != 201 {
		t.Fatalf("upload: HTTP %d %s", code, body)
	}
	if code, body := putPatch(t, srv, pm, pb); code != 409 {
		t.Fatalf("second upload: HTTP %d %s", code, body)
	}
	if got, ok := s.Patch(m.Version, m.Platform, from); !ok || *got != *pm {
		t.Fatalf("Patch: %+v %v", got, ok)
	}
	if _, ok := s.Patch(m.Version, m.Platform, strings.Repeat("ef", 32)); ok {
		t.Fatal("a patch found for another source")
	}
	code, body, _ := get(t, srv, "/api/releases", nil)
	var list struct {
		Releases []releases.Entry `json:"releases"`
		Patches  []releases.Entry `json:"patches"`
		Count    int              `json:"count"`
		Bytes    int64            `json:"bytes"`
	}
	if err := json.Unmarshal(body, &list); code != 200 || err != nil || len(list.Releases) != 1 || len(list.Patches) != 1 ||
		list.Patches[0].FromSHA256 != from || list.Count != 1 || list.Bytes != m.Size+pm.PatchSize {
		t.Fatalf("list: HTTP %d %s", code, body)
	}
	code, body, _ = get(t, srv, "/api/releases?version="+m.Version, nil)
	if err := json.Unmarshal(body, &list); code != 200 || err != nil || len(list.Patches) != 1 {
		t.Fatalf("list of %s: HTTP %d %s", m.Version, code, body)
	}
	code, body, _ = get(t, srv, "/api/releases?version=9.9", nil)
	if err := json.Unmarshal(body, &list); code != 200 || err != nil || len(list.Patches) != 0 || list.Patches == nil {
		t.Fatalf("list of another version: HTTP %d %s", code, body)
	}
	p := path(m) + "/patches/" + from
	code, body, hdr := get(t, srv, p, nil)
	if code != 200 || !bytes.Equal(body, pb) || hdr.Get(releases.PatchManifestHeader) == "" {
		t.Fatalf("patch: HTTP %d, %d bytes", code, len(body))
	}
	code, body, _ = get(t, srv, p, map[string]string{"Range": "bytes=1000-", "If-Range": `"` + pm.PatchSHA256 + `"`})
	if code != 206 || !bytes.Equal(body, pb[1000:]) {
		t.Fatalf("resumed patch: HTTP %d, %d bytes", code, len(body))
	}
	if code, _, _ := get(t, srv, path(m)+"/patches/"+strings.Repeat("ef", 32), nil); code != 404 {
		t.Fatalf("another source's patch: HTTP %d", code)
	}
	o := r.open(releases.Options{PublicKey: r.pub})
	testwait.Until(t, "another handle finds the patch", func() bool { _, ok := o.Patch(m.Version, m.Platform, from); return ok })
	for i := 1; i < releases.MaxPatchesPerRelease; i++ {
		b, pm := Patch(t, r.priv, m, strings.Repeat(hex.EncodeToString([]byte{byte(i)}), 32), 1000)
		if _, err := s.PutPatch(context.Background(), pm, bytes.NewReader(b), "otto"); err != nil {
			t.Fatal(err)
		}
	}
	b9, pm9 := Patch(t, r.priv, m, strings.Repeat("99", 32), 1000)
	_, err := s.PutPatch(context.Background(), pm9, bytes.NewReader(b9), "otto")
	wantRefusal(t, "a patch past the bound", err, 507, "patches, its most")
	if err := s.Delete(context.Background(), m.Version, m.Platform, "otto"); err != nil {
		t.Fatal(err)
	}
	if l := s.Patches("", ""); len(l) != 0 {
		t.Fatalf("after the release's delete: %d patches", len(l))
	}
	if used, _, n, _ := s.Usage(); used != 0 || n != 0 {
		t.Fatalf("after delete: %d bytes in %d releases", used, n)
	}
	if l := r.open(releases.Options{}).Patches("", ""); len(l) != 0 {
		t.Fatalf("a handle opened after the delete lists %+v", l)
	}
}
