package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/release"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/childtest"
)

// uploadRelease signs bin as version with the key in keyDir and stores
// it on the server (PUT /api/releases/...).
func uploadRelease(t *testing.T, base, keyDir, bin, version string) {
	t.Helper()
	manifest := signed(t, keyDir, bin, version, release.CurrentPlatform())
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/api/releases/"+version+"/"+release.CurrentPlatform(), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Release-Manifest", base64.StdEncoding.EncodeToString([]byte(manifest)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upload %s: HTTP %d %s", version, resp.StatusCode, b)
	}
}

// rolloutView is what the test reads of GET .../rollouts/{id}.
type rolloutView struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Paused *struct {
		PeerID string `json:"peer_id"`
		State  string `json:"state"`
		Reason string `json:"reason"`
	} `json:"paused"`
	Devices []struct {
		PeerID  string `json:"peer_id"`
		Wave    int    `json:"wave"`
		State   string `json:"state"`
		Reason  string `json:"reason"`
		Running string `json:"running"`
	} `json:"devices"`
}

func (r *rolloutView) device(peer string) (state, running, reason string) {
	for _, d := range r.Devices {
		if d.PeerID == peer {
			return d.State, d.Running, d.Reason
		}
	}
	return "", "", ""
}

func postJSON(t *testing.T, url string, body any, want int, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("POST %s: HTTP %d %s, want %d", url, resp.StatusCode, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("POST %s: %v in %s", url, err, data)
		}
	}
}

// Issue 28's rollout with real binaries: two real termd v1.0.0 under
// their supervisors (kiosk-a and kiosk-b, both site=lobby), a real
// termserver holding signed releases.
//   - v1.1.0 to site=lobby with one canary: kiosk-a first; kiosk-b only
//     once kiosk-a runs v1.1.0 after its health gate; then the rollout
//     is done and the registry shows both on v1.1.0.
//   - v1.2.0, a release that exits at start: the canary's supervisor
//     rolls it back by itself, the rollout pauses naming kiosk-a and the
//     supervisor's reason, kiosk-b is never sent it; abort.
func TestTermdRolloutEndToEnd(t *testing.T) {
	t.Parallel()
	if childtest.Emulator() != "" {
		t.Skip("under qemu-user (make test-arm) the ARM supervisor execs its ARM worker directly, which qemu-user does not follow; TestSuperviseARMv6 (device/update) runs the ARMv6 supervisor and releases under qemu-arm-static from the native run")
	}
	srv := servertest.Start(t, func(cfg *config.Config) {
		ch := cfg.Channels["terminal-dev"]
		ch.Config.HeartbeatSeconds = 1
		cfg.Channels["terminal-dev"] = ch
	})
	base := "http://" + srv.Addr
	bins := t.TempDir()
	v1, v2 := buildTermd(t, bins, ".", "v1.0.0"), buildTermd(t, bins, ".", "v1.1.0")
	broken := buildTermd(t, bins, "../../device/update/testdata/exitatstart", "")
	keys := t.TempDir()
	if _, err := release.GenerateKey(keys); err != nil {
		t.Fatal(err)
	}
	uploadRelease(t, base, keys, v2, "v1.1.0")
	uploadRelease(t, base, keys, broken, "v1.2.0")

	type kiosk struct {
		dir        string
		tm         func(args ...string) string
		waitScreen func(string) string
	}
	kiosks := map[string]*kiosk{}
	for _, peer := range []string{"kiosk-a", "kiosk-b"} {
		dir := t.TempDir()
		exe := filepath.Join(dir, "termd")
		installExe(t, exe, v1)
		cmd := fmt.Sprintf("%s --supervise --server %s --board sim --state-dir %s --peer-id %s --tag site=lobby --log-file %s --release-key %s",
			exe, srv.URL, filepath.Join(dir, "state"), peer, filepath.Join(dir, "termd.log"), filepath.Join(keys, release.PublicKeyFile))
		k := &kiosk{dir: dir}
		k.tm, k.waitScreen = termdInTmux(t, cmd)
		kiosks[peer] = k
	}
	defer func() {
		if t.Failed() {
			for peer, k := range kiosks {
				l, _ := os.ReadFile(filepath.Join(k.dir, "termd.log"))
				t.Logf("%s termd.log:\n%s", peer, l)
			}
		}
	}()
	peerVersion := func(peer string) string {
		var p struct {
			Version string `json:"version"`
			Online  bool   `json:"online"`
		}
		resp, err := http.Get(base + "/api/channels/terminal-dev/peers/" + peer)
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
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		testwait.Until(t, what, ok)
	}
	waitFor("both kiosks online on v1.0.0", func() bool { return peerVersion("kiosk-a") == "v1.0.0" && peerVersion("kiosk-b") == "v1.0.0" })

	rollouts := base + "/api/channels/terminal-dev/rollouts"
	get := func(id string) *rolloutView {
		var r rolloutView
		if code := getJSONTo(t, rollouts+"/"+id, &r); code != 200 {
			t.Fatalf("GET rollout %s: %d", id, code)
		}
		return &r
	}
	var r rolloutView
	start := time.Now()
	postJSON(t, rollouts, map[string]any{"version": "v1.1.0", "tag": "site=lobby", "canary": 1, "gate_seconds": 60}, http.StatusCreated, &r)
	// kiosk-b waits while the canary is on its way.
	sawBWaiting := false
	waitFor("the canary kiosk-a on v1.1.0", func() bool {
		cur := get(r.ID)
		st, _, _ := cur.device("kiosk-b")
		if a, _, _ := cur.device("kiosk-a"); a != "installed" {
			if st != "pending" {
				t.Fatalf("kiosk-b is %q while the canary is %q, want pending", st, a)
			}
			sawBWaiting = true
			return false
		}
		return peerVersion("kiosk-a") == "v1.1.0"
	})
	if !sawBWaiting {
		t.Error("never saw kiosk-b waiting behind the canary")
	}
	waitFor("the rollout done", func() bool { return get(r.ID).State == "done" })
	t.Logf("v1.1.0 on both real termd: %v from the rollout's start", time.Since(start).Round(time.Millisecond))
	waitFor("the registry shows both on v1.1.0", func() bool { return peerVersion("kiosk-a") == "v1.1.0" && peerVersion("kiosk-b") == "v1.1.0" })

	// A broken release: rolled back on the canary, the rollout paused.
	start = time.Now()
	postJSON(t, rollouts, map[string]any{"version": "v1.2.0", "tag": "site=lobby", "canary": 1}, http.StatusCreated, &r)
	waitFor("the rollout paused", func() bool { return get(r.ID).State == "paused" })
	t.Logf("v1.2.0 rolled back on the canary and the rollout paused: %v from the rollout's start", time.Since(start).Round(time.Millisecond))
	cur := get(r.ID)
	if p := cur.Paused; p == nil || p.PeerID != "kiosk-a" || p.State != "rolled_back" || !strings.Contains(p.Reason, "exited (status 3) before its first heartbeat") {
		t.Fatalf("paused: %+v, want kiosk-a rolled back with the supervisor's reason", cur.Paused)
	}
	if st, _, _ := cur.device("kiosk-b"); st != "pending" {
		t.Fatalf("kiosk-b is %q in the paused rollout, want pending (never sent)", st)
	}
	waitFor("kiosk-a back on v1.1.0", func() bool { return peerVersion("kiosk-a") == "v1.1.0" })
	kiosks["kiosk-a"].waitScreen("rolled back")
	postJSON(t, rollouts+"/"+r.ID+"/abort", map[string]any{}, http.StatusOK, nil)
	if st := get(r.ID).State; st != "aborted" {
		t.Fatalf("after abort: %q", st)
	}
	if v := peerVersion("kiosk-b"); v != "v1.1.0" {
		t.Fatalf("kiosk-b runs %q, want v1.1.0", v)
	}
	for _, k := range kiosks {
		k.tm("send-keys", "C-d")
		k.waitScreen("EXIT=0")
	}
}

// getJSONTo GETs url into v and returns the status.
func getJSONTo(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, b)
		}
	}
	return resp.StatusCode
}
