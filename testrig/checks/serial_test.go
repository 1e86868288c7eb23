package checks

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.bug.st/serial"
	"termlink/testrig/needtool"
)

// socatPair starts socat joining two PTYs and returns their paths: what is
// written to one is read from the other, as on a null-modem cable. It is
// stopped when the test ends.
func socatPair(t *testing.T) (near, far string) {
	t.Helper()
	bin := needtool.Path(t, "socat", "the serial stand-in is a socat PTY pair; apt-get install socat")
	dir := t.TempDir()
	near, far = filepath.Join(dir, "near"), filepath.Join(dir, "far")
	cmd := exec.Command(bin, "pty,raw,echo=0,link="+near, "pty,raw,echo=0,link="+far)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting socat: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err1 := os.Stat(near)
		_, err2 := os.Stat(far)
		if err1 == nil && err2 == nil {
			return near, far
		}
		select {
		case <-done:
			t.Fatal("socat exited before creating the PTYs")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("socat did not create the PTYs within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// farEnd opens the far PTY and runs f on every chunk read from it; what f
// returns is written back (nil: nothing, as with no jumper). It stops when
// the test ends.
func farEnd(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	p, err := serial.Open(path, &serial.Mode{BaudRate: 115200})
	if err != nil {
		t.Fatalf("opening the far end %s: %v", path, err)
	}
	if err := p.SetReadTimeout(20 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 4096)
		for ctx.Err() == nil {
			n, err := p.Read(buf)
			if err != nil {
				return
			}
			if n == 0 {
				continue
			}
			if out := f(buf[:n]); len(out) > 0 {
				if _, err := p.Write(out); err != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		p.Close()
	})
}

func echo(b []byte) []byte { return b }

// wrongBaud stands in for a far end at another baud rate: bytes arrive
// mangled (shifted bits, framing errors) and some are lost.
func wrongBaud() func([]byte) []byte {
	var n int
	return func(b []byte) []byte {
		out := make([]byte, 0, len(b))
		for _, c := range b {
			n++
			if n%5 == 0 {
				continue // a framing error swallows a byte
			}
			out = append(out, c>>1|0x80)
		}
		return out
	}
}

func TestSerialLoopback(t *testing.T) {
	tests := []struct {
		name     string
		far      func([]byte) []byte
		pass     bool
		summary  string
		received func(sent float64) bool
	}{
		{"jumper", echo, true, "all 1536 bytes came back intact at 9600, 115200 baud", func(s float64) bool { return true }},
		{"no jumper", func([]byte) []byte { return nil }, false, "nothing received: is TX wired to RX?", func(float64) bool { return true }},
		{"wrong baud", wrongBaud(), false, "is the far end at the same baud rate?", func(float64) bool { return true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			near, far := socatPair(t)
			farEnd(t, far, tt.far)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			// A jumper's pattern ends as soon as all of it is back, so a
			// long quiet costs nothing there; under qemu on a busy
			// machine the echo took over 150 ms once (make test's
			// test-arm: a pattern counted missing, its bytes then
			// "extra" in the next; the test was wrong). The refusals
			// keep the short one: it is how long they wait.
			quiet := 150 * time.Millisecond
			if tt.pass {
				quiet = 3 * time.Second
			}
			res := SerialLoopback(ctx, near, SerialOptions{Bytes: 256, Quiet: quiet})
			var b strings.Builder
			res.WriteText(&b)
			t.Logf("%s in %v:\n%s", tt.name, time.Since(start).Round(time.Millisecond), b.String())
			if res.Pass != tt.pass || !strings.Contains(res.Summary, tt.summary) {
				t.Fatalf("pass %v, summary %q; want %v and %q", res.Pass, res.Summary, tt.pass, tt.summary)
			}
			sent, _ := res.Metric("bytes_sent")
			recv, _ := res.Metric("bytes_received")
			corrupted, _ := res.Metric("bytes_corrupted")
			switch tt.name {
			case "jumper":
				if sent != 1536 || recv != 1536 || corrupted != 0 {
					t.Errorf("sent %v received %v corrupted %v", sent, recv, corrupted)
				}
				if v, ok := res.Metric("baud_115200_bytes_per_s"); !ok || v <= 0 {
					t.Errorf("no throughput at 115200: %v %v", v, ok)
				}
			case "no jumper":
				if recv != 0 || sent != 2*256 {
					t.Errorf("sent %v received %v; want one pattern per baud and nothing back", sent, recv)
				}
			case "wrong baud":
				if corrupted == 0 {
					t.Errorf("no corrupted bytes counted")
				}
			}
		})
	}
}

func TestSerialLoopbackOpenErrors(t *testing.T) {
	notSerial := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notSerial, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	inject := func(err error) func(string, *serial.Mode) (SerialPort, error) {
		return func(string, *serial.Mode) (SerialPort, error) { return nil, err }
	}
	tests := []struct {
		name string
		path string
		open func(string, *serial.Mode) (SerialPort, error)
		want string
	}{
		{"missing", "/dev/ttyTERMRIG-NOPE", nil, "/dev/ttyTERMRIG-NOPE not found: enable the UART (raspi-config nonint do_serial_hw 0)"},
		{"not a tty", notSerial, nil, notSerial + " not a serial port"},
		{"permission", "/dev/ttyAMA0", inject(&fs.PathError{Op: "open", Path: "/dev/ttyAMA0", Err: syscall.EACCES}),
			"/dev/ttyAMA0 permission denied: join the dialout group (sudo usermod -aG dialout $USER"},
		{"busy", "/dev/ttyUSB0", inject(&serial.PortError{}), // the zero PortError is PortBusy
			"/dev/ttyUSB0 busy: another process has it open (a login console? raspi-config nonint do_serial_cons 1; find it with fuser /dev/ttyUSB0)"},
		{"other", "/dev/ttyS0", inject(errors.New("boom")), "/dev/ttyS0 boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := SerialLoopback(context.Background(), tt.path, SerialOptions{Open: tt.open})
			if res.Pass || !strings.Contains(res.Summary, tt.want) {
				t.Fatalf("pass %v, summary %q; want failure with %q", res.Pass, res.Summary, tt.want)
			}
		})
	}
}
