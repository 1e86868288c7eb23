package fleetsim

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"termlink/server/rollout"
	"termlink/testrig/load"
)

// The figures of the rollout note (issue 28), against a real termserver
// process: FLEETSIM_FIGURES=1 go test -run TestFigures -v ./testrig/fleetsim/
//   - from POST rollout to every one of 100 devices running the new
//     version (canary 5, percent 50), the server's CPU time over it
//     (/proc/PID/stat) and the bytes it sent per device (/proc/PID/io
//     wchar: the binary, the frames, the API; its files too);
//   - from a canary beginning to report its rollback to the rollout
//     paused (the paused record's time).
//
// Each 3 times; the medians and the load average are logged.
func TestFigures(t *testing.T) {
	if os.Getenv("FLEETSIM_FIGURES") == "" {
		t.Skip("set FLEETSIM_FIGURES=1 to measure")
	}
	dir := t.TempDir()
	for _, b := range []string{"termserver", "termd"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b), "termlink/cmd/"+b).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b, err, out)
		}
	}
	bin, err := os.ReadFile(filepath.Join(dir, "termd")) // a real termd binary as the release
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	var all, cpu, bytesPer, pause []float64
	for run := 1; run <= 3; run++ {
		srv := startProcess(t, dir, run)
		m, err := Upload(context.Background(), srv.base, "", t.TempDir(), "v2", "linux/arm/6", bin)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Start(context.Background(), Options{URL: srv.ws, N: n, Version: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		waitOnline(t, srv.base, n)
		cpu0, _ := load.ProcessCPU(srv.pid)
		w0 := wchar(t, srv.pid)
		t0 := time.Now()
		var r rollout.Rollout
		if st := call(t, "POST", srv.base+"/api/channels/terminal-dev/rollouts", `{"version":"v2","all":true,"canary":5,"percent":50}`, &r); st != 201 {
			t.Fatalf("create: %d", st)
		}
		waitFor(t, "100 devices on v2", func() bool { return f.Versions()["v2"] == n })
		took := time.Since(t0)
		cpu1, _ := load.ProcessCPU(srv.pid)
		w1 := wchar(t, srv.pid)
		if errs := f.Errors(); len(errs) > 0 {
			t.Fatalf("download errors: %v", errs[:min(3, len(errs))])
		}
		waitFor(t, "the rollout done", func() bool {
			call(t, "GET", srv.base+"/api/channels/terminal-dev/rollouts/"+r.ID, "", &r)
			return r.State == rollout.Done
		})
		all = append(all, took.Seconds())
		cpu = append(cpu, (cpu1 - cpu0).Seconds())
		bytesPer = append(bytesPer, float64(w1-w0)/n)
		t.Logf("run %d: %d devices on v2 in %v; server CPU %v; server wrote %d bytes per device (binary %d); load %s",
			run, n, took.Round(time.Millisecond), cpu1-cpu0, (w1-w0)/n, m.Size, loadavg())
		_ = f.Close()

		// The rollback: a canary fails; the time to the rollout paused.
		f, err = Start(context.Background(), Options{URL: srv.ws, N: n, Version: "v2", Prefix: "rb-", Fail: []string{"rb-001"}})
		if err != nil {
			t.Fatal(err)
		}
		waitOnline(t, srv.base, n)
		if _, err := Upload(context.Background(), srv.base, "", t.TempDir(), "v3", "linux/arm/6", bin[:len(bin)/2]); err != nil {
			t.Fatal(err)
		}
		if st := call(t, "POST", srv.base+"/api/channels/terminal-dev/rollouts", `{"version":"v3","all":true,"canary":5,"percent":50}`, &r); st != 201 {
			t.Fatalf("create v3: %d %+v", st, r)
		}
		waitFor(t, "paused", func() bool {
			call(t, "GET", srv.base+"/api/channels/terminal-dev/rollouts/"+r.ID, "", &r)
			return r.State == rollout.Paused
		})
		d := r.Paused.At.Sub(f.Devices[0].FailedAt())
		pause = append(pause, d.Seconds()*1000)
		t.Logf("run %d: canary %s rollback reported -> rollout paused in %v (paused: %s)", run, r.Paused.PeerID, d, r.Paused.Reason)
		_ = f.Close()
		srv.stop()
	}
	t.Logf("medians of 3: all %d on v2 %.2f s; server CPU %.2f s; server bytes written per device %.0f (binary %d); canary rollback -> paused %.1f ms; load %s",
		n, median(all), median(cpu), median(bytesPer), len(bin), median(pause), loadavg())
}

type proc struct {
	base, ws string
	pid      int
	stop     func()
}

// startProcess runs the termserver binary in dir with its own workspace.
func startProcess(t *testing.T, dir string, run int) proc {
	ws := filepath.Join(dir, fmt.Sprint("ws", run))
	_ = os.MkdirAll(ws, 0o755)
	cmd := exec.Command(filepath.Join(dir, "termserver"), "--listen", "127.0.0.1:0")
	cmd.Dir = ws
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrRE := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)
	found := make(chan string, 1)
	go func() { // its address, then keep draining its log
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil && strings.Contains(sc.Text(), "listening") {
				found <- m[1]
			}
		}
	}()
	var addr string
	select {
	case addr = <-found:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("termserver did not say where it listens within 60 s")
	}
	stop := func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }
	t.Cleanup(stop)
	return proc{base: "http://" + addr, ws: "ws://" + addr + "/api/channels/terminal-dev/ws", pid: cmd.Process.Pid, stop: stop}
}

func waitOnline(t *testing.T, base string, n int) {
	waitFor(t, fmt.Sprint(n, " devices online"), func() bool {
		var l struct{ Peers []struct{ Online bool } }
		call(t, "GET", base+"/api/channels/terminal-dev/peers?online=true&limit=1000", "", &l)
		return len(l.Peers) == n
	})
}

// wchar is the bytes process pid has written (sockets and files).
func wchar(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Fatal(err)
	}
	var v int64
	for _, l := range strings.Split(string(b), "\n") {
		if s, ok := strings.CutPrefix(l, "wchar: "); ok {
			fmt.Sscan(s, &v)
		}
	}
	return v
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
