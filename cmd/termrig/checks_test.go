package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.bug.st/serial"

	"termlink/internal/testwait"
	"termlink/server"
	"termlink/server/config"
	"termlink/testrig/checks"
	"termlink/testrig/needtool"
)

func TestCheckCommandsUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string // in stdout (code 0) or stderr
	}{
		{[]string{"help"}, 0, "selftest"},
		{[]string{"serial-loopback", "-h"}, 0, "Usage: termrig serial-loopback --port P [--baud B,...] [--bytes N] [--json]"},
		{[]string{"i2c-scan", "-h"}, 0, "0x20-0x27 a PCF8574 LCD backpack"},
		{[]string{"lcd-test", "-h"}, 0, "Usage: termrig lcd-test --board NAME | --board-file F | [--bus N] [--addr 0x27]"},
		{[]string{"gpio-loopback", "-h"}, 0, "--out PIN --in PIN"},
		{[]string{"keypad-test", "-h"}, 0, "-stuck-after"},
		{[]string{"link-test", "-h"}, 0, "-ca-file"},
		{[]string{"selftest", "-h"}, 0, "-interactive"},
		{[]string{"serial-loopback"}, 2, "--port is required (e.g. --port /dev/serial0), or --sim"},
		{[]string{"serial-loopback", "--port", "/dev/x", "--baud", "fast"}, 2, `baud rate "fast": want positive numbers`},
		{[]string{"serial-loopback", "--port", "/dev/x", "--bytes", "0"}, 2, "--bytes must be 1 to 1048576"},
		{[]string{"i2c-scan", "--expect", "0x99"}, 2, `--expect: I2C address "0x99": want a 7-bit address`},
		{[]string{"lcd-test", "--board", "rpi-lcd2004-i2c", "--addr", "0x3f"}, 2, "--board rpi-lcd2004-i2c gives the LCD"},
		{[]string{"lcd-test", "--size", "16"}, 2, `--size: size "16": want COLSxROWS`},
		{[]string{"lcd-test", "--rom", "A01"}, 2, "--rom:"},
		{[]string{"gpio-loopback", "--out", "GPIO17"}, 2, "--out and --in are required"},
		{[]string{"gpio-loopback", "--out", "GPIO17", "--in", "GPIO17"}, 2, "two different pins"},
		{[]string{"keypad-test"}, 2, "--board is required"},
		{[]string{"link-test"}, 2, "--server is required"},
		{[]string{"link-test", "--server", "x", "--pings", "0"}, 2, "--pings must be at least 1"},
		{[]string{"selftest"}, 2, "--board is required"},
		{[]string{"selftest", "--sim", "--gpio-out", "GPIO17"}, 2, "--gpio-out and --gpio-in go together"},
		{[]string{"selftest", "--sim", "--board", "rpi-lcd2004-i2c"}, 2, "--sim and --board rpi-lcd2004-i2c exclude each other"},
		// The board flag family, as termd's: a path in --board points at
		// --board-file; not both.
		{[]string{"lcd-test", "--board", "/etc/my-board.json"}, 2, "--board takes a board name (known: lcdproc, "},
		{[]string{"lcd-test", "--board", "/etc/my-board.json"}, 2, "use --board-file /etc/my-board.json"},
		{[]string{"keypad-test", "--board", "my-board.json"}, 2, "use --board-file my-board.json"},
		{[]string{"selftest", "--board", "boards/x.json"}, 2, "use --board-file boards/x.json"},
		{[]string{"lcd-test", "--board", "sim", "--board-file", "b.json"}, 2, "--board sim and --board-file b.json exclude each other"},
		{[]string{"lcd-test", "--board-file", "b.json", "--size", "20x4"}, 2, "--board-file b.json gives the LCD"},
		{[]string{"selftest", "--sim", "--board-file", "b.json"}, 2, "--sim and --board-file b.json exclude each other"},
		{[]string{"lcd-test", "-h"}, 0, "-board-file file"},
		{[]string{"keypad-test", "-h"}, 0, "-board-file file"},
		{[]string{"selftest", "-h"}, 0, "-board-file file"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runTermrig(t, tt.args...)
			out := stdout
			if tt.code != 0 {
				out = stderr
			}
			if code != tt.code || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q; want %q", code, tt.code, stdout, stderr, tt.want)
			}
		})
	}
}

// Every check on the simulated rig, as text and as JSON.
func TestCheckCommandsSim(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"i2c-scan", "--sim"}, []string{"PASS i2c-scan: 1 device answers on the simulated bus: 0x27 (PCF8574 LCD backpack)", "20: -- -- -- -- -- -- -- 27"}},
		{[]string{"lcd-test", "--sim", "--frames", "5"}, []string{"fill:\n┌────────────────┐\n│⓪⓪⓪⓪⓪⓪⓪⓪⓪⓪⓪⓪⓪⓪⓪⓪│", "rom-low:\n┌────────────────┐\n│ !\"#$%&'()*+,-./│",
			"PASS lcd-test: 16x2 A00 at 0x27 on the simulated bus: 6 patterns shown"}},
		{[]string{"lcd-test", "--board", "sim", "--size", "20x4", "--rom", "A02", "--frames", "5"}, []string{"PASS lcd-test: 20x4 A02 at 0x27"}},
		{[]string{"serial-loopback", "--sim", "--bytes", "100"}, []string{"PASS serial-loopback: all 600 bytes came back intact at 9600, 115200 baud"}},
		{[]string{"gpio-loopback", "--sim", "--toggles", "20"}, []string{"PASS gpio-loopback: IN followed all 20 changes of OUT with an edge each"}},
		// The simulated person presses a key again when a busy machine made the
		// scan miss it, so the number of presses is not fixed.
		{[]string{"keypad-test", "--sim"}, []string{"seen 0 of 16", "PASS keypad-test: all 16 keys seen (", " presses), no stuck keys, no ghosting"}},
		{[]string{"link-test", "--sim", "--pings", "3"}, []string{"PASS link-test: connected in", `"You said: termrig link-test `}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runTermrig(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			code, stdout, stderr = runTermrig(t, append(tt.args, "--json")...)
			var r checks.Result
			if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != 0 || !r.Pass || r.Name != tt.args[0] {
				t.Errorf("--json: exit %d, err %v, result %+v\nstdout:\n%s\nstderr:\n%s", code, err, r, stdout, stderr)
			}
		})
	}
}

// Devices that are not there: the message says what to do. (Skipped on a
// machine that has them.)
// consoleBoard writes a copy of the rpi-serial-console profile as a file.
func consoleBoard(t *testing.T) string {
	data, err := os.ReadFile("../../boards/profiles/rpi-serial-console.json")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "console-board.json")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCheckCommandsMissingDevices(t *testing.T) {
	consoleBoardFile := consoleBoard(t)
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	tests := []struct {
		args  []string
		needs string // skip when this exists
		want  string
	}{
		{[]string{"i2c-scan", "--bus", "97"}, "/dev/i2c-97", "FAIL i2c-scan: /dev/i2c-97 not found: enable I2C (raspi-config nonint do_i2c 0)"},
		{[]string{"lcd-test", "--bus", "97"}, "/dev/i2c-97", "FAIL lcd-test: /dev/i2c-97 not found: enable I2C (raspi-config nonint do_i2c 0)"},
		{[]string{"serial-loopback", "--port", "/dev/ttyTERMRIG97"}, "/dev/ttyTERMRIG97", "FAIL serial-loopback: /dev/ttyTERMRIG97 not found: enable the UART"},
		{[]string{"gpio-loopback", "--out", "GPIO17", "--in", "GPIO27"}, "/dev/gpiochip0", "FAIL gpio-loopback: GPIO pin GPIO17: /dev/gpiochip0 not found"},
		{[]string{"keypad-test", "--board", "rpi-lcd1602-i2c"}, "/dev/gpiochip0", "FAIL keypad-test: GPIO pin GPIO5: /dev/gpiochip0 not found"},
		{[]string{"keypad-test", "--board", "rpi-serial-console"}, "", "FAIL keypad-test: board rpi-serial-console has no keypad"},
		{[]string{"lcd-test", "--board", "rpi-serial-console"}, "", `FAIL lcd-test: board rpi-serial-console has no character LCD (display kind "console")`},
		{[]string{"lcd-test", "--board", "no-such-board"}, "", "rpi-lcd2004-i2c"},
		{[]string{"lcd-test", "--board", "no-such-board"}, "", "a profile file goes in --board-file PATH"},
		// --board-file reads a profile file, as termd's.
		{[]string{"lcd-test", "--board-file", consoleBoardFile}, "", `FAIL lcd-test: board rpi-serial-console has no character LCD (display kind "console")`},
		{[]string{"keypad-test", "--board-file", consoleBoardFile}, "", "FAIL keypad-test: board rpi-serial-console has no keypad"},
		{[]string{"lcd-test", "--board-file", "/no/such/board.json"}, "", "FAIL lcd-test: boards: open /no/such/board.json: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if tt.needs != "" && exists(tt.needs) {
				t.Skipf("%s exists on this machine (real hardware): this case checks the error a board without it gets", tt.needs)
			}
			code, stdout, stderr := runTermrig(t, tt.args...)
			if code != 1 || !strings.Contains(stdout, tt.want) || stderr != "" {
				t.Fatalf("exit %d; stdout %q; stderr %q; want exit 1 and %q printed once", code, stdout, stderr, tt.want)
			}
		})
	}
}

// serial-loopback over a socat PTY pair: with the far end echoing (a
// jumper) and without.
func TestSerialLoopbackCommand(t *testing.T) {
	t.Parallel()
	bin := needtool.Path(t, "socat", "a PTY pair for the serial port; apt-get install socat")
	dir := t.TempDir()
	near, far := filepath.Join(dir, "near"), filepath.Join(dir, "far")
	cmd := exec.Command(bin, "pty,raw,echo=0,link="+near, "pty,raw,echo=0,link="+far)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	testwait.UntilOK(t, "socat's PTYs", func() error { _, err := os.Stat(far); return err })
	p, err := serial.Open(far, &serial.Mode{BaudRate: 115200})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetReadTimeout(10 * time.Millisecond)
	var mu sync.Mutex
	echoing := false
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1024)
		for ctx.Err() == nil {
			n, err := p.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			e := echoing
			mu.Unlock()
			if n > 0 && e {
				p.Write(buf[:n])
			}
		}
	}()
	defer func() { cancel(); <-done }()

	code, stdout, _ := runTermrig(t, "serial-loopback", "--port", near, "--bytes", "64", "--json")
	var r checks.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != 1 || !strings.HasPrefix(r.Summary, "nothing received: is TX wired to RX?") {
		t.Fatalf("no jumper: exit %d, %v, %q", code, err, stdout)
	}
	mu.Lock()
	echoing = true
	mu.Unlock()
	code, stdout, stderr := runTermrig(t, "serial-loopback", "--port", near, "--bytes", "64", "--baud", "19200")
	if code != 0 || !strings.Contains(stdout, "PASS serial-loopback: all 192 bytes came back intact at 19200 baud") {
		t.Fatalf("jumper: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

func startTestServer(t *testing.T, tokens config.Tokens) string {
	t.Helper()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	ch := cfg.Channels[config.DefaultChannelID]
	ch.Config.Tokens = tokens
	cfg.Channels[config.DefaultChannelID] = ch
	s, err := server.New(cfg, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, 2*time.Second) }()
	t.Cleanup(func() { stop(); <-served })
	return "ws://" + ln.Addr().String()
}

func TestLinkTestCommand(t *testing.T) {
	url := startTestServer(t, config.Tokens{Any: []string{"s3cret"}})
	code, stdout, stderr := runTermrig(t, "link-test", "--server", url, "--token", "wrong")
	if code != 1 || !strings.Contains(stdout, "FAIL link-test: the server refused the token (HTTP 401)") || stderr != "" {
		t.Fatalf("bad token: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runTermrig(t, "link-test", "--server", url, "--token", "s3cret", "--pings", "4", "--json")
	var r checks.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != 0 || !r.Pass {
		t.Fatalf("good token: exit %d %v\n%s\n%s", code, err, stdout, stderr)
	}
	if n, _ := r.Metric("pings"); n != 4 {
		t.Errorf("pings %v", n)
	}
}

func TestSelftestCommand(t *testing.T) {
	t.Parallel()
	t.Run("sim", func(t *testing.T) {
		code, stdout, stderr := runTermrig(t, "selftest", "--sim")
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		for _, w := range []string{"CHECK            RESULT  SUMMARY\n", "i2c-scan         PASS", "lcd-test         PASS", "serial-loopback  PASS",
			"gpio-loopback    PASS", "keypad-test      PASS", "link-test        PASS", "selftest: PASS (6 checks)"} {
			if !strings.Contains(stdout, w) {
				t.Errorf("stdout lacks %q:\n%s", w, stdout)
			}
		}
	})
	t.Run("board sim, JSON, external server", func(t *testing.T) {
		url := startTestServer(t, config.Tokens{Any: []string{"tok"}})
		code, stdout, stderr := runTermrig(t, "selftest", "--board", "sim", "--json", "--server", url, "--token", "tok", "--baud", "38400")
		var rep checks.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 0 || !rep.Pass || len(rep.Results) != 6 {
			t.Fatalf("exit %d %v %+v\n%s\n%s", code, err, rep, stdout, stderr)
		}
	})
	t.Run("sim with a refused token", func(t *testing.T) {
		url := startTestServer(t, config.Tokens{Any: []string{"tok"}})
		code, stdout, stderr := runTermrig(t, "selftest", "--sim", "--server", url, "--token", "bad")
		if code != 1 || !strings.Contains(stdout, "link-test        FAIL    the server refused the token") ||
			!strings.Contains(stdout, "selftest: FAIL (5 passed, 1 failed, 0 skipped)") || stderr != "" {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
	})
	t.Run("board without its hardware", func(t *testing.T) {
		if _, err := os.Stat("/dev/i2c-1"); err == nil {
			t.Skip("/dev/i2c-1 exists here")
		}
		url := startTestServer(t, config.Tokens{})
		code, stdout, stderr := runTermrig(t, "selftest", "--board", "rpi-lcd2004-i2c", "--server", url)
		for _, w := range []string{
			"i2c-scan         FAIL    /dev/i2c-1 not found: enable I2C (raspi-config nonint do_i2c 0)",
			"lcd-test         FAIL    /dev/i2c-1 not found",
			"serial-loopback  SKIP    no loopback port: pass --serial-port P with TX wired to RX",
			"gpio-loopback    SKIP    no loopback pins",
			"keypad-test      SKIP    needs a person to press the keys: run with --interactive",
			"link-test        PASS",
			"selftest: FAIL (1 passed, 2 failed, 3 skipped)",
		} {
			if !strings.Contains(stdout, w) {
				t.Errorf("stdout lacks %q:\n%s", w, stdout)
			}
		}
		if code != 1 || stderr != "" {
			t.Errorf("exit %d, stderr %q; want 1 and the verdict printed once", code, stderr)
		}
	})
	// Checks skipped for lack of a stand-in (a jumper, wired pins, a
	// server) keep the selftest from passing; checks that do not apply to
	// the board do not.
	t.Run("console board", func(t *testing.T) {
		code, stdout, stderr := runTermrig(t, "selftest", "--board", "rpi-serial-console")
		for _, w := range []string{
			"i2c-scan         N/A     the board has no I2C LCD",
			"lcd-test         N/A     board rpi-serial-console has no character LCD",
			"serial-loopback  SKIP    no loopback port",
			"keypad-test      N/A     the board has no keypad",
			"link-test        SKIP    no --server given",
			"selftest: INCOMPLETE (0 passed, 0 failed, 3 skipped, 3 not applicable)",
		} {
			if !strings.Contains(stdout, w) {
				t.Errorf("stdout lacks %q:\n%s", w, stdout)
			}
		}
		if code != 3 || stderr != "" || strings.Contains(stdout, "PASS") {
			t.Fatalf("exit %d, stderr %q; want 3, nothing on stderr, no PASS\n%s", code, stderr, stdout)
		}
		url := startTestServer(t, config.Tokens{})
		code, stdout, _ = runTermrig(t, "selftest", "--board", "rpi-serial-console", "--server", url, "--json")
		var rep checks.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 3 || rep.Pass || rep.Verdict != "INCOMPLETE" ||
			rep.Passed != 1 || rep.Failed != 0 || rep.Skipped != 2 || rep.NotApplicable != 3 {
			t.Fatalf("exit %d %v %+v\n%s", code, err, rep, stdout)
		}
	})
}
