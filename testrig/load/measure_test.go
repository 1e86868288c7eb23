package load

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Environment of the measure helper processes.
const (
	measureRole    = "TERMLINK_MEASURE_ROLE" // "server" or "devices"
	measureURL     = "TERMLINK_MEASURE_URL"
	measureMode    = "TERMLINK_MEASURE_MODE" // lean, client-memory, client-file
	measureDevices = "TERMLINK_MEASURE_DEVICES"
	measureModes   = "TERMLINK_MEASURE_MODES" // comma-separated subset of the modes
)

// measureClientCost starts the real server in a child process, then runs
// each mode's idle devices (Hold) in a child of its own and reports how
// much each device adds to the load generator's RSS, Go heap and stacks.
// TERMLINK_MEASURE_DEVICES (default 1000) and TERMLINK_MEASURE_MODES
// (default lean,client-memory,client-file) choose what is measured.
func measureClientCost(t *testing.T) {
	devices := 1000
	if s := os.Getenv(measureDevices); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", measureDevices, s)
		}
		devices = n
	}
	srv := helper(t, map[string]string{measureRole: "server"})
	defer srv.stop(t)
	url := srv.want(t, "URL")[0]

	t.Logf("%d idle devices (Hold), server in another process; per device = (after - before) / connected", devices)
	t.Logf("%-14s %9s %12s %12s %12s %12s %12s", "mode", "connected", "RSS/device", "heap/device", "stack/device", "goroutines/d", "connect p50")
	modes := []string{"lean", "client-memory", "client-file"}
	if s := os.Getenv(measureModes); s != "" {
		modes = strings.Split(s, ",")
	}
	for _, mode := range modes {
		h := helper(t, map[string]string{measureRole: "devices", measureURL: url, measureMode: mode, measureDevices: strconv.Itoa(devices)})
		f := h.want(t, "RESULT")
		h.stop(t)
		v := map[string]float64{}
		for _, kv := range f {
			k, val, _ := strings.Cut(kv, "=")
			v[k], _ = strconv.ParseFloat(val, 64)
		}
		n := v["connected"]
		if n == 0 {
			t.Errorf("%s: no device connected: %v", mode, f)
			continue
		}
		per := func(k string) string { return fmt.Sprintf("%.1f KiB", (v[k+"_after"]-v[k+"_before"])/n/1024) }
		t.Logf("%-14s %9.0f %12s %12s %12s %12.1f %10.1fms", mode, n, per("rss"), per("heap"), per("stack"),
			(v["goroutines_after"]-v["goroutines_before"])/n, v["connect_p50"])
	}
}

// TestMeasureHelper is the child process of measureClientCost; it does
// nothing unless started by it.
func TestMeasureHelper(t *testing.T) {
	switch os.Getenv(measureRole) {
	case "server":
		rs, err := startRealServer(t.TempDir(), "127.0.0.1:0", realOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("MEASURE URL %s\n", rs.URL)
		io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
		if err := rs.stop(); err != nil {
			t.Error(err)
		}
	case "devices":
		measureDevicesProcess(t)
	default:
		t.Skip("child process of TestMeasureClientCost")
	}
}

type memSample struct{ rss, heap, stack, goroutines float64 }

func sampleMem(t *testing.T) memSample {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{rss: vmRSS(t), heap: float64(ms.HeapInuse), stack: float64(ms.StackInuse), goroutines: float64(runtime.NumGoroutine())}
}

// vmRSS is VmRSS of /proc/self/status in bytes.
func vmRSS(t *testing.T) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", line, err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func measureDevicesProcess(t *testing.T) {
	devices, _ := strconv.Atoi(os.Getenv(measureDevices))
	opt := Options{URL: os.Getenv(measureURL), Devices: devices, Hold: true, ConnectRate: 500, PeerPrefix: "measure-" + os.Getenv(measureMode)}
	switch os.Getenv(measureMode) {
	case "client-memory":
		opt.Client, opt.Outbox = true, OutboxMemory
	case "client-file":
		opt.Client, opt.Outbox = true, OutboxFile
	}
	before := sampleMem(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	status := &lineWriter{lines: make(chan string, 1)}
	opt.Status = status
	done := make(chan *Report, 1)
	go func() {
		rep, err := Run(ctx, opt)
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	select {
	case <-status.lines:
	case <-time.After(2 * time.Minute):
		t.Fatal("devices did not connect")
	}
	time.Sleep(time.Second) // let the handshakes' garbage go
	after := sampleMem(t)
	cancel()
	rep := <-done
	fmt.Printf("MEASURE RESULT connected=%d rss_before=%.0f rss_after=%.0f heap_before=%.0f heap_after=%.0f "+
		"stack_before=%.0f stack_after=%.0f goroutines_before=%.0f goroutines_after=%.0f connect_p50=%.2f\n",
		rep.DevicesConnected, before.rss, after.rss, before.heap, after.heap, before.stack, after.stack,
		before.goroutines, after.goroutines, rep.Connect.P50)
}

// helperProc is a child process running TestMeasureHelper.
type helperProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.Reader
	lines  *bufio.Scanner
}

func helper(t *testing.T, env map[string]string) *helperProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMeasureHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TERMLINK_MEASURE=")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &helperProc{cmd: cmd, stdin: stdin, stdout: stdout, lines: bufio.NewScanner(stdout)}
}

// want reads the child's stdout up to the line "MEASURE <what> ..." and
// returns its fields after <what>.
func (h *helperProc) want(t *testing.T, what string) []string {
	t.Helper()
	for h.lines.Scan() {
		if f := strings.Fields(h.lines.Text()); len(f) >= 2 && f[0] == "MEASURE" && f[1] == what {
			return f[2:]
		}
	}
	t.Fatalf("child ended without a MEASURE %s line", what)
	return nil
}

func (h *helperProc) stop(t *testing.T) {
	h.stdin.Close()
	io.Copy(io.Discard, h.stdout) // the rest of stdout, until the child exits
	if err := h.cmd.Wait(); err != nil {
		t.Errorf("child process: %v", err)
	}
}
