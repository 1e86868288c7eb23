// Package releasestest is the contract every releases.Storage passes
// under the release store (releases.Store): the same uploads, listing,
// manifests, downloads (Range) and deletes, the same refusals (the
// signature, the size and SHA-256 of a body, a release stored twice),
// the same byte and count budgets, what another handle on the same
// storage sees, and that a damaged copy of a binary is never served.
// Package releases runs it on DirStorage, package cluster on its
// JetStream object store; what only one does (two nodes following each
// other live) each tests on its own.
package releasestest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"termlink/release"
	"termlink/server/releases"
)

// Harness is one storage under test.
type Harness struct {
	// Open returns a new handle on the storage (the directory opened
	// again, another node), its Store made with opt; the contract closes
	// what it opens.
	Open func(t *testing.T, opt releases.Options) *releases.Store
	// Tamper replaces the bytes the storage holds for a release's binary
	// with data, its record left as it is (a damaged or changed copy).
	Tamper func(t *testing.T, version, platform string, data []byte)
}

// NewStore returns a harness on a new, empty storage.
type NewStore func(t *testing.T) Harness

// Run runs the contract.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Lifecycle", func(t *testing.T) { lifecycle(t, newStore(t)) })
	t.Run("Refusals", func(t *testing.T) { refusals(t, newStore(t)) })
	t.Run("Budgets", func(t *testing.T) { budgets(t, newStore(t)) })
	t.Run("ConcurrentBudget", func(t *testing.T) { concurrent(t, newStore(t)) })
	t.Run("Damaged", func(t *testing.T) { damaged(t, newStore(t)) })
	t.Run("Patches", func(t *testing.T) { patches(t, newStore(t)) })
}

// Quiet is a logger that drops everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type rig struct {
	t    *testing.T
	h    Harness
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
}

func newRig(t *testing.T, h Harness) *rig {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, h: h, priv: priv, pub: pub}
}

func (r *rig) open(opt releases.Options) *releases.Store {
	r.t.Helper()
	if opt.Log == nil {
		opt.Log = Quiet
	}
	s := r.h.Open(r.t, opt)
	r.t.Cleanup(func() { _ = s.Close() })
	return s
}

// Binary is n random bytes signed by priv as version for platform.
func Binary(t *testing.T, priv ed25519.PrivateKey, version, platform string, n int) ([]byte, *release.Manifest) {
	t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	p := filepath.Join(t.TempDir(), "termd")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := release.Sign(priv, version, platform, p)
	if err != nil {
		t.Fatal(err)
	}
	return b, m
}

func status(err error) int {
	if e, ok := err.(*releases.Error); ok {
		return e.Status
	}
	return 0
}

func wantRefusal(t *testing.T, what string, err error, code int, words string) {
	t.Helper()
	if err == nil || status(err) != code || !strings.Contains(err.Error(), words) {
		t.Fatalf("%s: %v (status %d), want %d with %q", what, err, status(err), code, words)
	}
}

func get(t *testing.T, srv *httptest.Server, path string, hdr map[string]string) (int, []byte, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b, res.Header
}

func serve(t *testing.T, s *releases.Store) *httptest.Server {
	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func path(m *release.Manifest) string { return "/api/releases/" + m.Version + "/" + m.Platform }

// An upload through the API is listed, its manifest and binary served
// (whole and resumed), a second upload refused, a delete removes it; a
// handle opened afterwards sees what the first left.
func lifecycle(t *testing.T, h Harness) {
	r := newRig(t, h)
	s := r.open(releases.Options{PublicKey: r.pub})
	srv := serve(t, s)
	bin, m := Binary(t, r.priv, "1.2.0", "linux/arm/6", 300<<10)
	req, _ := http.NewRequest("PUT", srv.URL+path(m), bytes.NewReader(bin))
	req.Header.Set("Content-Type", releases.BinaryContentType)
	req.Header.Set(releases.ManifestHeader, base64.StdEncoding.EncodeToString(m.Marshal()))
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var e releases.Entry
	if err := json.Unmarshal(body, &e); res.StatusCode != 201 || err != nil || e.SHA256 != m.SHA256 || e.Size != m.Size || !e.SignatureChecked {
		t.Fatalf("upload: HTTP %d %s", res.StatusCode, body)
	}
	code, body, _ := get(t, srv, "/api/releases", nil)
	var list struct {
		Releases []releases.Entry `json:"releases"`
		Bytes    int64            `json:"bytes"`
		Count    int              `json:"count"`
	}
	if err := json.Unmarshal(body, &list); code != 200 || err != nil || len(list.Releases) != 1 || list.Releases[0].SHA256 != m.SHA256 ||
		list.Bytes != m.Size || list.Count != 1 {
		t.Fatalf("list: HTTP %d %s", code, body)
	}
	code, body, _ = get(t, srv, path(m)+"/manifest", nil)
	if got, err := release.ParseManifest(body); code != 200 || err != nil || *got != *m || got.Verify(r.pub) != nil {
		t.Fatalf("manifest: HTTP %d %s", code, body)
	}
	for i := 0; i < 2; i++ { // the second from what the first checked
		code, body, hdr := get(t, srv, path(m)+"/binary", nil)
		if code != 200 || !bytes.Equal(body, bin) || hdr.Get("X-Release-Sha256") != m.SHA256 {
			t.Fatalf("binary: HTTP %d, %d bytes", code, len(body))
		}
	}
	code, body, _ = get(t, srv, path(m)+"/binary", map[string]string{"Range": "bytes=200000-", "If-Range": `"` + m.SHA256 + `"`})
	if code != 206 || !bytes.Equal(body, bin[200000:]) {
		t.Fatalf("resumed binary: HTTP %d, %d bytes", code, len(body))
	}
	_, err = s.Put(context.Background(), m, bytes.NewReader(bin), "otto")
	wantRefusal(t, "second upload", err, 409, "never replaced")

	// Another handle sees it, and what the first deletes.
	other := r.open(releases.Options{PublicKey: r.pub})
	if l := other.List(""); len(l) != 1 || l[0].SHA256 != m.SHA256 || !l[0].SignatureChecked || !l[0].UploadedAt.Equal(e.UploadedAt) {
		t.Fatalf("another handle lists %+v, want %+v", l, e)
	}
	b, _, err := other.OpenBinary(context.Background(), m.Version, m.Platform)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(b)
	b.Close()
	if !bytes.Equal(got, bin) {
		t.Fatalf("another handle serves %d bytes", len(got))
	}
	if err := s.Delete(context.Background(), m.Version, m.Platform, "otto"); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, "second delete", s.Delete(context.Background(), m.Version, m.Platform, "otto"), 404, "no release 1.2.0 for linux/arm/6")
	if code, _, _ := get(t, srv, path(m)+"/binary", nil); code != 404 {
		t.Fatalf("binary after delete: HTTP %d", code)
	}
	if used, _, n, _ := s.Usage(); used != 0 || n != 0 {
		t.Fatalf("after delete: %d bytes in %d releases", used, n)
	}
	if l := r.open(releases.Options{}).List(""); len(l) != 0 {
		t.Fatalf("a handle opened after the delete lists %+v", l)
	}
	evs := ""
	for _, e := range s.Events().Recent(10) {
		evs += e.Event + " "
	}
	if !strings.Contains(evs, releases.EventUploaded) || !strings.Contains(evs, releases.EventDeleted) {
		t.Fatalf("events: %s", evs)
	}
}

// failingReader gives n bytes of b, then err.
type failingReader struct {
	b   []byte
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	k := copy(p, f.b[:min(len(f.b), f.n)])
	f.b, f.n = f.b[k:], f.n-k
	return k, nil
}

// Every refused upload leaves nothing, for this handle or another.
func refusals(t *testing.T, h Harness) {
	r := newRig(t, h)
	s := r.open(releases.Options{PublicKey: r.pub})
	ctx := context.Background()
	bin, m := Binary(t, r.priv, "2.0", "linux/amd64", 200<<10)
	other := append([]byte(nil), bin...)
	other[100] ^= 1
	forged := *m
	forged.SHA256 = strings.Repeat("ab", 32)
	_, wrongKey, _ := ed25519.GenerateKey(rand.Reader)
	_, mOther := Binary(t, wrongKey, "2.0", "linux/amd64", 10)
	for _, tc := range []struct {
		name  string
		m     *release.Manifest
		body  io.Reader
		code  int
		words string
	}{
		{"another binary", m, bytes.NewReader(other), 422, "sha256"},
		{"shorter", m, bytes.NewReader(bin[:len(bin)-1]), 422, "its manifest says 204800 (truncated"},
		{"longer", m, io.MultiReader(bytes.NewReader(bin), strings.NewReader("x")), 422, "longer than the 204800 bytes"},
		{"cut off", m, &failingReader{b: bin, n: 150 << 10, err: io.ErrUnexpectedEOF}, 400, "ended after 153600 of 204800 bytes"},
		{"forged manifest", &forged, bytes.NewReader(bin), 422, "releases.publicKeyFile"},
		{"another key", mOther, bytes.NewReader(bin), 422, "releases.publicKeyFile"},
	} {
		_, err := s.Put(ctx, tc.m, tc.body, "otto")
		wantRefusal(t, tc.name, err, tc.code, tc.words)
		if used, _, n, _ := s.Usage(); used != 0 || n != 0 {
			t.Fatalf("%s: %d bytes in %d releases kept", tc.name, used, n)
		}
	}
	if l := r.open(releases.Options{}).List(""); len(l) != 0 {
		t.Fatalf("refused uploads are listed by another handle: %+v", l)
	}
	if _, err := s.Put(ctx, m, bytes.NewReader(bin), "otto"); err != nil {
		t.Fatalf("the good binary after the refusals: %v", err)
	}
}

// The byte and count budgets refuse with the same words on every storage.
func budgets(t *testing.T, h Harness) {
	r := newRig(t, h)
	s := r.open(releases.Options{MaxBytes: 1 << 20, MaxReleases: 2})
	ctx := context.Background()
	put := func(v string, n int) error {
		b, m := Binary(t, r.priv, v, "linux/arm64", n)
		_, err := s.Put(ctx, m, bytes.NewReader(b), "otto")
		return err
	}
	wantRefusal(t, "larger than the budget", put("big", 1<<20+1), 413, "whole budget of 1048576 bytes")
	for _, v := range []string{"a1", "a2"} {
		if err := put(v, 400<<10); err != nil {
			t.Fatal(err)
		}
	}
	wantRefusal(t, "a third release", put("a3", 10), 507, "holds 2 releases, its most (config releases.maxReleases)")
	if err := s.Delete(ctx, "a2", "linux/arm64", "otto"); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, "past the bytes", put("a4", 700<<10), 507, "has 409600 of 1048576 bytes in use: 716800 more do not fit (config releases.maxBytes)")
	if err := put("a5", 600<<10); err != nil {
		t.Fatalf("within the budget: %v", err)
	}
	// Another handle counts what is stored.
	o := r.open(releases.Options{MaxBytes: 1 << 20, MaxReleases: 3})
	if used, _, n, _ := o.Usage(); used != 1000<<10 || n != 2 {
		t.Fatalf("another handle: %d bytes in %d releases", used, n)
	}
	b, m := Binary(t, r.priv, "a6", "linux/arm64", 100<<10)
	_, err := o.Put(ctx, m, bytes.NewReader(b), "otto")
	wantRefusal(t, "past the bytes on another handle", err, 507, "config releases.maxBytes")
}

// Uploads at once share the budget: of four that fit two at a time, two
// are stored.
func concurrent(t *testing.T, h Harness) {
	r := newRig(t, h)
	s := r.open(releases.Options{MaxBytes: 1 << 20})
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i, v := range []string{"c1", "c2", "c3", "c4"} {
		b, m := Binary(t, r.priv, v, "linux/amd64", 400<<10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Put(context.Background(), m, bytes.NewReader(b), "otto")
		}()
	}
	wg.Wait()
	stored := 0
	for _, err := range errs {
		switch {
		case err == nil:
			stored++
		case status(err) != 507:
			t.Fatalf("errors %v", errs)
		}
	}
	if used, _, n, _ := s.Usage(); stored != 2 || n != 2 || used != 800<<10 {
		t.Fatalf("errors %v: %d releases, %d bytes", errs, n, used)
	}
}

// A copy changed in the storage is never served: one of the same size
// is refused at download naming its sha256; one longer than its
// manifest is not listed by a handle opened afterwards and not served by
// the one that listed it.
func damaged(t *testing.T, h Harness) {
	r := newRig(t, h)
	s := r.open(releases.Options{})
	srv := serve(t, s)
	ctx := context.Background()
	bin, m := Binary(t, r.priv, "3.0", "linux/amd64", 100<<10)
	if _, err := s.Put(ctx, m, bytes.NewReader(bin), "otto"); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), bin...)
	bad[5000] ^= 0xff
	h.Tamper(t, m.Version, m.Platform, bad)
	code, body, _ := get(t, srv, path(m)+"/binary", nil)
	if code != 500 || !strings.Contains(string(body), "stored release 3.0 for linux/amd64 refused: its binary's sha256 is") {
		t.Fatalf("a changed copy: HTTP %d %.300s", code, body)
	}
	_, _, err := s.OpenBinary(ctx, m.Version, m.Platform)
	wantRefusal(t, "a changed copy", err, 500, "the store's copy is damaged")

	bin2, m2 := Binary(t, r.priv, "3.1", "linux/amd64", 100<<10)
	if _, err := s.Put(ctx, m2, bytes.NewReader(bin2), "otto"); err != nil {
		t.Fatal(err)
	}
	h.Tamper(t, m2.Version, m2.Platform, append(append([]byte(nil), bin2...), make([]byte, 4096)...))
	if code, body, _ := get(t, srv, path(m2)+"/binary", nil); code == 200 || bytes.Equal(body, bin2) {
		t.Fatalf("an oversized copy: HTTP %d %.300s", code, body)
	}
	for _, e := range r.open(releases.Options{}).List("") {
		if e.Version == "3.1" {
			t.Fatalf("an oversized copy is listed by a new handle: %+v", e)
		}
	}
}
