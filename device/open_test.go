package device

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"

	"termlink/boards"
	"termlink/display/console"
	"termlink/internal/testwait"
	"termlink/testrig/needtool"
)

type fakeBus struct {
	name   string
	closed bool
}

func (b *fakeBus) String() string                    { return b.name }
func (b *fakeBus) Tx(addr uint16, w, r []byte) error { return nil }
func (b *fakeBus) SetSpeed(f physic.Frequency) error { return nil }
func (b *fakeBus) Close() error                      { b.closed = true; return nil }

type fakePin struct {
	gpio.PinIO // INVALID: only the name matters here
	name       string
}

func (p *fakePin) Name() string   { return p.name }
func (p *fakePin) String() string { return p.name }

// fakeFS is a set of device nodes with their access errors.
type fakeFS map[string]error

// fakeSystem has every device present and allowed, and every pin.
func fakeSystem(t *testing.T) (*system, *fakeBus, *int, fakeFS) {
	bus := &fakeBus{name: "/dev/i2c-1"}
	inits := new(int)
	files := fakeFS{"/dev/i2c-1": nil, "/dev/gpiochip0": nil, "/dev/serial0": nil}
	s := &system{
		hostInit: func() error { *inits++; return nil },
		stat: func(name string) (fs.FileInfo, error) {
			if _, ok := files[name]; !ok {
				return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
			}
			return nil, nil
		},
		canOpen: func(name string) error {
			if err, ok := files[name]; ok {
				return err
			}
			return &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		},
		i2cOpen: func(name string) (i2c.BusCloser, error) {
			if name == "1" {
				return bus, nil
			}
			return nil, fmt.Errorf("i2creg: can't open unknown bus: %q", name)
		},
		i2cNames: func() []string { return []string{"/dev/i2c-1"} },
		pin: func(name string) gpio.PinIO {
			if strings.HasPrefix(name, "GPIO") {
				return &fakePin{PinIO: gpio.INVALID, name: name}
			}
			return nil
		},
		openSerial: func(ctx context.Context, path string, baud int) (*console.Serial, error) {
			return nil, errors.New("no serial in this fake")
		},
		openTTY: func() (*console.TTY, error) { return nil, errors.New("no tty in this fake") },
	}
	return s, bus, inits, files
}

func mustLoadBoard(t *testing.T, name string) *boards.Profile {
	t.Helper()
	p, err := boards.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func openErr(t *testing.T, err error) *OpenError {
	t.Helper()
	var oe *OpenError
	if !errors.As(err, &oe) {
		t.Fatalf("error %v (%T) is not an *OpenError", err, err)
	}
	return oe
}

func TestOpenI2C(t *testing.T) {
	s, bus, inits, _ := fakeSystem(t)
	d, err := s.open(context.Background(), mustLoadBoard(t, "rpi-lcd2004-i2c"))
	if err != nil {
		t.Fatal(err)
	}
	if *inits != 1 {
		t.Errorf("host.Init called %d times", *inits)
	}
	if d.Bus != bus || d.Addr != 0x27 || d.LCD != nil || d.Serial != nil || d.TTY != nil {
		t.Errorf("device %+v", d)
	}
	if d.Keypad == nil || len(d.Keypad.Rows) != 4 || len(d.Keypad.Cols) != 4 || d.Keypad.Cols[3].Name() != "GPIO21" {
		t.Fatalf("keypad %+v", d.Keypad)
	}
	if err := d.Close(); err != nil || !bus.closed {
		t.Fatalf("Close = %v, bus closed %v", err, bus.closed)
	}
}

func TestOpenI2CErrors(t *testing.T) {
	t.Run("no /dev/i2c-1", func(t *testing.T) {
		s, _, _, files := fakeSystem(t)
		delete(files, "/dev/i2c-1")
		_, err := s.open(context.Background(), mustLoadBoard(t, "rpi-lcd1602-i2c"))
		oe := openErr(t, err)
		if oe.Hint != HintI2CMissing || !strings.Contains(err.Error(), "enable I2C with raspi-config") ||
			!errors.Is(err, fs.ErrNotExist) || oe.Node != "/dev/i2c-1" {
			t.Errorf("%v", err)
		}
	})
	t.Run("permission", func(t *testing.T) {
		s, _, _, files := fakeSystem(t)
		files["/dev/i2c-1"] = &fs.PathError{Op: "open", Path: "/dev/i2c-1", Err: syscall.EACCES}
		_, err := s.open(context.Background(), mustLoadBoard(t, "rpi-lcd1602-i2c"))
		if oe := openErr(t, err); oe.Hint != HintI2CPermission || !strings.Contains(err.Error(), "add the user to the i2c group") {
			t.Errorf("%v", err)
		}
		if !errors.Is(err, fs.ErrPermission) {
			t.Errorf("not fs.ErrPermission: %v", err)
		}
	})
	t.Run("unknown bus", func(t *testing.T) {
		s, _, _, _ := fakeSystem(t)
		p := mustLoadBoard(t, "rpi-lcd1602-i2c")
		p.Display.Bus = "FT232H"
		_, err := s.open(context.Background(), p)
		if oe := openErr(t, err); !strings.Contains(oe.Hint, "check display.bus (buses present: /dev/i2c-1)") {
			t.Errorf("%v", err)
		}
	})
	t.Run("no bus at all", func(t *testing.T) {
		s, _, _, _ := fakeSystem(t)
		s.i2cNames = func() []string { return nil }
		p := mustLoadBoard(t, "rpi-lcd1602-i2c")
		p.Display.Bus = "I2C7"
		s.stat = func(string) (fs.FileInfo, error) { return nil, nil }
		_, err := s.open(context.Background(), p)
		if oe := openErr(t, err); !strings.Contains(oe.Hint, "no I2C bus found") {
			t.Errorf("%v", err)
		}
	})
	t.Run("host init", func(t *testing.T) {
		s, _, _, _ := fakeSystem(t)
		s.hostInit = func() error { return errors.New("bcm283x: boom") }
		_, err := s.open(context.Background(), mustLoadBoard(t, "rpi-lcd1602-i2c"))
		if oe := openErr(t, err); oe.What != "periph host drivers" || !strings.Contains(err.Error(), "boom") {
			t.Errorf("%v", err)
		}
	})
}

func TestOpenGPIO(t *testing.T) {
	s, _, _, _ := fakeSystem(t)
	d, err := s.open(context.Background(), mustLoadBoard(t, "rpi-lcd1602-gpio"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.LCD == nil || d.LCD.RS.Name() != "GPIO25" || d.LCD.D7.Name() != "GPIO22" || d.LCD.Backlight != nil {
		t.Fatalf("LCD %+v", d.LCD)
	}
	if len(d.Keypad.Cols) != 3 {
		t.Fatalf("keypad %+v", d.Keypad)
	}
}

func TestOpenGPIOErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(fakeFS)
		hint  string
	}{
		{"no gpio chip", func(f fakeFS) { delete(f, "/dev/gpiochip0") }, HintGPIOMissing},
		{"permission", func(f fakeFS) { f["/dev/gpiochip0"] = fs.ErrPermission }, HintGPIOPerm},
		{"wrong name", func(f fakeFS) {}, HintGPIOName},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, bus, _, files := fakeSystem(t)
			tt.setup(files)
			s.pin = func(name string) gpio.PinIO {
				if name == "GPIO21" {
					return nil
				}
				return &fakePin{PinIO: gpio.INVALID, name: name}
			}
			_, err := s.open(context.Background(), mustLoadBoard(t, "rpi-lcd2004-i2c"))
			oe := openErr(t, err)
			if oe.Hint != tt.hint || oe.What != "GPIO pin GPIO21 (keypad.cols[3])" {
				t.Errorf("%v", err)
			}
			if !bus.closed {
				t.Error("the I2C bus opened before the failure was not closed")
			}
		})
	}
	s, _, _, _ := fakeSystem(t)
	s.pin = func(string) gpio.PinIO { return nil }
	_, err := s.open(context.Background(), mustLoadBoard(t, "rpi-lcd1602-gpio"))
	if oe := openErr(t, err); oe.What != "GPIO pin GPIO25 (display.pins.rs)" {
		t.Errorf("%v", err)
	}
}

func TestOpenSerialErrors(t *testing.T) {
	for _, tt := range []struct {
		name    string
		port    string
		openErr error
		hint    string
	}{
		{"uart missing", "/dev/serial0", nil, HintSerialUART},
		{"usb missing", "/dev/ttyUSB0", nil, HintSerialUSB},
		{"permission", "/dev/serial0", fmt.Errorf("console: open serial port: %w", fs.ErrPermission), HintSerialPerm},
		{"busy", "/dev/serial0", errors.New("console: open serial port /dev/serial0: in use by another program: busy"), HintSerialBusy},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _, inits, files := fakeSystem(t)
			if tt.openErr == nil {
				delete(files, tt.port)
			} else {
				s.openSerial = func(context.Context, string, int) (*console.Serial, error) { return nil, tt.openErr }
			}
			p := mustLoadBoard(t, "rpi-serial-console")
			p.Serial.Port = tt.port
			_, err := s.open(context.Background(), p)
			if oe := openErr(t, err); oe.Hint != tt.hint {
				t.Errorf("hint %q for %v", oe.Hint, err)
			}
			if *inits != 0 {
				t.Error("host.Init called for a serial console")
			}
		})
	}
}

func TestOpenSim(t *testing.T) {
	s, _, inits, _ := fakeSystem(t)
	_, err := s.open(context.Background(), mustLoadBoard(t, "sim"))
	if oe := openErr(t, err); oe.Hint != HintTTY || oe.What != "this terminal" {
		t.Errorf("%v", err)
	}
	// With a terminal (a PTY standing in for it): raw mode, restored on Close.
	master, term, err := pty.Open()
	if err != nil {
		t.Skipf("no PTY: %v", err)
	}
	defer master.Close()
	defer term.Close()
	s.openTTY = func() (*console.TTY, error) { return console.NewTTY(term) }
	d, err := s.open(context.Background(), mustLoadBoard(t, "sim"))
	if err != nil {
		t.Fatal(err)
	}
	if d.TTY == nil || *inits != 0 {
		t.Fatalf("TTY %v, host.Init calls %d", d.TTY, *inits)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesBadInput(t *testing.T) {
	s, _, _, _ := fakeSystem(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.open(ctx, mustLoadBoard(t, "sim")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if _, err := s.open(context.Background(), nil); err == nil {
		t.Error("nil profile opened")
	}
	p := mustLoadBoard(t, "rpi-lcd1602-i2c")
	p.Display.Address = boards.Address{I2C: 0x50}
	if _, err := s.open(context.Background(), p); err == nil || !strings.Contains(err.Error(), "display.address") {
		t.Errorf("invalid profile: %v", err)
	}
}

// The real Open on this machine, which has no I2C bus or GPIO chip: the
// errors must point at what to enable.
func TestOpenRealHostWithoutHardware(t *testing.T) {
	if _, err := os.Stat("/dev/i2c-1"); err == nil {
		t.Skip("this machine has /dev/i2c-1")
	}
	_, err := OpenParts(context.Background(), mustLoadBoard(t, "rpi-lcd1602-i2c"))
	if oe := openErr(t, err); oe.Hint != HintI2CMissing {
		t.Errorf("%v", err)
	}
	_, err = OpenParts(context.Background(), mustLoadBoard(t, "rpi-lcd1602-gpio"))
	if oe := openErr(t, err); !strings.Contains(oe.What, "display.pins.rs") {
		t.Errorf("%v", err)
	}
	p := mustLoadBoard(t, "rpi-serial-console")
	p.Serial.Port = filepath.Join(t.TempDir(), "ttyUSB0")
	_, err = OpenParts(context.Background(), p)
	if oe := openErr(t, err); oe.Hint != HintSerialUSB {
		t.Errorf("%v", err)
	}
}

// The real Open of a serial console on a PTY pair.
func TestOpenRealSerial(t *testing.T) {
	needtool.Path(t, "socat", "a PTY pair for the serial port; apt-get install socat")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	cmd := exec.Command("socat", "pty,raw,echo=0,link="+a, "pty,raw,echo=0,link="+b)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	testwait.UntilOK(t, "socat's PTYs", func() error { _, err := os.Stat(b); return err })
	p := mustLoadBoard(t, "rpi-serial-console")
	p.Serial.Port = b
	d, err := OpenParts(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Serial == nil || !d.Serial.Connected() {
		t.Fatalf("serial %+v", d.Serial)
	}
	peer, err := os.OpenFile(a, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if _, err := d.Serial.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2)
	if _, err := peer.Read(buf); err != nil || string(buf) != "ok" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
}
