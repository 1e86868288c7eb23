package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
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

// uploadPatch makes the patch of from into to (release version, signed
// already on the server) with termrig release delta (built without the
// race detector: a 13 MB diff in this test's process took minutes),
// and stores it beside the release; damage, when set, changes the
// patch's bytes first (its manifest signed again as damaged: only
// applying it finds it wrong). It returns the patch's size.
func uploadPatch(t *testing.T, base, keyDir, bins, from, to, version string, damage func([]byte)) int64 {
	t.Helper()
	priv, err := release.LoadPrivateKey(filepath.Join(keyDir, release.PrivateKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	newPath := filepath.Join(dir, "termd")
	if err := os.WriteFile(newPath, mustRead(t, to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newPath+release.ManifestSuffix, []byte(signed(t, keyDir, newPath, version, release.CurrentPlatform())), 0o644); err != nil {
		t.Fatal(err)
	}
	termrig := buildTermd(t, bins, "../termrig", "")
	out, err := exec.Command(termrig, "release", "delta", "--from", from, "--to", newPath, "--key", filepath.Join(keyDir, release.PrivateKeyFile),
		"--out", filepath.Join(dir, "patch")).CombinedOutput()
	if err != nil {
		t.Fatalf("termrig release delta: %v\n%s", err, out)
	}
	t.Logf("termrig release delta: %s", bytes.TrimSpace(out))
	pb := mustRead(t, filepath.Join(dir, "patch"))
	pm, err := release.ParsePatchManifest(mustRead(t, filepath.Join(dir, "patch"+release.PatchManifestSuffix)))
	if err != nil {
		t.Fatal(err)
	}
	if damage != nil {
		damage(pb)
		ps := sha256.Sum256(pb)
		pm.PatchSHA256 = hex.EncodeToString(ps[:])
		pm.Sign(priv)
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/api/releases/"+version+"/"+release.CurrentPlatform(), bytes.NewReader(pb))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Release-Patch-Manifest", base64.StdEncoding.EncodeToString(pm.Marshal()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("patch upload %s: HTTP %d %s", version, resp.StatusCode, b)
	}
	return pm.PatchSize
}

// Issue 43's delta rollout with real binaries: two real termd under
// their supervisors, kiosk-a on v1.0.0 and kiosk-b on v1.0.1 (another
// binary), a real termserver holding v1.1.0 and its patch from v1.0.0.
//   - v1.1.0 to both: kiosk-a is sent the patch and installs it (its
//     reason says it was patched, and how many bytes it downloaded),
//     kiosk-b the whole binary (no patch note); the rollout is done.
//   - v1.2.0 with a corrupted patch from v1.1.0 (the binary both now
//     run): each device's patch fails to apply, it fetches the whole
//     binary by itself and says so; the rollout is done all the same.
func TestTermdDeltaRolloutEndToEnd(t *testing.T) {
	t.Parallel()
	if childtest.Emulator() != "" {
		t.Skip("under qemu-user the ARM supervisor execs its ARM worker directly, which qemu-user does not follow (see TestTermdRolloutEndToEnd)")
	}
	srv := servertest.Start(t, func(cfg *config.Config) {
		ch := cfg.Channels["terminal-dev"]
		ch.Config.HeartbeatSeconds = 1
		cfg.Channels["terminal-dev"] = ch
	})
	base := "http://" + srv.Addr
	bins := t.TempDir()
	v10, v101 := buildTermd(t, bins, ".", "v1.0.0"), buildTermd(t, bins, ".", "v1.0.1")
	v11, v12 := buildTermd(t, bins, ".", "v1.1.0"), buildTermd(t, bins, ".", "v1.2.0")
	keys := t.TempDir()
	if _, err := release.GenerateKey(keys); err != nil {
		t.Fatal(err)
	}
	uploadRelease(t, base, keys, v11, "v1.1.0")
	patchSize := uploadPatch(t, base, keys, bins, v10, v11, "v1.1.0", nil)
	uploadRelease(t, base, keys, v12, "v1.2.0")
	uploadPatch(t, base, keys, bins, v11, v12, "v1.2.0", func(b []byte) {
		for i := len(b) / 2; i < len(b)/2+64; i++ {
			b[i] ^= 0x5a
		}
	})

	type kiosk struct {
		dir        string
		tm         func(args ...string) string
		waitScreen func(string) string
	}
	kiosks := map[string]*kiosk{}
	for peer, bin := range map[string]string{"kiosk-a": v10, "kiosk-b": v101} {
		dir := t.TempDir()
		exe := filepath.Join(dir, "termd")
		installExe(t, exe, bin)
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
		if code := getJSONTo(t, base+"/api/channels/terminal-dev/peers/"+peer, &p); code != 200 || !p.Online {
			return ""
		}
		return p.Version
	}
	testwait.Until(t, "kiosk-a on v1.0.0 and kiosk-b on v1.0.1, online", func() bool {
		return peerVersion("kiosk-a") == "v1.0.0" && peerVersion("kiosk-b") == "v1.0.1"
	})
	rollouts := base + "/api/channels/terminal-dev/rollouts"
	get := func(id string) *deltaRolloutView {
		var r deltaRolloutView
		if code := getJSONTo(t, rollouts+"/"+id, &r); code != 200 {
			t.Fatalf("GET rollout %s: %d", id, code)
		}
		return &r
	}

	var r deltaRolloutView
	start := time.Now()
	postJSON(t, rollouts, map[string]any{"version": "v1.1.0", "tag": "site=lobby", "gate_seconds": 60}, http.StatusCreated, &r)
	testwait.Until(t, "the v1.1.0 rollout done", func() bool { return get(r.ID).State == "done" })
	t.Logf("v1.1.0 on both: %v from the rollout's start", time.Since(start).Round(time.Millisecond))
	cur := get(r.ID)
	if st, run, how := cur.delivery("kiosk-a"); st != "installed" || run != "v1.1.0" || how != fmt.Sprintf("patched: downloaded a patch of %d bytes for a binary of %d", patchSize, len(mustRead(t, v11))) {
		t.Fatalf("kiosk-a: %s on %s, %q; want installed from the patch", st, run, how)
	}
	if st, run, how := cur.delivery("kiosk-b"); st != "installed" || run != "v1.1.0" || how != "" {
		t.Fatalf("kiosk-b: %s on %s, %q; want installed from the whole binary", st, run, how)
	}

	start = time.Now()
	postJSON(t, rollouts, map[string]any{"version": "v1.2.0", "tag": "site=lobby", "gate_seconds": 60}, http.StatusCreated, &r)
	testwait.Until(t, "the v1.2.0 rollout done", func() bool { return get(r.ID).State == "done" })
	t.Logf("v1.2.0 on both, through a corrupt patch: %v from the rollout's start", time.Since(start).Round(time.Millisecond))
	cur = get(r.ID)
	for _, peer := range []string{"kiosk-a", "kiosk-b"} {
		st, run, how := cur.delivery(peer)
		if st != "installed" || run != "v1.2.0" || !strings.HasPrefix(how, "patch failed: ") ||
			!strings.HasSuffix(how, "; fetched the full binary") {
			t.Fatalf("%s: %s on %s, %q; want installed from the whole binary after the patch failed", peer, st, run, how)
		}
		t.Logf("%s: %s", peer, how)
	}
	for _, k := range kiosks {
		k.tm("send-keys", "C-d")
		k.waitScreen("EXIT=0")
	}
}

// deltaRolloutView is what the test reads of a rollout: its devices'
// delivery too.
type deltaRolloutView struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Devices []struct {
		PeerID   string `json:"peer_id"`
		State    string `json:"state"`
		Running  string `json:"running"`
		Delivery string `json:"delivery"`
	} `json:"devices"`
}

func (r *deltaRolloutView) delivery(peer string) (state, running, delivery string) {
	for _, d := range r.Devices {
		if d.PeerID == peer {
			return d.State, d.Running, d.Delivery
		}
	}
	return "", "", ""
}
