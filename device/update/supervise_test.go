package update

import (
	"bufio"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/release"
	"termlink/server/config"
	"termlink/server/servertest"
)

// device is the test program installed at dir/termd, run as its own
// supervisor against a real termserver.
type device struct {
	t               *testing.T
	srv             *servertest.Server
	dir, exe, state string
	files           *fileServer
	emu, platform   string // the emulator the device runs under, its platform
	mu              sync.Mutex
	lines           []string
	cmd             *exec.Cmd
	exited          chan struct{}
}

func newDevice(t *testing.T, installed string) *device {
	t.Helper()
	srv := servertest.Start(t, func(cfg *config.Config) {
		ch := cfg.Channels["terminal-dev"]
		ch.Config.HeartbeatSeconds = 1
		cfg.Channels["terminal-dev"] = ch
	})
	dir := t.TempDir()
	d := &device{t: t, srv: srv, dir: dir, exe: filepath.Join(dir, "termd"), state: filepath.Join(dir, "state"), files: newFileServer(t),
		platform: release.CurrentPlatform()}
	if err := CopyFile(installed, d.exe); err != nil {
		t.Fatal(err)
	}
	return d
}

// start runs the supervisor (in its own process group, killed with it
// when the test ends).
func (d *device) start(extra ...string) {
	d.t.Helper()
	args := append([]string{"--supervise", "--server", d.srv.URL, "--state-dir", d.state}, extra...)
	if d.emu != "" {
		d.cmd = exec.Command(d.emu, append([]string{d.exe}, args...)...)
		d.cmd.Env = append(os.Environ(), "TERMLINK_EMULATOR="+d.emu)
	} else {
		d.cmd = exec.Command(d.exe, args...)
	}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d.cmd.Stderr = os.Stderr
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		d.t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.exited = make(chan struct{})
	cmd, exited := d.cmd, d.exited
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, sc.Text())
			d.mu.Unlock()
		}
		cmd.Wait()
		close(exited)
	}()
	d.t.Cleanup(func() { d.kill() })
}

// kill kills the supervisor and its worker at once (kill -9 of the group).
func (d *device) kill() {
	if d.cmd == nil {
		return
	}
	syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-d.exited
	d.cmd = nil
}

// wait waits for a line printed after the first `from` lines; it returns
// the number of lines up to and including it.
func (d *device) wait(from int, want string) int {
	d.t.Helper()
	n := 0
	testwait.UntilOK(d.t, fmt.Sprintf("%q after line %d", want, from), func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i := from; i < len(d.lines); i++ {
			if d.lines[i] == want {
				n = i + 1
				return nil
			}
		}
		return fmt.Errorf("lines:\n%s", strings.Join(d.lines, "\n"))
	})
	return n
}

// offer signs bin as version and has the worker apply it.
func (d *device) offer(priv ed25519.PrivateKey, pubFile, version, bin string) {
	d.t.Helper()
	m, err := release.Sign(priv, version, d.platform, bin)
	if err != nil {
		d.t.Fatal(err)
	}
	mf := filepath.Join(d.t.TempDir(), "m.json")
	if err := os.WriteFile(mf, m.Marshal(), 0o644); err != nil {
		d.t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]any{"url": d.files.serve(version, bin), "manifest": mf, "key": pubFile})
	// Written aside and renamed: the worker polls for apply.json and
	// would otherwise read it half written ("apply: unexpected end of
	// JSON input" on a loaded machine).
	tmp := filepath.Join(d.state, "apply.json.tmp")
	if err := os.WriteFile(tmp, req, 0o600); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.state, "apply.json")); err != nil {
		d.t.Fatal(err)
	}
}

func (d *device) status() *Status {
	d.t.Helper()
	s, err := ReadStatus(d.state)
	if err != nil {
		d.t.Fatal(err)
	}
	return s
}

// serverVersion is the version the server's registry shows for the device.
func (d *device) serverVersion() string {
	resp, err := http.Get("http://" + d.srv.Addr + "/api/channels/terminal-dev/peers/upd-1")
	if err != nil {
		d.t.Fatal(err)
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

func (d *device) waitServerVersion(want string) {
	d.t.Helper()
	testwait.UntilOK(d.t, "the server to show version "+want, func() error {
		if got := d.serverVersion(); got != want {
			return fmt.Errorf("it shows %q", got)
		}
		return nil
	})
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// v1 -> v2 through the supervisor: v2 comes up on trial, connects,
// completes its first heartbeat and is installed (v1 kept as .prev); the
// server sees v2. Then a release that exits at start: the supervisor
// starts v2 again by itself and records why; the installed binary is
// still v2.
func TestSuperviseUpdateAndRollback(t *testing.T) {
	nativeExec(t)
	t.Parallel()
	_, priv, pubFile := newKey(t)
	v1, v2 := workerBin(t, "v1.0.0"), workerBin(t, "v1.1.0")
	d := newDevice(t, v1)
	d.start()
	n := d.wait(0, "healthy v1.0.0")
	d.waitServerVersion("v1.0.0")

	d.offer(priv, pubFile, "v1.1.0", v2)
	n = d.wait(n, "apply: ok")
	n = d.wait(n, "stopped v1.0.0")
	n = d.wait(n, "healthy v1.1.0")
	d.waitServerVersion("v1.1.0")
	testwait.Until(t, "the update recorded as installed", func() bool { s := d.status(); return s.Pending == nil && s.Installed == "v1.1.0" })
	if !sameFile(t, d.exe, v2) || !sameFile(t, d.exe+PrevSuffix, v1) {
		t.Error("want v2 installed and v1 kept as .prev")
	}
	if _, err := os.Stat(d.exe + StagedSuffix); err == nil {
		t.Error("termd.new left behind")
	}

	d.offer(priv, pubFile, "v1.2.0", brokenBin(t))
	n = d.wait(n, "apply: ok")
	n = d.wait(n, "stopped v1.1.0")
	stopped := time.Now()
	n = d.wait(n, "healthy v1.1.0") // back by itself
	t.Logf("rollback: %v from the old worker stopped to it healthy again (heartbeat 1s)", time.Since(stopped).Round(time.Millisecond))
	d.waitServerVersion("v1.1.0")
	s := d.status()
	if f := s.LastFailure; f == nil || f.Version != "v1.2.0" || f.Reason != "it exited (status 3) before its first heartbeat" || s.Pending != nil {
		t.Errorf("state after the broken release: %s", s.Marshal())
	}
	if !sameFile(t, d.exe, v2) || !sameFile(t, d.exe+PrevSuffix, v1) {
		t.Error("the broken release changed the installed binaries")
	}
	if _, err := os.Stat(d.exe + StagedSuffix); err == nil {
		t.Error("the broken release is still staged")
	}
}

// A release that starts and never says healthy is killed when the gate
// passes, and the previous binary runs again.
func TestSuperviseGateTimeout(t *testing.T) {
	nativeExec(t)
	t.Parallel()
	_, priv, pubFile := newKey(t)
	v1 := workerBin(t, "v1.0.0")
	d := newDevice(t, v1)
	d.start("--gate", "1s")
	n := d.wait(0, "healthy v1.0.0")
	d.offer(priv, pubFile, "v1.1.0", build(t, "./testdata/hang", ""))
	n = d.wait(n, "apply: ok")
	d.wait(n, "healthy v1.0.0")
	if f := d.status().LastFailure; f == nil || f.Reason != "no first heartbeat within 1s of its start" {
		t.Errorf("failure: %+v", f)
	}
	if !sameFile(t, d.exe, v1) {
		t.Error("the installed binary changed")
	}
}

// kill -9 of the supervisor and its worker during a trial, again and
// again: each restart (from the installed binary, the old one) runs the
// trial again, and after MaxAttempts it is given up and the old one
// runs.
func TestSuperviseTrialInterrupted(t *testing.T) {
	nativeExec(t)
	t.Parallel()
	_, priv, pubFile := newKey(t)
	v1 := workerBin(t, "v1.0.0")
	d := newDevice(t, v1)
	d.start("--gate", "10m")
	n := d.wait(0, "healthy v1.0.0")
	d.offer(priv, pubFile, "v1.1.0", build(t, "./testdata/hang", ""))
	d.wait(n, "apply: ok")
	for attempt := 1; attempt <= MaxAttempts; attempt++ {
		testwait.Until(t, fmt.Sprintf("trial attempt %d", attempt), func() bool {
			s := d.status()
			return s.Pending != nil && s.Pending.Attempts == attempt
		})
		d.kill()
		if !sameFile(t, d.exe, v1) {
			t.Fatal("the installed binary changed during the trial")
		}
		d.mu.Lock()
		n = len(d.lines)
		d.mu.Unlock()
		d.start("--gate", "10m")
	}
	d.wait(n, "healthy v1.0.0")
	s := d.status()
	if f := s.LastFailure; f == nil || s.Pending != nil || f.Reason != fmt.Sprintf("the trial was interrupted %d times (the supervisor was killed or the device lost power)", MaxAttempts) {
		t.Errorf("state: %s", s.Marshal())
	}
}

// The ARMv6 build (a Pi Zero's) updated under qemu-user: v1 -> v2
// through the supervisor, both ARM binaries; a release built for arm64
// is refused as the wrong platform and v2 keeps running.
func TestSuperviseARMv6(t *testing.T) {
	nativeExec(t)
	t.Parallel()
	emu, err := exec.LookPath("qemu-arm-static")
	if err != nil {
		if os.Getenv("CI_REQUIRE_TOOLS") != "" {
			t.Fatal("qemu-arm-static is required")
		}
		t.Skip("no qemu-arm-static")
	}
	if testing.Short() {
		t.Skip("slow: ARM builds under qemu")
	}
	arm := []string{"GOOS=linux", "GOARCH=arm", "GOARM=6", "CGO_ENABLED=0"}
	_, priv, pubFile := newKey(t)
	v1, v2 := build(t, "./testdata/worker", "v1.0.0", arm...), build(t, "./testdata/worker", "v1.1.0", arm...)
	d := newDevice(t, v1)
	d.emu, d.platform = emu, "linux/arm/6"
	d.start("--gate", "60s")
	n := d.wait(0, "healthy v1.0.0")
	d.offer(priv, pubFile, "v1.1.0", v2)
	n = d.wait(n, "apply: ok")
	n = d.wait(n, "healthy v1.1.0")
	d.waitServerVersion("v1.1.0")
	testwait.Until(t, "v1.1.0 installed", func() bool { s := d.status(); return s.Pending == nil && s.Installed == "v1.1.0" })
	if !sameFile(t, d.exe, v2) || !sameFile(t, d.exe+PrevSuffix, v1) {
		t.Error("want v2 installed and v1 kept as .prev")
	}
	d.platform = "linux/arm64"
	// The arm64 release is the small program that exits at start: were
	// it not refused, the apply would say ok and the trial fail.
	d.offer(priv, pubFile, "v1.2.0", build(t, "./testdata/exitatstart", "", "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"))
	d.wait(n, "apply: "+ErrWrongPlatform.Error()+": linux/arm64, this is linux/arm/6")
	if !sameFile(t, d.exe, v2) {
		t.Error("the installed binary changed")
	}
}
