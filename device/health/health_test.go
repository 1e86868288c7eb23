package health

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"termlink/link"
	"termlink/testrig/childtest"
)

// fakeRoot writes a /proc and /sys tree of files under a temporary dir.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCollectFromAFakePi(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/uptime":                          "12345.67 40000.00\n",
		"proc/loadavg":                         "1.25 0.80 0.50 2/150 1234\n",
		"proc/meminfo":                         "MemTotal:        441224 kB\nMemFree:          20000 kB\nMemAvailable:     123456 kB\n",
		"sys/class/thermal/thermal_zone0/temp": "61234\n",
		"sys/class/thermal/thermal_zone1/temp": "83500\n",
		"sys/class/thermal/thermal_zone2/temp": "garbage\n",
		throttledFile:                          "50005\n",
	})
	src := Sources{Root: root, StateDir: "/var/lib/termd", Statfs: func(path string) (uint64, uint64, error) {
		if path != "/var/lib/termd" {
			t.Errorf("statfs of %q, want the state dir", path)
		}
		return 5 << 20, 100 << 20, nil
	}}
	f := Collect(src)
	if len(f.Problems) > 0 {
		t.Fatalf("problems: %v", f.Problems)
	}
	want := link.Health{UptimeSeconds: 12345, Load1: 1.25, MemAvailable: 123456 << 10, DiskFree: 5 << 20, DiskFreePercent: 5,
		Throttled: []string{link.ThrottleUnderVoltage, link.ThrottleThrottled, link.ThrottleUnderVoltageOccurred, link.ThrottleThrottledOccurred}}
	temp := int64(83500) // the hottest zone
	want.TempMilliC = &temp
	if !reflect.DeepEqual(f.Health, want) {
		t.Fatalf("Collect = %+v (temp %v), want %+v", f.Health, deref(f.TempMilliC), want)
	}
	c := ConditionsOf(f.Health)
	if !c.DiskLow || !c.Hot || !c.Throttled {
		t.Fatalf("conditions %+v: want disk low, hot, throttled", c)
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// A board without thermal zones or the Pi firmware (a PC, the emulator):
// those figures are left out, the others are there; a missing /proc
// file is a problem named, not a stop.
func TestCollectOnABoardWithoutSensors(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/uptime":  "5.00 1.00\n",
		"proc/meminfo": "MemTotal: 1000 kB\n",
	})
	f := Collect(Sources{Root: root, StateDir: "/s", Statfs: func(string) (uint64, uint64, error) { return 0, 0, errors.New("no such file") }})
	if f.UptimeSeconds != 5 || f.TempMilliC != nil || f.Throttled != nil {
		t.Fatalf("Collect = %+v", f.Health)
	}
	got := strings.Join(f.Problems, "; ")
	for _, want := range []string{"/proc/loadavg", "no MemAvailable line", "statfs /s: no such file"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q: want one naming %q", got, want)
		}
	}
	// vcgencmd where the sysfs file is missing.
	f = Collect(Sources{Root: root, StateDir: "/s", Statfs: func(string) (uint64, uint64, error) { return 1, 1, nil },
		Vcgencmd: func() (string, error) { return "throttled=0x80000\n", nil }})
	if !reflect.DeepEqual(f.Throttled, []string{link.ThrottleSoftTempLimitOccurred}) || ThrottledNow(f.Throttled) {
		t.Fatalf("throttled from vcgencmd = %v", f.Throttled)
	}
}

func TestThrottledWords(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"0x0", nil},
		{"throttled=0x1", []string{link.ThrottleUnderVoltage}},
		{"e000f", []string{link.ThrottleUnderVoltage, link.ThrottleFreqCapped, link.ThrottleThrottled, link.ThrottleSoftTempLimit,
			link.ThrottleFreqCappedOccurred, link.ThrottleThrottledOccurred, link.ThrottleSoftTempLimitOccurred}},
		{"0x100", nil}, // an unknown bit
	} {
		bits, ok := ParseThrottled(c.in)
		if !ok {
			t.Fatalf("ParseThrottled(%q) failed", c.in)
		}
		if got := ThrottledWords(bits); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ThrottledWords(%q) = %v, want %v", c.in, got, c.want)
		}
		h := link.Health{LastStop: link.StopClean, Throttled: ThrottledWords(bits)}
		if _, err := link.Decode(link.MustEncode(&h)); err != nil {
			t.Errorf("a report of %q does not decode: %v", c.in, err)
		}
	}
	if _, ok := ParseThrottled("throttled=zz"); ok {
		t.Fatal("ParseThrottled took zz")
	}
}

func TestBootReasons(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // made by Start
	t0 := time.Unix(1_800_000_000, 0)
	b, err := Start(dir, t0, Options{})
	if err != nil || b.LastStop != link.StopUnknown || b.RestartsLastHour != 0 {
		t.Fatalf("first start: %+v, %v; want unknown, no restarts", b, err)
	}
	if err := CleanStop(dir); err != nil {
		t.Fatal(err)
	}
	b, _ = Start(dir, t0.Add(time.Minute), Options{})
	if b.LastStop != link.StopClean || b.RestartsLastHour != 1 {
		t.Fatalf("after a clean stop: %+v", b)
	}
	// No clean-stop mark (kill -9, a power cut): power loss.
	b, _ = Start(dir, t0.Add(2*time.Minute), Options{})
	if b.LastStop != link.StopPowerLoss || b.RestartsLastHour != 2 {
		t.Fatalf("after no mark: %+v", b)
	}
	// A crash report: its first line, one line, bounded.
	long := "panic: " + strings.Repeat("é", 200) + "\tend"
	if err := os.WriteFile(filepath.Join(dir, CrashFile), []byte("\n"+long+"\n\ngoroutine 1 [running]:\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ = Start(dir, t0.Add(3*time.Minute), Options{})
	if b.LastStop != link.StopCrash || len(b.LastStopDetail) > link.MaxStopDetailBytes || !strings.HasPrefix(b.LastStopDetail, "panic: éé") {
		t.Fatalf("after a crash: %+v (%d bytes)", b, len(b.LastStopDetail))
	}
	h := link.Health{LastStop: b.LastStop, LastStopDetail: b.LastStopDetail}
	if _, err := link.Decode(link.MustEncode(&h)); err != nil {
		t.Fatalf("the crash's report does not decode: %v", err)
	}
	// The crash file was emptied: the next stop without a mark is power loss.
	b, _ = Start(dir, t0.Add(4*time.Minute), Options{})
	if b.LastStop != link.StopPowerLoss {
		t.Fatalf("after the crash was read: %+v", b)
	}
	// Starts older than an hour do not count; the log stays bounded.
	b, _ = Start(dir, t0.Add(62*time.Minute+30*time.Second), Options{})
	if b.RestartsLastHour != 2 {
		t.Fatalf("restarts an hour later: %d, want 2 (the starts at +3m and +4m)", b.RestartsLastHour)
	}
	for i := range MaxStarts * 2 {
		Start(dir, t0.Add(70*time.Minute+time.Duration(i)*time.Second), Options{})
	}
	raw, _ := os.ReadFile(filepath.Join(dir, StartsFile))
	if n := strings.Count(string(raw), "\n"); n != MaxStarts {
		t.Fatalf("start log holds %d lines, want at most %d", n, MaxStarts)
	}
}

// A real panic in a goroutine of a process that captured its crash
// output: the next start says crash, with the panic's first line.
func TestBootCrashOfARealPanic(t *testing.T) {
	if dir := os.Getenv("HEALTH_TEST_PANIC_DIR"); dir != "" {
		if _, err := Start(dir, time.Now(), Options{CaptureCrash: true}); err != nil {
			os.Exit(3)
		}
		done := make(chan struct{})
		go func() { panic("the display driver lost its mind") }()
		<-done
	}
	dir := t.TempDir()
	if _, err := Start(dir, time.Now().Add(-time.Minute), Options{}); err != nil {
		t.Fatal(err)
	}
	cmd := childtest.Command(os.Args[0], "-test.run=^TestBootCrashOfARealPanic$") // under qemu-user too (make test-arm)
	cmd.Env = append(os.Environ(), "HEALTH_TEST_PANIC_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("the child: %v, want it to die of its panic (exit 2); output:\n%.500s", err, out)
	}
	b, err := Start(dir, time.Now(), Options{})
	if err != nil || b.LastStop != link.StopCrash || b.LastStopDetail != "panic: the display driver lost its mind" {
		t.Fatalf("after a real panic: %+v, %v", b, err)
	}
}

func TestSchedule(t *testing.T) {
	var s Schedule
	t0 := time.Unix(1_800_000_000, 0)
	ok := Conditions{}
	if !s.Due(t0, 1, ok) {
		t.Fatal("nothing sent yet: due")
	}
	s.Sent(t0, 1, ok)
	for _, c := range []struct {
		after   time.Duration
		session int64
		cond    Conditions
		due     bool
		why     string
	}{
		{time.Second, 1, ok, false, "just sent"},
		{time.Second, 2, ok, true, "a new connection: at once"},
		{29 * time.Second, 1, Conditions{DiskLow: true}, false, "a change, but within MinInterval of the last"},
		{30 * time.Second, 1, Conditions{DiskLow: true}, true, "a change past MinInterval"},
		{30 * time.Second, 1, Conditions{Restarts: 1}, true, "a new restart"},
		{59 * time.Second, 1, ok, false, "no change, within Interval"},
		{60 * time.Second, 1, ok, true, "Interval"},
	} {
		if got := s.Due(t0.Add(c.after), c.session, c.cond); got != c.due {
			t.Errorf("%s: Due = %v, want %v", c.why, got, c.due)
		}
	}
}

// No mark after an earlier start: killed (a crash) when the system kept
// running (the same boot id: kill -9, the OOM killer), power loss when it
// restarted (another boot id) or the boot id cannot be read.
func TestBootKilledOrPowerLoss(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	t0 := time.Unix(1_800_000_000, 0)
	if b, _ := Start(dir, t0, Options{BootID: "boot-a"}); b.LastStop != link.StopUnknown {
		t.Fatalf("first start: %+v", b)
	}
	b, _ := Start(dir, t0.Add(time.Minute), Options{BootID: "boot-a"})
	if b.LastStop != link.StopCrash || b.LastStopDetail != KilledDetail {
		t.Fatalf("no mark, same boot: %+v, want a crash saying killed", b)
	}
	h := link.Health{LastStop: b.LastStop, LastStopDetail: b.LastStopDetail}
	if _, err := link.Decode(link.MustEncode(&h)); err != nil {
		t.Fatalf("the killed report does not decode: %v", err)
	}
	if b, _ = Start(dir, t0.Add(2*time.Minute), Options{BootID: "boot-b"}); b.LastStop != link.StopPowerLoss {
		t.Fatalf("no mark, the system restarted: %+v, want power loss", b)
	}
	if b, _ = Start(dir, t0.Add(3*time.Minute), Options{}); b.LastStop != link.StopPowerLoss {
		t.Fatalf("no mark, no boot id: %+v, want power loss", b)
	}
	if err := CleanStop(dir); err != nil {
		t.Fatal(err)
	}
	if b, _ = Start(dir, t0.Add(4*time.Minute), Options{BootID: "boot-b"}); b.LastStop != link.StopClean {
		t.Fatalf("a clean stop: %+v", b)
	}
	root := t.TempDir()
	if id := ReadBootID(root); id != "" {
		t.Fatalf("ReadBootID of a root without it: %q", id)
	}
	if err := os.MkdirAll(filepath.Join(root, "proc/sys/kernel/random"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"), []byte("9f1c-boot\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if id := ReadBootID(root); id != "9f1c-boot" {
		t.Fatalf("ReadBootID = %q", id)
	}
}
