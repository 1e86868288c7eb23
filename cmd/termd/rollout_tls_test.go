package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"termlink/internal/testpki"
	"termlink/internal/testwait"
	"termlink/release"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/childtest"
)

// termd is built without net/http's HTTP/2 (-tags nethttpomithttp2, as
// make pi ships it): a rollout from a termserver serving https:// and
// wss:// reaches a real supervised termd v1.0.0, which downloads v1.1.0
// over HTTP/1.1 with TLS, restarts into it and reports it installed.
// termserver offers HTTP/1.1 only by ALPN (server/tlsconf), even to a
// client that asks for HTTP/2, as the test checks first: termd never
// meets a server that needs HTTP/2.
func TestTermdRolloutOverTLS(t *testing.T) {
	t.Parallel()
	if childtest.Emulator() != "" {
		t.Skip("under qemu-user (make test-arm) the ARM supervisor execs its ARM worker directly, which qemu-user does not follow")
	}
	pki := t.TempDir()
	ca := testpki.NewCA(t, pki, "lab")
	cert := ca.Server(t, "server")
	srv := servertest.Start(t, func(cfg *config.Config) {
		cfg.TLS = config.TLS{CertFile: cert.CertFile, KeyFile: cert.KeyFile}
		ch := cfg.Channels["terminal-dev"]
		ch.Config.HeartbeatSeconds = 1
		cfg.Channels["terminal-dev"] = ch
	})
	pem, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	base := "https://" + srv.Addr
	do := func(method, url string, body []byte, header map[string]string, want int, out any) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, url, bytes.NewReader(body))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: HTTP %d %s, want %d", method, url, resp.StatusCode, data, want)
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatalf("%s %s: %v in %s", method, url, err, data)
			}
		}
		return resp
	}
	if resp := do(http.MethodGet, base+"/healthz", nil, nil, http.StatusOK, nil); resp.Proto != "HTTP/1.1" {
		t.Errorf("termserver over TLS answered an HTTP/2-capable client in %s, want HTTP/1.1: termd (no HTTP/2) still speaks HTTP/1.1 to it, but say so in Makefile's TERMD_TAGS", resp.Proto)
	}

	bins, keys := t.TempDir(), t.TempDir()
	v1, v2 := buildTermd(t, bins, ".", "v1.0.0"), buildTermd(t, bins, ".", "v1.1.0")
	if _, err := release.GenerateKey(keys); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(v2)
	if err != nil {
		t.Fatal(err)
	}
	manifest := signed(t, keys, v2, "v1.1.0", release.CurrentPlatform())
	do(http.MethodPut, base+"/api/releases/v1.1.0/"+release.CurrentPlatform(), body, map[string]string{
		"Content-Type": "application/octet-stream", "X-Release-Manifest": base64.StdEncoding.EncodeToString([]byte(manifest)),
	}, http.StatusCreated, nil)

	dir := t.TempDir()
	exe := filepath.Join(dir, "termd")
	installExe(t, exe, v1)
	_, waitScreen := termdInTmux(t, fmt.Sprintf("%s --supervise --server %s --board sim --state-dir %s --peer-id kiosk-t --tag site=tls --log-file %s --release-key %s --ca-file %s",
		exe, srv.URL, filepath.Join(dir, "state"), filepath.Join(dir, "termd.log"), filepath.Join(keys, release.PublicKeyFile), ca.File))
	defer func() {
		if t.Failed() {
			l, _ := os.ReadFile(filepath.Join(dir, "termd.log"))
			t.Logf("termd.log:\n%s", l)
		}
	}()
	version := func() string {
		var p struct {
			Version string `json:"version"`
			Online  bool   `json:"online"`
		}
		resp, err := hc.Get(base + "/api/channels/terminal-dev/peers/kiosk-t")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&p)
		if !p.Online {
			return ""
		}
		return p.Version
	}
	testwait.Until(t, "kiosk-t online on v1.0.0 over wss://", func() bool { return version() == "v1.0.0" })

	rollouts := base + "/api/channels/terminal-dev/rollouts"
	b, _ := json.Marshal(map[string]any{"version": "v1.1.0", "tag": "site=tls", "gate_seconds": 60})
	var r rolloutView
	do(http.MethodPost, rollouts, b, map[string]string{"Content-Type": "application/json"}, http.StatusCreated, &r)
	testwait.Until(t, "the rollout done", func() bool {
		var cur rolloutView
		do(http.MethodGet, rollouts+"/"+r.ID, nil, nil, http.StatusOK, &cur)
		if st, _, reason := cur.device("kiosk-t"); st == "failed" || st == "rolled_back" {
			t.Fatalf("kiosk-t: %s (%s)", st, reason)
		}
		return cur.State == "done"
	})
	testwait.Until(t, "kiosk-t on v1.1.0", func() bool { return version() == "v1.1.0" })
	waitScreen("online")
}
