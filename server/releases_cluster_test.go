package server

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"termlink/release"
	"termlink/server/config"
	"termlink/server/releases"
)

// releaseCall makes an operator's request on ts's release API.
func releaseCall(t *testing.T, ts *testServer, method, path string, hdr map[string]string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.http.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+operatorSecret)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// A release uploaded through one node is listed and downloaded (by an
// operator, and by a device on the devices' route) through another,
// byte for byte; deleted through that other, it is gone from the first
// (issue 39).
func TestClusterReleasesFromAnyNode(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	keys := t.TempDir()
	if _, err := release.GenerateKey(keys); err != nil {
		t.Fatal(err)
	}
	priv, err := release.LoadPrivateKey(filepath.Join(keys, release.PrivateKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(keys, release.PublicKeyFile)
	node := func(name string) *testServer {
		cfg := config.Default()
		cfg.Workspace = t.TempDir()
		withAdmin(t)(cfg)
		cfg.Releases.PublicKeyFile = keyFile
		cfg.Cluster = config.Cluster{NATS: []string{url}, Role: config.RoleEdge, Name: name, Partitions: 1, Replicas: 1,
			AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
		return serve(t, cfg, Options{})
	}
	a, b := node("edge-a"), node("edge-b")

	bin := make([]byte, 700<<10)
	_, _ = rand.Read(bin)
	p := filepath.Join(t.TempDir(), "termd")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := release.Sign(priv, "v3.0.0", "linux/arm/6", p)
	if err != nil {
		t.Fatal(err)
	}
	rpath := "/api/releases/v3.0.0/linux/arm/6"
	code, body := releaseCall(t, a, "PUT", rpath, map[string]string{"Content-Type": releases.BinaryContentType,
		releases.ManifestHeader: base64.StdEncoding.EncodeToString(m.Marshal())}, bin)
	if code != 201 {
		t.Fatalf("upload through edge-a: %d %s", code, body)
	}

	var list struct {
		Releases []releases.Entry `json:"releases"`
	}
	waitUntil(t, "edge-b lists the release", func() bool {
		code, body := releaseCall(t, b, "GET", "/api/releases", nil, nil)
		return code == 200 && json.Unmarshal(body, &list) == nil && len(list.Releases) == 1
	})
	if e := list.Releases[0]; e.SHA256 != m.SHA256 || e.Size != m.Size || e.UploadedBy != "otto" || !e.SignatureChecked {
		t.Fatalf("edge-b lists %+v", e)
	}
	if code, body := releaseCall(t, b, "GET", rpath+"/binary", nil, nil); code != 200 || !bytes.Equal(body, bin) {
		t.Fatalf("operator download through edge-b: %d, %d bytes", code, len(body))
	}
	code, got, hdr := download(t, b.http.URL+DeviceReleaseURL("terminal-dev", "v3.0.0", "linux/arm/6"), "", nil)
	if code != 200 || !bytes.Equal(got, bin) || hdr.Get("X-Release-Sha256") != m.SHA256 {
		t.Fatalf("device download through edge-b: %d, %d bytes", code, len(got))
	}
	code, got, _ = download(t, b.http.URL+DeviceReleaseURL("terminal-dev", "v3.0.0", "linux/arm/6"), "", map[string]string{"Range": "bytes=500000-"})
	if code != 206 || !bytes.Equal(got, bin[500000:]) {
		t.Fatalf("resumed device download through edge-b: %d, %d bytes", code, len(got))
	}

	if code, body := releaseCall(t, b, "DELETE", rpath, map[string]string{"Content-Type": "application/json"}, nil); code != 200 {
		t.Fatalf("delete through edge-b: %d %s", code, body)
	}
	waitUntil(t, "edge-a forgets the release", func() bool {
		code, body := releaseCall(t, a, "GET", "/api/releases", nil, nil)
		return code == 200 && json.Unmarshal(body, &list) == nil && len(list.Releases) == 0
	})
	if code, _, _ := download(t, a.http.URL+DeviceReleaseURL("terminal-dev", "v3.0.0", "linux/arm/6"), "", nil); code != 404 {
		t.Fatalf("device download through edge-a after the delete: %d", code)
	}
}
