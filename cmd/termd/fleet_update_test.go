package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"termlink/device/update"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/link/linktest"
	"termlink/release"
	"termlink/testrig/childtest"
)

// signed signs bin as version for platform with priv and returns the
// manifest's JSON.
func signed(t *testing.T, keyDir, bin, version, platform string) string {
	t.Helper()
	priv, err := release.LoadPrivateKey(filepath.Join(keyDir, release.PrivateKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	m, err := release.Sign(priv, version, platform, bin)
	if err != nil {
		t.Fatal(err)
	}
	return string(m.Marshal())
}

// statuses are the update_status frames the server got, in order.
func statuses(srv *linktest.Server) []*link.UpdateStatus {
	var out []*link.UpdateStatus
	for _, f := range srv.Others() {
		if s, ok := f.(*link.UpdateStatus); ok {
			out = append(out, s)
		}
	}
	return out
}

// The device side of an update over the session, with real binaries: a
// real termd v1.0.0 under its supervisor, a scripted channel server that
// sends update frames, and a plain HTTP server with the binaries.
//   - connect lists "update" and the platform; on connect termd says it
//     runs v1.0.0 (installed).
//   - a release signed by another key, one for another platform and a
//     downgrade are refused before any download: the reason goes to the
//     server and onto the display, and termd goes on as it was.
//   - v1.1.0: downloading, restarting; the supervisor restarts into it;
//     it connects as v1.1.0 and, once its first heartbeat is answered,
//     says installed.
//   - a release that exits at start (v1.2.0): the supervisor runs v1.1.0
//     again, which says rolled_back with the supervisor's reason.
func TestTermdUpdateOverTheSession(t *testing.T) {
	t.Parallel()
	if childtest.Emulator() != "" {
		t.Skip("under qemu-user (make test-arm) the ARM supervisor execs its ARM worker directly, which qemu-user does not follow; TestSuperviseARMv6 (device/update) runs the ARMv6 supervisor and releases under qemu-arm-static from the native run")
	}
	bins := t.TempDir()
	v1, v2 := buildTermd(t, bins, ".", "v1.0.0"), buildTermd(t, bins, ".", "v1.1.0")
	broken := buildTermd(t, bins, "../../device/update/testdata/exitatstart", "")
	keys, otherKeys := t.TempDir(), t.TempDir()
	for _, d := range []string{keys, otherKeys} {
		if _, err := release.GenerateKey(d); err != nil {
			t.Fatal(err)
		}
	}
	files := http.NewServeMux()
	for name, bin := range map[string]string{"/v2": v2, "/broken": broken} {
		files.HandleFunc("GET "+name, func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, bin) })
	}
	hs := httptest.NewServer(files)
	t.Cleanup(hs.Close)

	srv := linktest.New(t)
	srv.SetHeartbeat(1)
	dir := t.TempDir()
	exe, state := filepath.Join(dir, "termd"), filepath.Join(dir, "state")
	installExe(t, exe, v1)
	cmd := fmt.Sprintf("%s --supervise --server %s --board sim --state-dir %s --peer-id kiosk-u --log-file %s --release-key %s",
		exe, srv.URL(), state, filepath.Join(dir, "termd.log"), filepath.Join(keys, release.PublicKeyFile))
	tm, waitScreen := termdInTmux(t, cmd)
	logOnFail := func() {
		if t.Failed() {
			l, _ := os.ReadFile(filepath.Join(dir, "termd.log"))
			// What the terminal shows says why a termd that wrote no
			// log never came up (seen once in make test's race step:
			// no status in 2 minutes, the log empty).
			t.Logf("termd.log:\n%s\nthe terminal:\n%s\nframes the server got: %d statuses", l, tm("capture-pane", "-p", "-S", "-40"), len(statuses(srv)))
		}
	}
	defer logOnFail()
	waitStatus := func(what string, ok func(*link.UpdateStatus) bool) *link.UpdateStatus {
		t.Helper()
		var found *link.UpdateStatus
		srv.WaitFor(t, what, testwait.Deadline, func() bool {
			for _, s := range statuses(srv) {
				if ok(s) {
					found = s
					return true
				}
			}
			return false
		})
		return found
	}
	waitStatus("v1.0.0 says it is installed", func(s *link.UpdateStatus) bool {
		return s.Version == "v1.0.0" && s.State == link.UpdateInstalled && s.Running == "v1.0.0"
	})
	c := srv.Connect(0)
	if !slices.Contains(c.Capabilities, link.CapUpdate) || c.Platform != release.CurrentPlatform() || c.Version != "v1.0.0" {
		t.Fatalf("connect: capabilities %v, platform %q, version %q", c.Capabilities, c.Platform, c.Version)
	}

	// Refusals: nothing downloaded, the reason on the server and the glass.
	other := "linux/arm64"
	if release.CurrentPlatform() == other {
		other = "linux/amd64"
	}
	for _, r := range []struct {
		id, version, manifest, says string
	}{
		{"bad-key", "v9.0.0", signed(t, otherKeys, v2, "v9.0.0", release.CurrentPlatform()), "signature"},
		{"platform", "v9.0.1", signed(t, keys, v2, "v9.0.1", other), "another platform"},
		{"downgrade", "v0.9.0", signed(t, keys, v2, "v0.9.0", release.CurrentPlatform()), "not newer"},
	} {
		if err := srv.Send(&link.Update{UpdateID: r.id, Version: r.version, Manifest: r.manifest, URL: hs.URL + "/v2"}); err != nil {
			t.Fatal(err)
		}
		s := waitStatus(r.id+" refused", func(s *link.UpdateStatus) bool { return s.UpdateID == r.id && link.IsUpdateFailure(s.State) })
		if s.State != link.UpdateRefused || !strings.Contains(s.Reason, r.says) || s.Running != "v1.0.0" {
			t.Errorf("%s: %+v, want refused saying %q while running v1.0.0", r.id, s, r.says)
		}
		waitScreen("Update " + r.version + " refused")
		tm("send-keys", "Escape") // dismiss it
	}
	if _, err := os.Stat(exe + update.StagedSuffix); err == nil {
		t.Fatal("a refused release was staged")
	}

	// v1.1.0 goes through.
	if err := srv.Send(&link.Update{UpdateID: "u2", Version: "v1.1.0", Manifest: signed(t, keys, v2, "v1.1.0", release.CurrentPlatform()),
		URL: hs.URL + "/v2", GateSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	waitStatus("v1.1.0 downloading", func(s *link.UpdateStatus) bool { return s.UpdateID == "u2" && s.State == link.UpdateDownloading })
	waitStatus("v1.1.0 restarting", func(s *link.UpdateStatus) bool { return s.UpdateID == "u2" && s.State == link.UpdateRestarting })
	waitStatus("v1.1.0 installed", func(s *link.UpdateStatus) bool {
		return s.Version == "v1.1.0" && s.State == link.UpdateInstalled && s.Running == "v1.1.0"
	})
	if st, err := update.ReadStatus(state); err != nil || st.Installed != "v1.1.0" || st.Pending != nil {
		t.Fatalf("update.json: %+v, %v", st, err)
	}
	if c := srv.Connect(srv.Connects() - 1); c.Version != "v1.1.0" {
		t.Fatalf("the last connect says version %q, want v1.1.0", c.Version)
	}

	// A release that exits at start is rolled back by the supervisor.
	if err := srv.Send(&link.Update{UpdateID: "u3", Version: "v1.2.0", Manifest: signed(t, keys, broken, "v1.2.0", release.CurrentPlatform()),
		URL: hs.URL + "/broken"}); err != nil {
		t.Fatal(err)
	}
	s := waitStatus("v1.2.0 rolled back", func(s *link.UpdateStatus) bool { return s.Version == "v1.2.0" && s.State == link.UpdateRolledBack })
	if s.Running != "v1.1.0" || !strings.Contains(s.Reason, "exited (status 3) before its first heartbeat") {
		t.Errorf("rolled back: %+v", s)
	}
	waitScreen("rolled back")
	tm("send-keys", "C-d")
	waitScreen("EXIT=0")
}
