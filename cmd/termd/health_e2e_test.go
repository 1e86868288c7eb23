package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/registry"
	"termlink/server/servertest"
)

// Issue 43, deliverable 4: the health reports of a real termd on the
// emulated board (sim-lcd: termd's HD44780 driver on the emulator) at a
// real termserver. Its first start reports last_stop unknown; killed with
// SIGKILL (no clean-stop mark) and started again on a state dir whose
// file system is full (a 1 MiB tmpfs, as root), its connect's report
// says crash ("killed": the system kept running, so no power loss) and
// the server marks the device disk_low; killed by a
// runtime crash (SIGQUIT: the Go runtime's crash report), the next
// start reports crash with the report's first line.
func TestTermdHealthReports(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, nil)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	tmpfs := false
	if os.Geteuid() == 0 {
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", state).CombinedOutput(); err != nil {
			t.Logf("no tmpfs for the state dir (mount: %v %s): the disk-low part is skipped", err, out)
		} else {
			tmpfs = true
			t.Cleanup(func() { _ = exec.Command("umount", "-l", state).Run() })
		}
	} else {
		t.Log("not root: no tmpfs can be mounted for the state dir, so the disk-low part is skipped (run as root to cover it)")
	}
	peerURL := "http://" + srv.Addr + "/api/channels/terminal-dev/peers/kiosk-health"
	pidFile := filepath.Join(dir, "pid")
	start := func() (pid int) {
		t.Helper()
		os.Remove(pidFile)
		_, waitScreen := termdInTmux(t, fmt.Sprintf("echo $$ > %s; exec %s --server %s --board sim-lcd --state-dir %s --peer-id kiosk-health",
			pidFile, termdRun, srv.Addr, state))
		waitScreen("online")
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	// report waits for the device's report that ok accepts.
	report := func(what string, ok func(h *registry.Health) bool) *registry.Health {
		t.Helper()
		var h *registry.Health
		testwait.UntilOK(t, what, func() error {
			resp, err := http.Get(peerURL)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var p registry.Peer
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				return err
			}
			if h = p.Health; h == nil || !ok(h) {
				return fmt.Errorf("the last report: %+v", h)
			}
			return nil
		})
		return h
	}
	kill := func(pid int, sig syscall.Signal) {
		t.Helper()
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, "termd gone", func() bool { return syscall.Kill(pid, 0) != nil })
	}

	pid := start()
	h := report("the first start's report", func(h *registry.Health) bool { return h.LastStop == link.StopUnknown })
	if h.UptimeSeconds <= 0 || h.MemAvailable <= 0 || h.DiskFree <= 0 || h.RestartsLastHour != 0 {
		t.Fatalf("first report: %+v", h)
	}
	for _, c := range h.Conditions {
		if c == link.ConditionDiskLow {
			t.Fatalf("disk low on an empty state dir: %+v", h)
		}
	}

	kill(pid, syscall.SIGKILL)
	filler := filepath.Join(state, "filler")
	if tmpfs {
		fill(t, filler)
	}
	pid = start()
	// The system kept running (the same boot id): killed, a crash, not
	// a power loss.
	h = report("the report after a kill -9", func(h *registry.Health) bool { return h.LastStop == link.StopCrash })
	if conds := strings.Join(h.Conditions, ","); strings.Contains(conds, link.ConditionPowerLoss) || h.RestartsLastHour != 1 || !strings.HasPrefix(h.LastStopDetail, "killed:") {
		t.Fatalf("after kill -9: %+v", h)
	}
	if tmpfs {
		if !strings.Contains(strings.Join(h.Conditions, ","), link.ConditionDiskLow) || h.DiskFreePercent >= 10 {
			t.Fatalf("a full state dir not reported as disk low: %+v", h)
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	}

	kill(pid, syscall.SIGQUIT) // the Go runtime's crash: its report to the crash file
	start()
	h = report("the report after a crash", func(h *registry.Health) bool {
		return h.LastStop == link.StopCrash && !strings.HasPrefix(h.LastStopDetail, "killed:")
	})
	if h.LastStopDetail != "SIGQUIT: quit" {
		t.Fatalf("after a crash: %+v, want the crash report's first line", h)
	}
}

// fill writes file until its file system is full.
func fill(t *testing.T, file string) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the state dir: %v", err)
			}
			return
		}
	}
}
