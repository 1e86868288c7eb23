package termd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/boards"
	"termlink/device"
	"termlink/device/logring"
	"termlink/display"
	"termlink/display/hd44780"
	"termlink/link"
	"termlink/testrig/lcdemu"
)

// results collects what a diagnoser reports.
type results struct {
	mu  sync.Mutex
	got []*link.DiagResult
}

func (r *results) report(f link.Frame) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, f.(*link.DiagResult))
	return nil
}

func (r *results) last(t *testing.T) *link.DiagResult {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) == 0 {
		t.Fatal("no diag result")
	}
	return r.got[len(r.got)-1]
}

func connected() (link.Status, link.ClientStats) {
	return link.Status{State: link.StateConnected}, link.ClientStats{Dials: 3, Sessions: 2, Pongs: 7, Pending: 1}
}

// emulatorDiag is a diagnoser on the emulated 16x2 LCD behind its
// PCF8574 at 0x27 (the real driver drawing on it), a state dir and a ring.
func emulatorDiag(t *testing.T) (*diagnoser, *lcdemu.Bus, *hd44780.Dev, *results) {
	t.Helper()
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: 2, Cols: 16})
	if err != nil {
		t.Fatal(err)
	}
	lcd, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: 2, Cols: 16, Refresh: -1})
	if err != nil {
		t.Fatal(err)
	}
	res := &results{}
	dg := &diagnoser{report: res.report, linkState: connected, ring: logring.New(0), stateDir: t.TempDir(),
		view: &device.LCDView{Screen: lcd}, bus: bus, addr: 0x27, log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}
	return dg, bus, lcd, res
}

func draw(t *testing.T, lcd *hd44780.Dev, lines ...string) {
	t.Helper()
	f := display.NewFrame(2, 16)
	for i, l := range lines {
		f.SetLine(i, l)
	}
	if err := lcd.Draw(context.Background(), f); err != nil {
		t.Fatal(err)
	}
}

// The remote self-test on the emulated board: every check passes, the
// report is termrig selftest's, and the glass is not disturbed (same
// text, no protocol warning, no driver transaction). Then write errors
// on the display, an unset clock and a state dir that takes no file each
// fail their check and the verdict; the display's errors count once.
func TestDiagSelftestOnEmulator(t *testing.T) {
	dg, bus, lcd, res := emulatorDiag(t)
	draw(t, lcd, "Hello kiosk", "ok")
	before, tx := strings.Join(bus.Text(), "\n"), lcd.Stats().Tx
	ctx := context.Background()

	dg.handle(ctx, &link.Diag{RequestID: "r1", Kind: link.DiagSelftest})
	r := res.last(t)
	if r.RequestID != "r1" || r.Kind != link.DiagSelftest || !r.OK || r.Error != "" {
		t.Fatalf("selftest: %+v", r)
	}
	for _, want := range []string{"CHECK", "i2c-backpack  PASS    0x27 answers (PCF8574 LCD backpack)", "display       PASS    no write errors since termd started",
		"state-dir     PASS", "clock         PASS", "link          PASS    connected; 1 reconnects, 7 heartbeats answered, 1 messages in the outbox",
		"selftest: PASS (5 checks)"} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("the report lacks %q:\n%s", want, r.Text)
		}
	}
	if after := strings.Join(bus.Text(), "\n"); after != before || lcd.Stats().Tx != tx || len(bus.Warnings()) > 0 {
		t.Errorf("the self-test disturbed the display: %q -> %q, tx %d -> %d, warnings %v", before, after, tx, lcd.Stats().Tx, bus.Warnings())
	}
	if entries, _ := os.ReadDir(dg.stateDir); len(entries) != 0 {
		t.Errorf("the state dir keeps the probe: %v", entries)
	}

	// Write errors: the display check fails, once.
	bus.InjectErrors(1, 0)
	_ = lcd.Draw(ctx, display.NewFrame(2, 16)) // fails, and the driver re-initialises the glass
	draw(t, lcd, "Hello again", "ok")
	dg.handle(ctx, &link.Diag{RequestID: "r2", Kind: link.DiagSelftest})
	if r = res.last(t); r.OK || !strings.Contains(r.Text, "display       FAIL    ") || !strings.Contains(r.Text, "write errors since the previous self-test") ||
		!strings.Contains(r.Text, "selftest: FAIL") {
		t.Fatalf("after write errors: ok %v\n%s", r.OK, r.Text)
	}
	dg.handle(ctx, &link.Diag{RequestID: "r3", Kind: link.DiagSelftest})
	if r = res.last(t); !r.OK {
		t.Fatalf("the same errors counted twice:\n%s", r.Text)
	}

	// No backpack at the address, a clock at 1970, a state dir that is a file.
	dg.addr = 0x3F
	dg.now = func() time.Time { return time.Unix(0, 0) }
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	dg.stateDir = file
	dg.linkState = func() (link.Status, link.ClientStats) {
		return link.Status{State: link.StateWaiting}, link.ClientStats{}
	}
	dg.handle(ctx, &link.Diag{RequestID: "r4", Kind: link.DiagSelftest})
	r = res.last(t)
	for _, want := range []string{"i2c-backpack  FAIL    nothing acknowledges 0x3F", "clock         FAIL    the clock reads 1970-01-01T00:00:00Z: not set",
		"state-dir     FAIL    " + file + " takes no file", "link          FAIL    not connected", "selftest: FAIL (1 passed, 4 failed"} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("the report lacks %q:\n%s", want, r.Text)
		}
	}
}

// A board without an I2C LCD: those checks do not apply, and the verdict
// rests on the others.
func TestDiagSelftestConsole(t *testing.T) {
	dg, _, _, res := emulatorDiag(t)
	dg.bus, dg.view = nil, &device.ConsoleView{}
	dg.handle(context.Background(), &link.Diag{RequestID: "c", Kind: link.DiagSelftest})
	r := res.last(t)
	if !r.OK || !strings.Contains(r.Text, "i2c-backpack  N/A     the display is not an I2C LCD") ||
		!strings.Contains(r.Text, "display       N/A") || !strings.Contains(r.Text, "selftest: PASS") {
		t.Fatalf("console: %+v\n%s", r, r.Text)
	}
}

// One self-test at a time: a second request while one runs is answered
// at once with an error, and the first one's report still comes.
func TestDiagOneSelftestAtATime(t *testing.T) {
	dg, _, _, res := emulatorDiag(t)
	entered, release := make(chan struct{}), make(chan struct{})
	dg.linkState = func() (link.Status, link.ClientStats) {
		close(entered)
		<-release
		return connected()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		dg.handle(context.Background(), &link.Diag{RequestID: "first", Kind: link.DiagSelftest})
	}()
	<-entered
	dg.handle(context.Background(), &link.Diag{RequestID: "second", Kind: link.DiagSelftest})
	if r := res.last(t); r.RequestID != "second" || r.Error != "a self-test is running" || r.OK {
		t.Fatalf("second: %+v", r)
	}
	close(release)
	<-done
	if r := res.last(t); r.RequestID != "first" || !r.OK {
		t.Fatalf("first: %+v %s", r, r.Text)
	}
	dg.linkState = connected
	dg.handle(context.Background(), &link.Diag{RequestID: "third", Kind: link.DiagSelftest})
	if r := res.last(t); r.RequestID != "third" || !r.OK {
		t.Fatalf("after the first: %+v", r)
	}
}

// logs: the ring's end within the request's bytes, from a line boundary;
// 0 bytes and more than MaxDiagBytes mean MaxDiagBytes; no ring: an error.
func TestDiagLogs(t *testing.T) {
	dg, _, _, res := emulatorDiag(t)
	log := slog.New(slog.NewTextHandler(dg.ring, nil))
	for i := range 3000 {
		log.Info("line", "n", i)
	}
	dg.handle(context.Background(), &link.Diag{RequestID: "l1", Kind: link.DiagLogs, Bytes: 100})
	r := res.last(t)
	if !r.OK || r.Error != "" || len(r.Text) > 100 || !strings.HasPrefix(r.Text, "time=") || !strings.HasSuffix(r.Text, "msg=line n=2999\n") {
		t.Fatalf("logs 100: %+v", r)
	}
	for _, n := range []int{0, link.MaxDiagBytes + 1} {
		dg.handle(context.Background(), &link.Diag{RequestID: fmt.Sprint("l", n), Kind: link.DiagLogs, Bytes: n})
		if r = res.last(t); len(r.Text) > link.MaxDiagBytes || len(r.Text) < link.MaxDiagBytes-200 || !strings.HasPrefix(r.Text, "time=") {
			t.Fatalf("logs %d: %d bytes starting %q", n, len(r.Text), r.Text[:min(len(r.Text), 20)])
		}
	}
	dg.ring = nil
	dg.handle(context.Background(), &link.Diag{RequestID: "l2", Kind: link.DiagLogs})
	if r = res.last(t); r.OK || r.Error != "this termd keeps no log in memory" {
		t.Fatalf("no ring: %+v", r)
	}
}

// termd lists "diag" (the handler is set without a client), and openLog
// writes every line to the ring as well as to its file.
func TestDiagCapabilityAndLog(t *testing.T) {
	s := &setup{cfg: Config{}}
	if caps := s.fleetCaps(); !slices.Contains(caps, link.CapDiag) {
		t.Fatalf("fleetCaps = %v", caps)
	}
	file := filepath.Join(t.TempDir(), "termd.log")
	ring := logring.New(0)
	cfg := Config{LogFile: file, StateDir: t.TempDir()}
	profile, err := boards.Select("rpi-lcd2004-i2c", "")
	if err != nil {
		t.Fatal(err)
	}
	log, _, closeLog := openLog(cfg, profile, nil, ring)
	log.Info("termd starting", "peer_id", "kiosk-9")
	closeLog()
	data, _ := os.ReadFile(file)
	if !strings.Contains(string(ring.Tail(0)), "peer_id=kiosk-9") || string(data) != string(ring.Tail(0)) {
		t.Fatalf("ring %q, file %q", ring.Tail(0), data)
	}
}

// The log ring starts with the end of the log file: the lines the update
// supervisor and the processes before this one wrote there (after a
// rollback the remote log says why), from a line's start, as much as the
// ring holds.
func TestLogRingStartsWithTheLogFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "termd.log")
	var before strings.Builder
	for i := range 100 {
		fmt.Fprintf(&before, "time=x level=INFO msg=\"line %d\" supervisor=true\n", i)
	}
	if err := os.WriteFile(file, []byte(before.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	profile, err := boards.Select("sim", "")
	if err != nil {
		t.Fatal(err)
	}
	ring := logring.New(1024)
	log, _, closeLog := openLog(Config{LogFile: file, StateDir: t.TempDir()}, profile, nil, ring)
	log.Info("termd starting")
	closeLog()
	tail := string(ring.Tail(0))
	if !strings.HasPrefix(tail, "time=x level=INFO msg=\"line ") || !strings.Contains(tail, "msg=\"line 99\" supervisor=true\n") ||
		!strings.HasSuffix(tail, "msg=\"termd starting\"\n") || len(tail) > 1024 {
		t.Fatalf("the ring: %q", tail)
	}
}

// The supervisor logs into the worker's file: on the sim board (the
// display is this terminal) StateDir/termd.log, never stderr; a
// --log-file that cannot be opened is an error.
func TestSupervisorLogIsTheWorkersFile(t *testing.T) {
	state := t.TempDir()
	log, closeLog, err := SupervisorLog(Config{Board: "sim", StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	log.Error("update failed; running the previous binary")
	closeLog()
	data, err := os.ReadFile(filepath.Join(state, "termd.log"))
	if err != nil || !strings.Contains(string(data), `msg="update failed; running the previous binary" supervisor=true`) {
		t.Fatalf("termd.log: %q %v", data, err)
	}
	if _, _, err := SupervisorLog(Config{Board: "sim", StateDir: state, LogFile: filepath.Join(state, "no", "such", "dir")}); err == nil || !strings.Contains(err.Error(), "--log-file") {
		t.Fatalf("a --log-file that cannot be opened: %v", err)
	}
}
