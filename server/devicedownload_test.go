package server

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/internal/testpki"
	"termlink/release"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/throttle"
)

// putRelease stores a release of version for platform with body as its
// binary in ts's release store (as an upload would).
func putRelease(t *testing.T, s *Server, version, platform string, body []byte) *release.Manifest {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "termd")
	if err := os.WriteFile(path, body, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := release.Sign(priv, version, platform, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.releases.Put(context.Background(), m, bytes.NewReader(body), "test"); err != nil {
		t.Fatal(err)
	}
	return m
}

// download GETs url with the bearer token (none when "") and hdr.
func download(t *testing.T, url, token string, hdr map[string]string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b, resp.Header
}

// A device downloads a release with its channel token, not an admin
// token; refusals say what is wrong and are events of the channel.
func TestDeviceReleaseDownload(t *testing.T) {
	t.Parallel()
	tok := config.Tokens{ByPeer: map[string]string{"pi-1": "tok-pi-1"}}
	ts := startServer(t, func(c *config.Config) { withAdmin(t)(c); channelTokens(tok, false)(c) }, nil)
	bin := bytes.Repeat([]byte("termd-v2 "), 5000)
	m := putRelease(t, ts.Server, "v2.0.0", "linux/arm/6", bin)
	url := ts.http.URL + DeviceReleaseURL("terminal-dev", "v2.0.0", "linux/arm/6")

	code, got, _ := download(t, url, "tok-pi-1", nil)
	if code != 200 || !bytes.Equal(got, bin) {
		t.Fatalf("download with the device token: %d, %d bytes (want 200, %d)", code, len(got), len(bin))
	}
	code, got, _ = download(t, strings.TrimSuffix(url, "/binary")+"/manifest", "tok-pi-1", nil)
	if code != 200 || !bytes.Equal(got, m.Marshal()) {
		t.Fatalf("manifest: %d %s", code, got)
	}
	// A resumed download: Range, and If-Range with the binary's ETag.
	code, got, h := download(t, url, "tok-pi-1", map[string]string{"Range": "bytes=1000-", "If-Range": `"` + m.SHA256 + `"`})
	if code != http.StatusPartialContent || !bytes.Equal(got, bin[1000:]) {
		t.Fatalf("Range resume: %d, %d bytes, Content-Range %q", code, len(got), h.Get("Content-Range"))
	}

	refusals := []struct {
		name, url, token, want string
		status                 int
	}{
		{"no token", url, "", "no token", 401},
		{"wrong token", url, "tok-nope", "not valid for channel terminal-dev", 401},
		{"admin token is not a device's", url, operatorSecret, "not valid for channel terminal-dev", 401},
		{"unknown version", ts.http.URL + DeviceReleaseURL("terminal-dev", "v9.0.0", "linux/arm/6"), "tok-pi-1", "no release v9.0.0 for linux/arm/6", 404},
		{"unknown platform", ts.http.URL + DeviceReleaseURL("terminal-dev", "v2.0.0", "linux/amd64"), "tok-pi-1", "no release v2.0.0 for linux/amd64", 404},
		{"bad path", ts.http.URL + "/api/channels/terminal-dev/releases/v2.0.0/linux/arm/6/exe", "tok-pi-1", "want {os}/{arch}", 400},
		{"unknown channel", ts.http.URL + DeviceReleaseURL("nope", "v2.0.0", "linux/arm/6"), "tok-pi-1", `no channel "nope"`, 404},
	}
	for _, r := range refusals {
		code, body, _ := download(t, r.url, r.token, nil)
		var e struct{ Error string }
		if err := json.Unmarshal(body, &e); err != nil || code != r.status || !strings.Contains(e.Error, r.want) {
			t.Errorf("%s: %d %s, want %d with an error containing %q", r.name, code, body, r.status, r.want)
		}
	}
	n := 0
	for _, e := range ts.rt.Channels["terminal-dev"].Events.Recent(-1) {
		if e.Event == events.ReleaseDownloadRefused {
			n++
		}
	}
	// The unknown channel has no event log; the rest are events up to the
	// gate's burst for one network (TestDownloadRefusalFloodIsGated).
	if want := min(len(refusals)-1, throttle.DefaultBurst); n != want {
		t.Errorf("%d %s events, want %d", n, events.ReleaseDownloadRefused, want)
	}
}

// An open channel (no tokens, no enrollment) serves any device, as its
// WebSocket takes any.
func TestDeviceReleaseDownloadOpenChannel(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withAdmin(t), nil)
	bin := []byte("termd-v2")
	putRelease(t, ts.Server, "v2.0.0", "linux/amd64", bin)
	code, got, _ := download(t, ts.http.URL+DeviceReleaseURL("terminal-dev", "v2.0.0", "linux/amd64"), "", nil)
	if code != 200 || !bytes.Equal(got, bin) {
		t.Fatalf("open channel: %d %q", code, got)
	}
}

// On a mutual TLS channel a device downloads with its client
// certificate; without one, or with a denied one, it is refused as its
// WebSocket would be. The open channel on the same listener serves
// anyone.
func TestDeviceReleaseDownloadMutualTLS(t *testing.T) {
	t.Parallel()
	m := startMTLS(t)
	bin := []byte("termd v2 over mutual TLS")
	putRelease(t, m.Server, "v2.0.0", "linux/arm64", bin)
	get := func(channel string, leaf *testpki.Leaf) (int, []byte) {
		conf := &tls.Config{RootCAs: m.roots()}
		if leaf != nil {
			cert, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile)
			if err != nil {
				t.Fatal(err)
			}
			conf.Certificates = []tls.Certificate{cert}
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}, Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("https://" + m.addr + DeviceReleaseURL(channel, "v2.0.0", "linux/arm64"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := get("secure", m.uri); code != 200 || !bytes.Equal(b, bin) {
		t.Fatalf("with its certificate: %d %s", code, b)
	}
	if code, b := get("secure", nil); code != 401 || !strings.Contains(string(b), "no client certificate") {
		t.Fatalf("without a certificate: %d %s", code, b)
	}
	if code, b := get("secure", m.denied); code != 403 || !strings.Contains(string(b), "revoked") {
		t.Fatalf("with a denied certificate: %d %s", code, b)
	}
	if code, b := get("terminal-dev", nil); code != 200 || !bytes.Equal(b, bin) {
		t.Fatalf("the open channel: %d %s", code, b)
	}
}

// The auth scheme is case-insensitive (RFC 7235): a device that sends
// "bearer" downloads and connects as one that sends "Bearer" (the one
// parser, httpapi.Bearer, on every route).
func TestDeviceBearerSchemeAnyCase(t *testing.T) {
	t.Parallel()
	tok := config.Tokens{ByPeer: map[string]string{"pi-1": "tok-pi-1"}}
	ts := startServer(t, func(c *config.Config) { withAdmin(t)(c); channelTokens(tok, false)(c) }, nil)
	bin := []byte("termd-v2")
	putRelease(t, ts.Server, "v2.0.0", "linux/amd64", bin)
	url := ts.http.URL + DeviceReleaseURL("terminal-dev", "v2.0.0", "linux/amd64")
	for _, scheme := range []string{"bearer", "BEARER", "Bearer"} {
		code, got, _ := download(t, url, "", map[string]string{"Authorization": scheme + " tok-pi-1"})
		if code != 200 || !bytes.Equal(got, bin) {
			t.Errorf("download with %q: %d %q", scheme, code, got)
		}
		c := dial(t, ts.ws, http.Header{"Authorization": {scheme + " tok-pi-1"}})
		c.connect("pi-1")
		c.ws.Close()
	}
}
