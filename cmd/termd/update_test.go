package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"termlink/device/update"
	"termlink/internal/testwait"
	"termlink/release"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/childtest"
)

// buildTermd builds termd (or pkg) at version, once for the tests of
// this package (they copy it before they change it); dir is unused. It
// builds as make pi builds a release (-trimpath, -tags
// nethttpomithttp2: no HTTP/2 in net/http, without the symbol table and
// DWARF: -s -w): the supervisor hashes and runs the binaries
// a release ships, and --version reads the stamp from them.
func buildTermd(t *testing.T, dir, pkg, version string) string {
	t.Helper()
	binsMu.Lock()
	b, ok := bins[pkg+"@"+version]
	if !ok {
		b = &builtBin{path: filepath.Join(binDir, fmt.Sprintf("%s-%s-%d", filepath.Base(pkg), version, len(bins)))}
		bins[pkg+"@"+version] = b
	}
	binsMu.Unlock()
	b.once.Do(func() {
		ldflags := "-s -w"
		if version != "" {
			ldflags += " -X main.version=" + version
		}
		args := []string{"build", "-trimpath", "-tags", termdTags, "-ldflags", ldflags, "-o", b.path}
		if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// installExe copies the binary src to exe and returns once exe runs
// (--version). A copy written here can be held open for writing, for a
// moment, by a child another parallel test forked meanwhile (until it
// execs): a shell started then in tmux failed "text file busy" and the
// test waited 2 minutes for a termd that never ran (seen once in make
// test's race step; go.dev/issue/22315).
func installExe(t *testing.T, exe, src string) {
	t.Helper()
	if err := os.WriteFile(exe, mustRead(t, src), 0o755); err != nil {
		t.Fatal(err)
	}
	testwait.UntilOK(t, exe+" to run (--version)", func() error {
		out, err := exec.Command(exe, "--version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The binaries buildTermd built, in binDir (made and removed by TestMain).
var (
	binsMu sync.Mutex
	bins   = map[string]*builtBin{}
)

type builtBin struct {
	once sync.Once
	path string
	err  error
}

// stage puts bin beside exe as the release version on trial, as Apply
// leaves it once the supervisor has recorded it (what a supervisor
// killed mid-trial finds when it starts again).
func stage(t *testing.T, exe, state, bin, version string) {
	t.Helper()
	dir := t.TempDir()
	if _, err := release.GenerateKey(dir); err != nil {
		t.Fatal(err)
	}
	priv, err := release.LoadPrivateKey(filepath.Join(dir, release.PrivateKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	m, err := release.Sign(priv, version, release.CurrentPlatform(), bin)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(bin)
	if err := os.WriteFile(exe+update.StagedSuffix, b, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(exe+update.StagedSuffix+release.ManifestSuffix, m.Marshal(), 0o644)
	st, err := update.ReadStatus(state)
	if err != nil {
		t.Fatal(err)
	}
	st.Pending = &update.Pending{Version: version, SHA256: m.SHA256, Size: m.Size, GateSeconds: 30}
	os.MkdirAll(state, 0o700)
	if err := os.WriteFile(filepath.Join(state, update.StateFile), st.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// termd --supervise with a release on trial: the real termd v2 comes up
// under the supervisor on the sim board, connects, completes its first
// heartbeat (termd tells the supervisor) and is installed; the server's
// registry shows v2, and messages are answered. The user quits: the
// supervisor exits 0. A release that exits at start, put on trial: the
// supervisor runs v2 again by itself and records why.
func TestTermdSupervisedUpdate(t *testing.T) {
	t.Parallel()
	if childtest.Emulator() != "" {
		t.Skip("under qemu-user (make test-arm) the ARM supervisor execs its ARM worker directly, which qemu-user does not follow; TestSuperviseARMv6 (device/update) runs the ARMv6 supervisor and releases under qemu-arm-static from the native run")
	}
	srv := servertest.Start(t, func(cfg *config.Config) {
		ch := cfg.Channels["terminal-dev"]
		ch.Config.HeartbeatSeconds = 1
		cfg.Channels["terminal-dev"] = ch
	})
	bins := t.TempDir()
	v1, v2 := buildTermd(t, bins, ".", "v1.0.0"), buildTermd(t, bins, ".", "v1.1.0")
	broken := buildTermd(t, bins, "../../device/update/testdata/exitatstart", "")
	dir := t.TempDir()
	exe, state := filepath.Join(dir, "termd"), filepath.Join(dir, "state")
	installExe(t, exe, v1)
	serverVersion := func() string {
		resp, err := http.Get("http://" + srv.Addr + "/api/channels/terminal-dev/peers/kiosk-u")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p struct {
			Version string `json:"version"`
			Online  bool   `json:"online"`
		}
		json.NewDecoder(resp.Body).Decode(&p)
		if !p.Online {
			return ""
		}
		return p.Version
	}
	waitState := func(what string, ok func(*update.Status) bool) *update.Status {
		t.Helper()
		var st *update.Status
		testwait.UntilOK(t, what, func() error {
			var err error
			if st, err = update.ReadStatus(state); err == nil && ok(st) {
				return nil
			}
			log, _ := os.ReadFile(filepath.Join(dir, "termd.log"))
			return fmt.Errorf("state %s (%v)\nlog:\n%s", st.Marshal(), err, log)
		})
		return st
	}
	cmd := fmt.Sprintf("%s --supervise --server %s --board sim --state-dir %s --peer-id kiosk-u --log-file %s",
		exe, srv.URL, state, filepath.Join(dir, "termd.log"))

	stage(t, exe, state, v2, "v1.1.0")
	tm, waitScreen := termdInTmux(t, cmd)
	waitState("v1.1.0 installed", func(s *update.Status) bool { return s.Pending == nil && s.Installed == "v1.1.0" })
	if got := serverVersion(); got != "v1.1.0" {
		t.Errorf("the server shows version %q, want v1.1.0", got)
	}
	if b1, _ := os.ReadFile(exe + update.PrevSuffix); string(b1) != string(mustRead(t, v1)) {
		t.Error("v1 not kept as termd.prev")
	}
	waitScreen("online")
	tm("send-keys", "-l", "hello v2")
	tm("send-keys", "Enter")
	waitScreen("You said: hello v2")
	tm("send-keys", "C-d")
	waitScreen("EXIT=0")

	stage(t, exe, state, broken, "v1.2.0")
	tm, waitScreen = termdInTmux(t, cmd)
	st := waitState("v1.2.0 given up", func(s *update.Status) bool { return s.Pending == nil && s.LastFailure != nil })
	if f := st.LastFailure; f.Version != "v1.2.0" || f.Reason != "it exited (status 3) before its first heartbeat" || st.Installed != "v1.1.0" {
		t.Errorf("state: %s", st.Marshal())
	}
	waitScreen("online")
	testwait.UntilOK(t, "the server to show v1.1.0 after the rollback", func() error {
		if got := serverVersion(); got != "v1.1.0" {
			return fmt.Errorf("it shows %q", got)
		}
		return nil
	})
	if _, err := os.Stat(exe + update.StagedSuffix); err == nil {
		t.Error("the broken release is still staged")
	}
	// The remote log (the running worker's log ring) has the
	// supervisor's lines about the rollback and the lines of the
	// processes before this one.
	testwait.UntilOK(t, "the rollback in the remote log", func() error {
		body := peerLogs(t, srv.Addr, "kiosk-u")
		for _, want := range []string{`msg="update: starting the new release on trial" supervisor=true version=v1.2.0`,
			`msg="update failed; running the previous binary" supervisor=true version=v1.2.0`, `msg="termd stopped"`} {
			if !strings.Contains(body, want) {
				log, _ := os.ReadFile(filepath.Join(dir, "termd.log"))
				return fmt.Errorf("no %q in:\n%s\ntermd.log:\n%s", want, body, log)
			}
		}
		return nil
	})
	tm("send-keys", "C-d")
	waitScreen("EXIT=0")
}

// peerLogs is the device's remote log (GET .../logs through the server),
// or the status and the server's answer while it cannot answer.
func peerLogs(t *testing.T, addr, peer string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/channels/terminal-dev/peers/" + peer + "/logs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("HTTP %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// termd --supervise on the sim board without --log-file: the
// supervisor's lines go to the worker's log (StateDir/termd.log), never
// over the screen, and into the worker's log ring (the remote log).
func TestTermdSupervisedLogsOffTheScreen(t *testing.T) {
	t.Parallel()
	if childtest.Emulator() != "" {
		t.Skip("under qemu-user the ARM supervisor execs its ARM worker directly, which qemu-user does not follow")
	}
	srv := servertest.Start(t, nil)
	state := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	// A state file the supervisor cannot read: it logs an error at start.
	if err := os.WriteFile(filepath.Join(state, update.StateFile), []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s --supervise --server %s --board sim --state-dir %s --peer-id kiosk-l", termd, srv.URL, state))
	s := waitScreen("online")
	if strings.Contains(s, "supervisor=true") || strings.Contains(s, "unreadable") {
		t.Fatalf("the supervisor's log is on the screen:\n%s", s)
	}
	if log, err := os.ReadFile(filepath.Join(state, "termd.log")); err != nil || !strings.Contains(string(log), `msg="update state unreadable; set aside, any staged release dropped"`) ||
		!strings.Contains(string(log), "supervisor=true") {
		t.Fatalf("termd.log has not the supervisor's line: %v\n%s", err, log)
	}
	testwait.UntilOK(t, "the supervisor's line in the remote log", func() error {
		if body := peerLogs(t, srv.Addr, "kiosk-l"); !strings.Contains(body, "update state unreadable") {
			return fmt.Errorf("the remote log:\n%s", body)
		}
		return nil
	})
	if s := tm("capture-pane", "-p"); strings.Contains(s, "unreadable") {
		t.Fatalf("the supervisor's log is on the screen:\n%s", s)
	}
	tm("send-keys", "C-d")
	waitScreen("EXIT=0")
}

// --release-key names a file that must hold a release key; the default
// (release.pub in the state dir) may be missing, not broken.
func TestTermdReleaseKeyErrors(t *testing.T) {
	state := t.TempDir()
	os.WriteFile(filepath.Join(state, release.PublicKeyFile), []byte("not a key\n"), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--state-dir", t.TempDir(), "--release-key", "/nonexistent/release.pub"}, "--release-key: open /nonexistent/release.pub"},
		{[]string{"--state-dir", state}, "--release-key: " + filepath.Join(state, release.PublicKeyFile) + ": not a PEM \"PUBLIC KEY\""},
		{[]string{"--state-dir", state, "--update-gate", "0s"}, "--update-gate 0s: must be positive"},
	} {
		args := append([]string{"--server", "ws://127.0.0.1:1", "--board", "sim"}, tt.args...)
		out, err := childtest.Command(termd, args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), tt.want) {
			t.Errorf("termd %v: %v\n%s\nwant exit 1 and %q", tt.args, err, out, tt.want)
		}
	}
}

// Issue 40 row 11: termd --version prints on stdout (as termserver and
// termrig do), nothing on stderr, and exits 0.
func TestVersionOnStdout(t *testing.T) {
	t.Parallel()
	exe := buildTermd(t, "", "termlink/cmd/termd", "v9.8.7")
	cmd := exec.Command(exe, "--version")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("termd --version: %v (stderr %q)", err, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "termd v9.8.7") || stderr.Len() != 0 {
		t.Errorf("termd --version: stdout %q, stderr %q; want the version on stdout and nothing on stderr", stdout.String(), stderr.String())
	}
}
