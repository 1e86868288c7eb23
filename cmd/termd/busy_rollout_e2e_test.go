package main

import (
	"bytes"
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
	"termlink/testrig/buildtest"
	"termlink/testrig/childtest"
)

// Issue 42 with real binaries: a supervised termd v1.0.0 whose message
// is running (the scripted ACP agent holds its reply until a gate file
// exists) is not sent a rollout's update: the rollout shows it
// "waiting: in use" and the device stays on v1.0.0; once the reply is on
// the glass (and the keys' busy_seconds, pushed as 1, passed) the update
// goes, the device installs v1.1.0 and the rollout is done.
func TestTermdRolloutWaitsForTheConversation(t *testing.T) {
	t.Parallel()
	if childtest.Emulator() != "" {
		t.Skip("under qemu-user the ARM supervisor execs its ARM worker directly, which qemu-user does not follow (see TestTermdRolloutEndToEnd)")
	}
	srv := servertest.Start(t, func(cfg *config.Config) {
		servertest.WithACP(buildtest.Command(t, "termlink/testrig/agents/acpagent"))(cfg)
		ch := cfg.Channels["terminal-dev"]
		ch.Config.HeartbeatSeconds = 1
		cfg.Channels["terminal-dev"] = ch
	})
	base := "http://" + srv.Addr
	bins := t.TempDir()
	v1, v2 := buildTermd(t, bins, ".", "v1.0.0"), buildTermd(t, bins, ".", "v1.1.0")
	keys := t.TempDir()
	if _, err := release.GenerateKey(keys); err != nil {
		t.Fatal(err)
	}
	uploadRelease(t, base, keys, v2, "v1.1.0")

	dir := t.TempDir()
	exe := filepath.Join(dir, "termd")
	installExe(t, exe, v1)
	const peer = "kiosk-busy"
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s --supervise --server %s --board sim --state-dir %s --peer-id %s --log-file %s --release-key %s",
		exe, srv.URL, filepath.Join(dir, "state"), peer, filepath.Join(dir, "termd.log"), filepath.Join(keys, release.PublicKeyFile)))
	defer func() {
		if t.Failed() {
			l, _ := os.ReadFile(filepath.Join(dir, "termd.log"))
			t.Logf("termd.log:\n%s", l)
		}
	}()
	type peerView struct {
		Version string `json:"version"`
		Online  bool   `json:"online"`
		Busy    *struct {
			Busy bool   `json:"busy"`
			Why  string `json:"why"`
		} `json:"busy"`
	}
	getPeer := func() peerView {
		var p peerView
		getJSONTo(t, base+"/api/channels/terminal-dev/peers/"+peer, &p)
		return p
	}
	testwait.Until(t, "the kiosk online on v1.0.0, idle", func() bool {
		p := getPeer()
		return p.Online && p.Version == "v1.0.0" && p.Busy != nil && !p.Busy.Busy
	})
	// Keys keep it busy for busy_seconds: 1 here, so that the run alone
	// holds the update.
	req, _ := http.NewRequest(http.MethodPut, base+"/api/channels/terminal-dev/settings/peers/"+peer, bytes.NewReader([]byte(`{"busy_seconds":1}`)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT settings: HTTP %d %s", resp.StatusCode, b)
	}

	gate := filepath.Join(t.TempDir(), "gate")
	tm("send-keys", "-l", "/gate "+gate+" first-word and the rest")
	tm("send-keys", "Enter")
	waitScreen("first-word")
	testwait.Until(t, "the kiosk busy with its run", func() bool {
		p := getPeer()
		return p.Busy != nil && p.Busy.Busy && p.Busy.Why == "run"
	})

	rollouts := base + "/api/channels/terminal-dev/rollouts"
	var r rolloutView
	postJSON(t, rollouts, map[string]any{"version": "v1.1.0", "peers": []string{peer}, "gate_seconds": 60}, http.StatusCreated, &r)
	get := func() *rolloutView {
		var cur rolloutView
		if code := getJSONTo(t, rollouts+"/"+r.ID, &cur); code != 200 {
			t.Fatalf("GET rollout: %d", code)
		}
		return &cur
	}
	if st, _, why := get().device(peer); st != "waiting" || why != "in use" {
		t.Fatalf("the kiosk is %q (%s) in the rollout while its message runs, want waiting: in use", st, why)
	}
	if p := getPeer(); p.Version != "v1.0.0" || !p.Busy.Busy {
		t.Fatalf("the kiosk runs %q, busy %+v while its message runs", p.Version, p.Busy)
	}

	// The reply: the run ends, the device goes idle, the update goes.
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	waitScreen("the rest")
	shown := time.Since(released)
	testwait.Until(t, "the update sent", func() bool {
		st, _, _ := get().device(peer)
		return st != "waiting"
	})
	sent := time.Since(released)
	testwait.Until(t, "the rollout done", func() bool { return get().State == "done" })
	t.Logf("from the agent's reply: on the glass %v, the update sent %v, the rollout done %v",
		shown.Round(time.Millisecond), sent.Round(time.Millisecond), time.Since(released).Round(time.Millisecond))
	testwait.Until(t, "the kiosk on v1.1.0", func() bool { p := getPeer(); return p.Online && p.Version == "v1.1.0" })
	log, _ := os.ReadFile(filepath.Join(dir, "termd.log"))
	if strings.Contains(string(log), "restarting into it once the device is idle") {
		t.Log("termd staged the release and waited for idle itself too")
	}
	tm("send-keys", "C-d")
	waitScreen("EXIT=0")
}
