package lcdemu_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"termlink/testrig/lcdemu"
	"termlink/testrig/needtool"
)

// The emulator against a driver other people proved on real glass: LCDd's
// own hd44780 driver (ConnectionType=i2c, LCDproc 0.5.9 in Debian) writes
// to a /dev/i2c-N that an LD_PRELOAD shim (testdata/i2cshim.c) stands in
// for and logs; an LCDproc client over TCP asks LCDd to draw known text;
// the logged PCF8574 bytes, replayed into lcdemu with the timing model on
// (at the times LCDd wrote them), must show exactly that text, with no
// warning: LCDd's initialisation (four 8-bit function sets, 4-bit mode),
// its nibble order, its row addresses (0x00, 0x40, 0x14, 0x54 on 20x4),
// its delays and its charmap all agree with the emulator.
func TestLCDdDrawsOnEmulator(t *testing.T) {
	lcdd := "/usr/sbin/LCDd" // Debian's, not on a user's PATH
	if _, err := os.Stat(lcdd); err != nil {
		lcdd = needtool.Path(t, "LCDd", "apt-get install lcdproc; CI installs it")
	}
	drivers := lcddDriverPath(t)
	gcc := needtool.Path(t, "gcc", "it builds the LD_PRELOAD i2c-dev shim")
	shim := buildShim(t, gcc)

	backpack := lcddPins{RS: 0x01, RW: 0x02, EN: 0x04, BL: 0x08, D4: 0x10, D5: 0x20, D6: 0x40, D7: 0x80}
	tests := []struct {
		name       string
		rows, cols int
		pins       lcddPins
		emuPins    lcdemu.PinMap
		blHigh     bool // the backlight pin is high when the light is on
		lines      []string
		want       []string
	}{
		{
			// The common backpack (P0=RS ... P3=BL, P4-P7=D4-D7), the
			// wiring of lcdemu.DefaultPinMap and our boards; LCDd needs
			// it spelled out (i2c_line_*) with BacklightInvert=yes.
			name: "16x2 common backpack", rows: 2, cols: 16, pins: backpack, emuPins: lcdemu.DefaultPinMap, blHigh: true,
			lines: []string{"Hello, LCDd!", "0123456789abcdef"},
			want:  []string{"Hello, LCDd!    ", "0123456789abcdef"},
		},
		{
			// Rows 3 and 4 continue rows 1 and 2 in DDRAM (0x14, 0x54).
			// LCDd's charmap turns '\' into '/' (the A00 ROM has ¥ at 0x5C)
			// and Latin-1 ¥ (0xA5) into 0x5C.
			name: "20x4 common backpack", rows: 4, cols: 20, pins: backpack, emuPins: lcdemu.DefaultPinMap, blHigh: true,
			lines: []string{"row 1 at DDRAM 0x00", "row 2 at DDRAM 0x40", "row 3 at DDRAM 0x14", "a\\\\b \xa5100 [end] ~"},
			want:  []string{"row 1 at DDRAM 0x00 ", "row 2 at DDRAM 0x40 ", "row 3 at DDRAM 0x14 ", "a/b ¥100 [end] →    "},
		},
		{
			// LCDd's default wiring (hd44780-i2c.c: P0-P3=D4-D7, P4=RS,
			// P5=RW, P6=EN, P7=backlight active low), no i2c_line_* given.
			name: "16x2 LCDd default wiring", rows: 2, cols: 16,
			emuPins: lcdemu.PinMap{D4: 0, D5: 1, D6: 2, D7: 3, RS: 4, RW: 5, EN: 6, BL: 7},
			lines:   []string{"default wiring", "D4-D7 on P0-P3"},
			want:    []string{"default wiring  ", "D4-D7 on P0-P3  "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "i2c.log")
			dev := "/dev/i2c-lcdemu-" + strconv.Itoa(os.Getpid())
			port := freePort(t)
			conf := lcddConf(drivers, port, dev, tt.rows, tt.cols, tt.pins)
			if err := os.WriteFile(filepath.Join(dir, "LCDd.conf"), []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			cmd := exec.Command(lcdd, "-f", "-s", "0", "-r", "3", "-c", filepath.Join(dir, "LCDd.conf"))
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+shim, "I2CSHIM_DEVICE="+dev, "I2CSHIM_LOG="+logPath)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatalf("start LCDd: %v", err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
			})

			client := dialLCDd(t, port, exited, &out)
			client.do(t, "hello")
			client.do(t, "client_set -name lcdemu-check")
			client.do(t, "screen_add s")
			client.do(t, "screen_set s -priority foreground -heartbeat off -backlight on")
			for i, line := range tt.lines {
				w := fmt.Sprintf("w%d", i+1)
				client.do(t, "widget_add s "+w+" string")
				client.do(t, fmt.Sprintf("widget_set s %s 1 %d {%s}", w, i+1, line))
			}

			var bus *lcdemu.Bus
			deadline := time.Now().Add(20 * time.Second)
			for {
				bus = replay(t, logPath, tt.rows, tt.cols, tt.emuPins)
				if equalLines(bus.Text(), tt.want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the emulator never showed what LCDd was asked to draw:\n%s\nwant %q\nwarnings: %v\nLCDd said:\n%s",
						bus.Render(), tt.want, bus.Warnings(), out.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
			if w := bus.Warnings(); len(w) > 0 {
				t.Errorf("LCDd's byte stream drew the text, but the emulator warns: %v", w)
			}
			st := bus.State()
			if !st.Ready || !st.FourBit || !st.TwoLines || !st.DisplayOn || st.CursorOn || st.BlinkOn {
				t.Errorf("controller state after LCDd's init: %+v; want 4-bit, two lines, display on, no cursor", st)
			}
			if tt.blHigh && !st.Backlight {
				t.Errorf("backlight pin low after screen_set -backlight on (BacklightInvert=yes): %+v", st)
			}
		})
	}
}

// lcddPins are LCDd's i2c_line_* settings: the PCF8574 bit of each LCD
// line. The zero value leaves LCDd's defaults.
type lcddPins struct{ RS, RW, EN, BL, D4, D5, D6, D7 byte }

func lcddConf(drivers string, port int, dev string, rows, cols int, p lcddPins) string {
	var b strings.Builder
	fmt.Fprintf(&b, `[server]
DriverPath=%s
Driver=hd44780
Bind=127.0.0.1
Port=%d
ReportToSyslog=no
Foreground=yes
Hello=""
GoodBye=""
ServerScreen=blank
Backlight=open
Heartbeat=off
WaitTime=5

[hd44780]
ConnectionType=i2c
Device=%s
Port=0x27
Size=%dx%d
Keypad=no
Backlight=yes
CharMap=hd44780_default
DelayBus=true
`, drivers, port, dev, cols, rows)
	if p != (lcddPins{}) {
		fmt.Fprintf(&b, "BacklightInvert=yes\ni2c_line_RS=%#02x\ni2c_line_RW=%#02x\ni2c_line_EN=%#02x\ni2c_line_BL=%#02x\n"+
			"i2c_line_D4=%#02x\ni2c_line_D5=%#02x\ni2c_line_D6=%#02x\ni2c_line_D7=%#02x\n",
			p.RS, p.RW, p.EN, p.BL, p.D4, p.D5, p.D6, p.D7)
	}
	return b.String()
}

// lcddDriverPath is the directory of LCDd's driver modules (hd44780.so).
func lcddDriverPath(t *testing.T) string {
	t.Helper()
	for _, pattern := range []string{"/usr/lib/*/lcdproc/hd44780.so", "/usr/lib/lcdproc/hd44780.so", "/usr/local/lib/lcdproc/hd44780.so"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return filepath.Dir(m[0]) + "/"
		}
	}
	needtool.Missing(t, "LCDd's hd44780.so driver module not found (apt-get install lcdproc)")
	return ""
}

// buildShim compiles testdata/i2cshim.c into the test's temporary
// directory.
func buildShim(t *testing.T, gcc string) string {
	t.Helper()
	so := filepath.Join(t.TempDir(), "i2cshim.so")
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", so, "testdata/i2cshim.c", "-ldl").CombinedOutput()
	if err != nil {
		t.Fatalf("compile the i2c-dev shim: %v\n%s", err, out)
	}
	return so
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// lcddClient speaks the LCDproc text protocol, one request at a time.
type lcddClient struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialLCDd connects once LCDd listens (it binds after loading the driver).
func dialLCDd(t *testing.T, port int, exited <-chan error, out *bytes.Buffer) *lcddClient {
	t.Helper()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			t.Cleanup(func() { conn.Close() })
			return &lcddClient{conn: conn, r: bufio.NewReader(conn)}
		}
		select {
		case werr := <-exited:
			t.Fatalf("LCDd exited (%v) before listening:\n%s", werr, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("LCDd never listened on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// do sends one request and reads its answer: "connect ..." for hello,
// "success" otherwise; the asynchronous listen/ignore lines are skipped.
func (c *lcddClient) do(t *testing.T, req string) {
	t.Helper()
	c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write([]byte(req + "\n")); err != nil {
		t.Fatalf("LCDd %q: %v", req, err)
	}
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("LCDd %q: reading the answer: %v", req, err)
		}
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "listen "), strings.HasPrefix(line, "ignore "):
			continue
		case line == "success", req == "hello" && strings.HasPrefix(line, "connect "):
			return
		}
		t.Fatalf("LCDd %q answered %q", req, line)
	}
}

// replay feeds the shim's log into a fresh emulator with the timing model
// on. LCDd wrote to the shim, which returns at once; on a real bus each
// write blocks until its bytes are on the wire (180 µs for address and port
// byte at 100 kHz). So the emulator's clock (an lcdemu.Clock, which each
// transaction advances by its wire time) is advanced before each
// transaction by the time LCDd took between its two write calls: its own
// delays (uPause) and work. The emulator is powered on a second before
// LCDd's first write, as a display is long powered when LCDd starts.
func replay(t *testing.T, logPath string, rows, cols int, pins lcdemu.PinMap) *lcdemu.Bus {
	t.Helper()
	data, err := os.ReadFile(logPath)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	clock := new(lcdemu.Clock)
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: rows, Cols: cols, Pins: pins, Timing: true, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	clock.Sleep(time.Second)
	lines := strings.Split(string(data), "\n")
	// The last line may be half written.
	lines = lines[:len(lines)-1]
	var last int64
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) < 2 {
			t.Fatalf("shim log line %q", line)
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatalf("shim log line %q: %v", line, err)
		}
		if last != 0 {
			clock.Sleep(time.Duration(ns - last))
		}
		last = ns
		switch f[0] {
		case "O", "A", "C":
		case "W":
			if len(f) != 4 {
				t.Fatalf("shim log line %q", line)
			}
			addr, err1 := strconv.ParseUint(f[2], 16, 7)
			b, err2 := hex.DecodeString(f[3])
			if err1 != nil || err2 != nil {
				t.Fatalf("shim log line %q: %v %v", line, err1, err2)
			}
			if err := bus.Tx(uint16(addr), b, nil); err != nil {
				t.Fatalf("replaying %q: %v", line, err)
			}
		default:
			t.Fatalf("LCDd did something to the i2c device the shim does not fake: %q", line)
		}
	}
	return bus
}

func equalLines(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
