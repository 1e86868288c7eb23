package releases

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/release"
	"termlink/server/config"
	"termlink/server/guard"
)

const (
	operatorSecret = "op-secret-0123456789abcdef"
	viewerSecret   = "viewer-secret-0123456789abcdef"
)

type fixture struct {
	t     *testing.T
	store *Store
	srv   *httptest.Server
	dir   string
	priv  ed25519.PrivateKey
	pub   ed25519.PublicKey
}

// newFixture runs the store's routes behind the real operator guard (a
// viewer and an operator token) on a real HTTP server.
func newFixture(t *testing.T, mutate func(*Options)) *fixture {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "releases")
	opt := Options{Dir: dir, NoSync: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mutate != nil {
		mutate(&opt)
	}
	st, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := config.NewAdminToken(viewerSecret, config.RoleViewer, "vera")
	o, _ := config.NewAdminToken(operatorSecret, config.RoleOperator, "otto")
	g := guard.New(guard.Options{Admin: config.Admin{Tokens: []config.AdminToken{v, o}}, RawBodyRoute: RawBodyRoute,
		MaxOperatorBody: 64 << 10, MaxDeviceBody: 64 << 10, Log: opt.Log})
	mux := http.NewServeMux()
	st.Routes(mux)
	srv := httptest.NewServer(g.Wrap(mux))
	t.Cleanup(srv.Close)
	return &fixture{t: t, store: st, srv: srv, dir: dir, priv: priv, pub: pub}
}

// binary writes n random bytes and signs them as version for platform.
func (f *fixture) binary(version, platform string, n int) ([]byte, *release.Manifest) {
	f.t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	p := filepath.Join(f.t.TempDir(), "termd")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		f.t.Fatal(err)
	}
	m, err := release.Sign(f.priv, version, platform, p)
	if err != nil {
		f.t.Fatal(err)
	}
	return b, m
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) errMsg() string {
	var e struct{ Error string }
	_ = json.Unmarshal(r.body, &e)
	return e.Error
}

func (f *fixture) do(method, path, token string, hdr map[string]string, body []byte) resp {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}
}

func manifestHeader(m *release.Manifest) string {
	return base64.StdEncoding.EncodeToString(m.Marshal())
}

func (f *fixture) upload(path string, m *release.Manifest, body []byte, token string) resp {
	f.t.Helper()
	return f.do("PUT", path, token, map[string]string{"Content-Type": BinaryContentType, ManifestHeader: manifestHeader(m)}, body)
}

func releasePath(m *release.Manifest) string { return "/api/releases/" + m.Version + "/" + m.Platform }

// files lists every file under the store's directory.
func (f *fixture) files() []string {
	var out []string
	_ = filepath.WalkDir(f.dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, f.dir+"/"))
		}
		return nil
	})
	return out
}

// assertEmpty checks that nothing is stored, on disk or in the budget.
func (f *fixture) assertEmpty(what string) {
	f.t.Helper()
	if files := f.files(); len(files) != 0 {
		f.t.Errorf("%s: files left in the store: %v", what, files)
	}
	if used, _, n, _ := f.store.Usage(); used != 0 || n != 0 {
		f.t.Errorf("%s: store holds %d bytes in %d releases", what, used, n)
	}
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	if f.store.reserved != 0 || len(f.store.inflight) != 0 {
		f.t.Errorf("%s: reservations left: %d bytes, %v", what, f.store.reserved, f.store.inflight)
	}
}

func TestUploadListDownloadDelete(t *testing.T) {
	f := newFixture(t, func(o *Options) {})
	bin, m := f.binary("1.2.0", "linux/arm/6", 200<<10)
	r := f.upload(releasePath(m), m, bin, operatorSecret)
	if r.status != http.StatusCreated {
		t.Fatalf("upload: HTTP %d %s", r.status, r.body)
	}
	var e Entry
	if err := json.Unmarshal(r.body, &e); err != nil || e.Version != "1.2.0" || e.Platform != "linux/arm/6" || e.Size != int64(len(bin)) ||
		e.SHA256 != m.SHA256 || e.UploadedBy != "otto" || e.SignatureChecked {
		t.Fatalf("upload answer %s (%v)", r.body, err)
	}
	// Listed, for a viewer too.
	r = f.do("GET", "/api/releases", viewerSecret, nil, nil)
	var list struct {
		Releases []Entry `json:"releases"`
		Bytes    int64   `json:"bytes"`
		Count    int     `json:"count"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 || len(list.Releases) != 1 || list.Releases[0].SHA256 != m.SHA256 ||
		list.Bytes != int64(len(bin)) || list.Count != 1 {
		t.Fatalf("list: HTTP %d %s", r.status, r.body)
	}
	if r = f.do("GET", "/api/releases?version=9.9", viewerSecret, nil, nil); !strings.Contains(string(r.body), `"releases": []`) {
		t.Fatalf("list of another version: %s", r.body)
	}
	// The manifest, as signed: it verifies.
	r = f.do("GET", releasePath(m)+"/manifest", viewerSecret, nil, nil)
	got, err := release.ParseManifest(r.body)
	if err != nil || *got != *m || got.Verify(f.pub) != nil {
		t.Fatalf("manifest: HTTP %d %s (%v)", r.status, r.body, err)
	}
	// The binary, whole and resumed.
	r = f.do("GET", releasePath(m)+"/binary", viewerSecret, nil, nil)
	if r.status != 200 || !bytes.Equal(r.body, bin) || r.header.Get("X-Release-Sha256") != m.SHA256 || r.header.Get("Accept-Ranges") != "bytes" {
		t.Fatalf("binary: HTTP %d, %d bytes, headers %v", r.status, len(r.body), r.header)
	}
	etag := r.header.Get("ETag")
	r = f.do("GET", releasePath(m)+"/binary", viewerSecret, map[string]string{"Range": "bytes=150000-", "If-Range": etag}, nil)
	if r.status != http.StatusPartialContent || !bytes.Equal(r.body, bin[150000:]) {
		t.Fatalf("resumed binary: HTTP %d, %d bytes", r.status, len(r.body))
	}
	// A resume against another binary (its ETag) gets all of it.
	r = f.do("GET", releasePath(m)+"/binary", viewerSecret, map[string]string{"Range": "bytes=150000-", "If-Range": `"0000"`}, nil)
	if r.status != 200 || !bytes.Equal(r.body, bin) {
		t.Fatalf("resume with a stale ETag: HTTP %d, %d bytes", r.status, len(r.body))
	}
	// Uploading it again is refused: a release is never replaced.
	if r = f.upload(releasePath(m), m, bin, operatorSecret); r.status != http.StatusConflict || !strings.Contains(r.errMsg(), "never replaced") {
		t.Fatalf("second upload: HTTP %d %s", r.status, r.body)
	}
	// A viewer may not delete; the operator may.
	if r = f.do("DELETE", releasePath(m), viewerSecret, map[string]string{"Content-Type": "application/json"}, nil); r.status != http.StatusForbidden {
		t.Fatalf("viewer delete: HTTP %d %s", r.status, r.body)
	}
	if r = f.do("DELETE", releasePath(m), operatorSecret, map[string]string{"Content-Type": "application/json"}, nil); r.status != 200 {
		t.Fatalf("delete: HTTP %d %s", r.status, r.body)
	}
	if r = f.do("GET", releasePath(m)+"/binary", viewerSecret, nil, nil); r.status != http.StatusNotFound {
		t.Fatalf("binary after delete: HTTP %d", r.status)
	}
	if r = f.do("DELETE", releasePath(m), operatorSecret, map[string]string{"Content-Type": "application/json"}, nil); r.status != http.StatusNotFound {
		t.Fatalf("second delete: HTTP %d %s", r.status, r.body)
	}
	f.assertEmpty("after delete")
	// Both are events.
	r = f.do("GET", "/api/releases/events", viewerSecret, nil, nil)
	for _, ev := range []string{EventUploaded, EventDeleted, EventRefused} {
		if !strings.Contains(string(r.body), ev) {
			t.Errorf("events lack %s: %s", ev, r.body)
		}
	}
}

// A store reopened finds its releases; what an interrupted upload left
// is removed.
func TestReopen(t *testing.T) {
	f := newFixture(t, nil)
	bin, m := f.binary("2.0", "linux/amd64", 5000)
	if r := f.upload(releasePath(m), m, bin, operatorSecret); r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	left := filepath.Join(f.dir, incomingDir, "up-123", binaryFile)
	_ = os.MkdirAll(filepath.Dir(left), 0o755)
	_ = os.WriteFile(left, []byte("half"), 0o644)
	st, err := Open(Options{Dir: f.dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if l := st.List(""); len(l) != 1 || l[0].SHA256 != m.SHA256 || l[0].UploadedBy != "otto" {
		t.Fatalf("reopened: %+v", l)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("unfinished upload left after reopening: %v", err)
	}
	if used, _, _, _ := st.Usage(); used != 5000 {
		t.Fatalf("reopened store uses %d bytes", used)
	}
}

func TestUploadRefusals(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxBytes = 100 << 10; o.MaxReleases = 2 })
	ok := func(v string) ([]byte, *release.Manifest) { return f.binary(v, "linux/arm64", 10<<10) }
	bin, m := ok("1.0")
	other := append([]byte(nil), bin...)
	other[5] ^= 1
	wrongPath := *m
	big, bigM := f.binary("big", "linux/arm64", 101<<10)
	jsonHdr := map[string]string{"Content-Type": "application/json", ManifestHeader: manifestHeader(m)}
	for _, tc := range []struct {
		name   string
		path   string
		token  string
		hdr    map[string]string
		body   []byte
		status int
		want   string
	}{
		{"another binary", releasePath(m), operatorSecret, nil, other, 422, "sha256"},
		{"shorter binary", releasePath(m), operatorSecret, nil, bin[:len(bin)-1], 422, "the body is 10239 bytes"},
		{"longer binary", releasePath(m), operatorSecret, nil, append(bin, 0), 422, "the body is 10241 bytes"},
		{"no token", releasePath(m), "", nil, bin, 401, "authorization required"},
		{"viewer", releasePath(m), viewerSecret, nil, bin, 403, "needs role operator"},
		{"json", releasePath(m), operatorSecret, jsonHdr, bin, 415, "application/octet-stream"},
		{"no manifest", releasePath(m), operatorSecret, map[string]string{ManifestHeader: ""}, bin, 400, "no X-Release-Manifest header"},
		{"manifest not base64", releasePath(m), operatorSecret, map[string]string{ManifestHeader: "%%%"}, bin, 400, "not base64"},
		{"manifest not json", releasePath(m), operatorSecret, map[string]string{ManifestHeader: "e30K"}, bin, 400, "release manifest"},
		{"path of another version", "/api/releases/1.1/linux/arm64", operatorSecret, nil, bin, 400, "the manifest is for 1.0 linux/arm64, the path says 1.1 linux/arm64"},
		{"path of another platform", "/api/releases/1.0/linux/arm/7", operatorSecret, nil, bin, 400, "the path says 1.0 linux/arm/7"},
		{"bad version in path", "/api/releases/.hidden/linux/arm64", operatorSecret, nil, bin, 400, "version \".hidden\""},
		{"bad platform in path", "/api/releases/1.0/Linux/arm64", operatorSecret, nil, bin, 400, "platform \"Linux/arm64\""},
		{"platform too deep", "/api/releases/1.0/linux/arm/6/x", operatorSecret, nil, bin, 400, "platform"},
		{"larger than the budget", releasePath(bigM), operatorSecret, map[string]string{ManifestHeader: manifestHeader(bigM)}, big, 413, "whole budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"Content-Type": BinaryContentType, ManifestHeader: manifestHeader(m)}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			r := f.do("PUT", tc.path, tc.token, hdr, tc.body)
			if r.status != tc.status || !strings.Contains(r.errMsg(), tc.want) {
				t.Fatalf("HTTP %d %s, want %d with %q", r.status, r.body, tc.status, tc.want)
			}
			f.assertEmpty(tc.name)
		})
	}
	_ = wrongPath

	// The size and the sum are checked while streaming, also without a
	// Content-Length (chunked).
	req, _ := http.NewRequest("PUT", f.srv.URL+releasePath(m), io.MultiReader(bytes.NewReader(other)))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+operatorSecret)
	req.Header.Set("Content-Type", BinaryContentType)
	req.Header.Set(ManifestHeader, manifestHeader(m))
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 422 || !strings.Contains(string(b), "sha256") {
		t.Fatalf("chunked other binary: HTTP %d %s", res.StatusCode, b)
	}
	f.assertEmpty("chunked")

	// Budgets: two releases fit the count, the third is refused; bytes
	// past the budget are refused.
	for _, v := range []string{"a1", "a2"} {
		b, m := f.binary(v, "linux/arm64", 40<<10)
		if r := f.upload(releasePath(m), m, b, operatorSecret); r.status != 201 {
			t.Fatalf("upload %s: HTTP %d %s", v, r.status, r.body)
		}
	}
	b3, m3 := ok("a3")
	if r := f.upload(releasePath(m3), m3, b3, operatorSecret); r.status != http.StatusInsufficientStorage || !strings.Contains(r.errMsg(), "maxReleases") {
		t.Fatalf("third release: HTTP %d %s", r.status, r.body)
	}
	if r := f.do("DELETE", "/api/releases/a2/linux/arm64", operatorSecret, map[string]string{"Content-Type": "application/json"}, nil); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	b4, m4 := f.binary("a4", "linux/arm64", 61<<10)
	if r := f.upload(releasePath(m4), m4, b4, operatorSecret); r.status != http.StatusInsufficientStorage || !strings.Contains(r.errMsg(), "maxBytes") {
		t.Fatalf("past the byte budget: HTTP %d %s", r.status, r.body)
	}
	if r := f.upload(releasePath(m3), m3, b3, operatorSecret); r.status != 201 {
		t.Fatalf("within the budget: HTTP %d %s", r.status, r.body)
	}
}

// With the release key configured, a manifest the key did not sign is
// refused before any of the binary is stored.
func TestBadSignature(t *testing.T) {
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	var keyed *fixture
	keyed = newFixture(t, nil)
	keyed.store.opt.PublicKey = keyed.pub
	bin, m := keyed.binary("3.0", "linux/amd64", 4096)
	forged := *m
	forged.SHA256 = strings.Repeat("ab", 32) // someone else's binary under this signature
	r := keyed.upload(releasePath(m), &forged, bin, operatorSecret)
	if r.status != 422 || !strings.Contains(r.errMsg(), "signature does not match") {
		t.Fatalf("forged manifest: HTTP %d %s", r.status, r.body)
	}
	keyed.assertEmpty("forged")
	keyed.store.opt.PublicKey = otherPub
	if r = keyed.upload(releasePath(m), m, bin, operatorSecret); r.status != 422 || !strings.Contains(r.errMsg(), "releases.publicKeyFile") {
		t.Fatalf("signed with another key: HTTP %d %s", r.status, r.body)
	}
	keyed.assertEmpty("other key")
	keyed.store.opt.PublicKey = keyed.pub
	if r = keyed.upload(releasePath(m), m, bin, operatorSecret); r.status != 201 || !strings.Contains(string(r.body), `"signature_checked": true`) {
		t.Fatalf("good signature: HTTP %d %s", r.status, r.body)
	}
}

// An upload cut off mid-body leaves nothing, and the server says why.
func TestTruncatedUpload(t *testing.T) {
	f := newFixture(t, nil)
	bin, m := f.binary("4.0", "linux/arm/6", 64<<10)
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\n%s: %s\r\nContent-Length: %d\r\n\r\n",
		releasePath(m), f.srv.Listener.Addr(), operatorSecret, BinaryContentType, ManifestHeader, manifestHeader(m), len(bin))
	if _, err := conn.Write(bin[:len(bin)/2]); err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 400 || !strings.Contains(string(b), "ended after 32768 of 65536 bytes (truncated") {
		t.Fatalf("truncated upload: HTTP %d %s", res.StatusCode, b)
	}
	f.assertEmpty("truncated")
	if r := f.do("GET", "/api/releases/events", viewerSecret, nil, nil); !strings.Contains(string(r.body), "truncated") {
		t.Fatalf("no refusal event: %s", r.body)
	}
}

// Concurrent uploads share the byte budget: of two that each fit alone
// and not together, one is stored and the other refused, never both.
func TestConcurrentUploadsShareTheBudget(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxBytes = 1 << 20 })
	type up struct {
		bin []byte
		m   *release.Manifest
	}
	var ups []up
	for _, v := range []string{"c1", "c2", "c3", "c4"} {
		b, m := f.binary(v, "linux/amd64", 400<<10)
		ups = append(ups, up{b, m})
	}
	codes := make([]int, len(ups))
	var wg sync.WaitGroup
	for i, u := range ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = f.upload(releasePath(u.m), u.m, u.bin, operatorSecret).status
		}()
	}
	wg.Wait()
	stored := 0
	for _, c := range codes {
		switch c {
		case 201:
			stored++
		case 507:
		default:
			t.Fatalf("codes %v", codes)
		}
	}
	if used, _, n, _ := f.store.Usage(); stored != 2 || n != 2 || used != 800<<10 {
		t.Fatalf("codes %v: %d releases, %d bytes stored", codes, n, used)
	}
}

func FuzzParsePath(f *testing.F) {
	for _, s := range [][2]string{{"1.0", "linux/arm/6/binary"}, {"1.0", "linux/amd64/manifest"}, {"..", "linux/amd64"}, {"v", "a/b/c/d"}, {"v", "/binary"}} {
		f.Add(s[0], s[1], true)
		f.Add(s[0], s[1], false)
	}
	f.Fuzz(func(t *testing.T, version, rest string, want bool) {
		platform, part, err := ParsePath(version, rest, want)
		if err != nil {
			return
		}
		if release.CheckVersion(version) != nil || release.CheckPlatform(platform) != nil {
			t.Fatalf("accepted %q %q", version, rest)
		}
		if strings.Contains(version, "/") || strings.Contains(version, "..") && version[0] == '.' {
			t.Fatalf("version %q escapes its directory", version)
		}
		k := key(version, platform)
		if filepath.Clean(k) != k || strings.Count(k, "/") != 1 || strings.HasPrefix(k, ".") {
			t.Fatalf("key %q is not one directory below the store", k)
		}
		if want && (part != "manifest" && part != "binary" || platform+"/"+part != rest) {
			t.Fatalf("%q -> %q %q", rest, platform, part)
		}
		if !want && (part != "" || platform != rest) {
			t.Fatalf("%q -> %q %q", rest, platform, part)
		}
	})
}

func FuzzDecodeManifestHeader(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	p := filepath.Join(f.TempDir(), "b")
	_ = os.WriteFile(p, []byte("binary"), 0o644)
	m, _ := release.Sign(priv, "1.0", "linux/arm/6", p)
	f.Add(manifestHeader(m))
	f.Add("")
	f.Add("e30=")
	f.Fuzz(func(t *testing.T, v string) {
		m, err := DecodeManifestHeader(v)
		if err != nil {
			return
		}
		if release.CheckVersion(m.Version) != nil || release.CheckPlatform(m.Platform) != nil || m.Size <= 0 {
			t.Fatalf("accepted %q: %+v", v, m)
		}
	})
}

// An upload may take longer than the server's whole-request read timeout
// while it keeps moving (each read pushes the deadline Stall ahead); one
// that stops moving for Stall ends, leaving nothing.
func TestUploadStall(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Stall = 2 * time.Second })
	mux := http.NewServeMux()
	f.store.Routes(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux, ReadTimeout: 300 * time.Millisecond} // as termserver's limits, shortened
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	send := func(m *release.Manifest, bin []byte, pieces int, gap time.Duration) (int, string) {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n%s: %s\r\nContent-Length: %d\r\n\r\n",
			releasePath(m), BinaryContentType, ManifestHeader, manifestHeader(m), m.Size)
		step := len(bin) / pieces
		for i := 0; i < pieces; i++ {
			if _, err := conn.Write(bin[i*step : (i+1)*step]); err != nil {
				break
			}
			time.Sleep(gap)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	bin, m := f.binary("5.0", "linux/amd64", 10<<10)
	if code, body := send(m, bin, 10, 100*time.Millisecond); code != 201 {
		t.Fatalf("slow upload (1 s, read timeout 300 ms): HTTP %d %s", code, body)
	}
	bin, m = f.binary("5.2", "linux/amd64", 10<<10)
	code, body := send(m, bin[:len(bin)/2], 1, 0) // half of it, then nothing
	if code != 400 || !strings.Contains(body, "ended after 5120 of 10240 bytes") {
		t.Fatalf("stalled upload: HTTP %d %s", code, body)
	}
	if _, ok := f.store.Manifest("5.2", "linux/amd64"); ok {
		t.Fatal("stalled upload stored")
	}
	if files, _ := os.ReadDir(filepath.Join(f.dir, incomingDir)); len(files) != 0 {
		t.Fatalf("stalled upload left %v", files)
	}
}

// A download may take longer than the server's write timeout while the
// device keeps reading (each write pushes the deadline Stall ahead).
func TestSlowDownload(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Stall = 5 * time.Second })
	bin, m := f.binary("6.0", "linux/arm/6", 8<<20)
	if r := f.upload(releasePath(m), m, bin, operatorSecret); r.status != 201 {
		t.Fatalf("upload: HTTP %d %s", r.status, r.body)
	}
	mux := http.NewServeMux()
	f.store.Routes(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux, WriteTimeout: 300 * time.Millisecond} // as termserver's limits, shortened
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(32 << 10) // the kernel holds little: the server's writes wait for the reader
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(conn, "GET %s/binary HTTP/1.1\r\nHost: x\r\n\r\n", releasePath(m))
	br := bufio.NewReaderSize(conn, 4096)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	buf := make([]byte, 256<<10)
	start := time.Now()
	for {
		n, err := io.ReadFull(res.Body, buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
		time.Sleep(30 * time.Millisecond) // about 8 MiB/s: 1 s for the binary
	}
	if !bytes.Equal(got.Bytes(), bin) {
		t.Fatalf("slow download (%v, write timeout 300 ms): %d of %d bytes", time.Since(start), got.Len(), len(bin))
	}
}
