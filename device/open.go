package device

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"
	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"

	"termlink/boards"
	"termlink/device/input"
	"termlink/display/console"
	"termlink/testrig/lcdemu"
)

// Parts is an opened profile: the pieces its drivers need. Only the
// fields for the profile's display kind and keypad are set.
type Parts struct {
	Profile *boards.Profile

	// hd44780-i2c: the bus and the backpack's address.
	Bus  i2c.BusCloser
	Addr uint16

	// hd44780-gpio: the LCD lines.
	LCD *LCDLines

	// Keypad lines, when the profile has a keypad.
	Keypad *KeypadLines

	// console with a serial port: the port, reopened when it comes back
	// after being unplugged.
	Serial *console.Serial

	// console without a serial port, hd44780-emu: this process's
	// terminal, in raw mode.
	TTY *console.TTY
}

// EmuAddr is the I2C address of the emulated backpack (hd44780-emu).
const EmuAddr = 0x27

// LCDLines are the GPIO lines of a parallel HD44780 (4-bit, R/W grounded).
type LCDLines struct {
	RS, EN, D4, D5, D6, D7 gpio.PinIO
	Backlight              gpio.PinIO // nil when the profile has none
}

// KeypadLines are a matrix keypad's lines, ready for input.New.
type KeypadLines struct {
	Rows []gpio.PinOut
	Cols []gpio.PinIn
}

// Close releases what Open opened.
func (d *Parts) Close() error {
	var errs []error
	if d.Bus != nil {
		errs = append(errs, d.Bus.Close())
	}
	if d.Serial != nil {
		errs = append(errs, d.Serial.Close())
	}
	if d.TTY != nil {
		errs = append(errs, d.TTY.Close())
	}
	return errors.Join(errs...)
}

// OpenError is a failure to open part of a board, with a hint of what to
// check.
type OpenError struct {
	Board string // profile name; "" when not opening a profile
	What  string // "I2C bus \"1\"", "GPIO pin GPIO25 (display.pins.rs)", ...
	Hint  string // what to check, for a human
	// Node is the device node that is missing or not allowed
	// ("/dev/i2c-1", "/dev/gpiochip0", "/dev/ttyUSB0"), when that is the
	// problem; Err then is the error of stat or open on it.
	Node string
	Pin  string // the GPIO pin name, for a pin
	Err  error
}

func (e *OpenError) Error() string {
	s := fmt.Sprintf("open %s: %v", e.What, e.Err)
	if e.Board != "" {
		s = "board " + e.Board + ": " + s
	}
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s
}

func (e *OpenError) Unwrap() error { return e.Err }

// Hints in OpenError.
const (
	HintI2CMissing    = "enable I2C with raspi-config (Interface Options > I2C), or dtparam=i2c_arm=on in config.txt, then reboot"
	HintI2CPermission = "add the user to the i2c group (sudo usermod -aG i2c $USER) and log in again"
	HintI2CBus        = "check display.bus"
	HintGPIOMissing   = "no GPIO chip found (/dev/gpiochip0): is this a Raspberry Pi, with the gpio driver loaded?"
	HintGPIOPerm      = "add the user to the gpio group (sudo usermod -aG gpio $USER) and log in again"
	HintGPIOName      = "check the pin name: periph names the lines GPIO0-GPIO27 on a Raspberry Pi"
	HintSerialUART    = "enable the serial port with raspi-config (Interface Options > Serial Port: login shell No, hardware Yes), then reboot"
	HintSerialUSB     = "plug in the USB serial adapter (ls /dev/ttyUSB* /dev/ttyACM*) or fix serial.port"
	HintSerialPerm    = "add the user to the dialout group (sudo usermod -aG dialout $USER) and log in again"
	HintSerialBusy    = "another program (a getty login on the serial console, minicom?) holds the port: disable the serial login shell with raspi-config"
	HintTTY           = "run it in an interactive terminal, or pick a board with a serial console (rpi-serial-console)"
)

// system is what Open touches, replaceable in tests.
type system struct {
	hostInit   func() error
	stat       func(name string) (fs.FileInfo, error)
	canOpen    func(name string) error // open read-write and close
	i2cOpen    func(name string) (i2c.BusCloser, error)
	i2cNames   func() []string
	pin        func(name string) gpio.PinIO
	openSerial func(ctx context.Context, path string, baud int) (*console.Serial, error)
	openTTY    func() (*console.TTY, error)
}

func realSystem() *system {
	return &system{
		hostInit: initPeriphHost,
		stat:     os.Stat,
		canOpen: func(name string) error {
			f, err := os.OpenFile(name, os.O_RDWR, 0)
			if err == nil {
				f.Close()
			}
			return err
		},
		i2cOpen: i2creg.Open,
		i2cNames: func() []string {
			var names []string
			for _, r := range i2creg.All() {
				names = append(names, r.Name)
			}
			return names
		},
		pin:        gpioreg.ByName,
		openSerial: console.OpenSerial,
		openTTY:    console.OpenTTY,
	}
}

// Open opens the hardware a profile describes. periph's host drivers are
// initialised (initPeriphHost) here, and only when the profile has an LCD
// or a keypad. Errors are *OpenError with a hint of what to check. Close
// the Parts when done.
func OpenParts(ctx context.Context, p *boards.Profile) (*Parts, error) {
	return realSystem().open(ctx, p)
}

func (s *system) open(ctx context.Context, p *boards.Profile) (_ *Parts, err error) {
	if p == nil {
		return nil, errors.New("device: OpenParts: nil profile")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("board %s: %w", p.Name, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("board %s: invalid profile: %w", p.Name, err)
	}
	d := &Parts{Profile: p}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	fail := func(what, hint string, err error) error {
		return &OpenError{Board: p.Name, What: what, Hint: hint, Err: err}
	}

	disp := p.Display
	if disp.Kind == boards.HD44780I2C || disp.Kind == boards.HD44780GPIO || hasKeypadPins(p) {
		if err := s.hostInit(); err != nil {
			return nil, fail("periph host drivers", "", err)
		}
	}

	switch disp.Kind {
	case boards.HD44780I2C:
		bus, err := s.openI2C(p.Name, disp.Bus)
		if err != nil {
			return nil, err
		}
		d.Bus, d.Addr = bus, uint16(disp.Address.I2C)
	case boards.HD44780GPIO:
		lp := disp.Pins
		l := &LCDLines{}
		for _, f := range []struct {
			field string
			name  string
			dst   *gpio.PinIO
		}{{"rs", lp.RS, &l.RS}, {"en", lp.EN, &l.EN}, {"d4", lp.D4, &l.D4}, {"d5", lp.D5, &l.D5},
			{"d6", lp.D6, &l.D6}, {"d7", lp.D7, &l.D7}, {"backlight", lp.Backlight, &l.Backlight}} {
			if f.name == "" {
				continue
			}
			pin, err := s.gpio(p, "display.pins."+f.field, f.name)
			if err != nil {
				return nil, err
			}
			*f.dst = pin
		}
		d.LCD = l
	case boards.HD44780Emu:
		// The emulated glass is drawn in this terminal, whose keyboard is
		// the keypad; the real driver talks to the emulator on its bus.
		tty, err := s.openTTY()
		if err != nil {
			return nil, fail("this terminal", HintTTY, err)
		}
		d.TTY = tty
		bus, err := lcdemu.New(&lcdemu.Opts{Rows: disp.Rows, Cols: disp.Cols})
		if err != nil {
			return nil, fail("the HD44780 emulator", "", err)
		}
		d.Bus, d.Addr = bus, EmuAddr
	case boards.Console:
		if sp := p.Serial; sp != nil {
			what := "serial port " + sp.Port
			if _, err := s.stat(sp.Port); errors.Is(err, fs.ErrNotExist) {
				return nil, fail(what, serialHint(sp.Port), fmt.Errorf("%s does not exist", sp.Port))
			}
			// The port stays open until Close, not until ctx ends: the
			// last screen ("offline: stopped") is drawn after a stop.
			port, err := s.openSerial(context.WithoutCancel(ctx), sp.Port, sp.Baud)
			if err != nil {
				hint := ""
				switch {
				case errors.Is(err, fs.ErrPermission):
					hint = HintSerialPerm
				case errors.Is(err, fs.ErrNotExist):
					hint = serialHint(sp.Port)
				case strings.Contains(err.Error(), "in use"):
					hint = HintSerialBusy
				}
				return nil, fail(what, hint, err)
			}
			d.Serial = port
		} else {
			tty, err := s.openTTY()
			if err != nil {
				return nil, fail("this terminal", HintTTY, err)
			}
			d.TTY = tty
		}
	}

	if hasKeypadPins(p) {
		kl, err := s.keypadLines(p)
		if err != nil {
			return nil, err
		}
		d.Keypad = kl
	}
	return d, nil
}

// hasKeypadPins reports whether the profile has a matrix keypad on GPIO
// lines (an lcdproc display's keypad block may only configure text entry
// for LCDd's keys).
func hasKeypadPins(p *boards.Profile) bool {
	return p.Keypad != nil && len(p.Keypad.Rows)+len(p.Keypad.Cols) > 0
}

// gpio looks a pin up by name; a missing pin gets a hint about why.
func (s *system) gpio(p *boards.Profile, field, name string) (gpio.PinIO, error) {
	return s.pinNamed(p.Name, field, name)
}

// openI2C opens an I²C bus, explaining a missing or forbidden node.
func (s *system) openI2C(board, busName string) (i2c.BusCloser, error) {
	what := fmt.Sprintf("I2C bus %q", busName)
	if dev := i2cDevice(busName); dev != "" {
		if _, err := s.stat(dev); errors.Is(err, fs.ErrNotExist) {
			return nil, &OpenError{Board: board, What: what, Hint: HintI2CMissing, Node: dev, Err: err}
		}
		if err := s.canOpen(dev); errors.Is(err, fs.ErrPermission) {
			return nil, &OpenError{Board: board, What: what, Hint: HintI2CPermission, Node: dev, Err: err}
		}
	}
	bus, err := s.i2cOpen(busName)
	if err != nil {
		hint := HintI2CBus
		if names := s.i2cNames(); len(names) > 0 {
			sort.Strings(names)
			hint += " (buses present: " + strings.Join(names, ", ") + ")"
		} else {
			hint += "; no I2C bus found: " + HintI2CMissing
		}
		return nil, &OpenError{Board: board, What: what, Hint: hint, Err: err}
	}
	return bus, nil
}

// OpenI2C opens an I²C bus by periph name ("1", "I2C1", "/dev/i2c-1"),
// for checks given a bus rather than a board; errors are *OpenError.
func OpenI2C(bus string) (i2c.BusCloser, error) {
	s := realSystem()
	if err := s.hostInit(); err != nil {
		return nil, &OpenError{What: "periph host drivers", Err: err}
	}
	return s.openI2C("", bus)
}

// OpenPin looks a GPIO pin up by periph name ("GPIO17"), for checks given
// pins rather than a board; errors are *OpenError.
func OpenPin(name string) (gpio.PinIO, error) {
	s := realSystem()
	if err := s.hostInit(); err != nil {
		return nil, &OpenError{What: "periph host drivers", Err: err}
	}
	return s.pinNamed("", "", name)
}

// OpenKeypad opens only the keypad of a profile (its GPIO lines) and
// starts its scanner, for the keypad check; opts gives what the profile
// does not (logger, stuck-key time).
func OpenKeypad(ctx context.Context, p *boards.Profile, opts input.Opts) (*input.Keypad, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("board %s: invalid profile: %w", p.Name, err)
	}
	if !hasKeypadPins(p) {
		return nil, fmt.Errorf("board %s has no keypad", p.Name)
	}
	s := realSystem()
	if err := s.hostInit(); err != nil {
		return nil, &OpenError{Board: p.Name, What: "periph host drivers", Err: err}
	}
	kl, err := s.keypadLines(p)
	if err != nil {
		return nil, err
	}
	return NewKeypad(&Parts{Profile: p, Keypad: kl}, opts)
}

func (s *system) keypadLines(p *boards.Profile) (*KeypadLines, error) {
	k := p.Keypad
	kl := &KeypadLines{}
	for i, name := range k.Rows {
		pin, err := s.gpio(p, fmt.Sprintf("keypad.rows[%d]", i), name)
		if err != nil {
			return nil, err
		}
		kl.Rows = append(kl.Rows, pin)
	}
	for i, name := range k.Cols {
		pin, err := s.gpio(p, fmt.Sprintf("keypad.cols[%d]", i), name)
		if err != nil {
			return nil, err
		}
		kl.Cols = append(kl.Cols, pin)
	}
	return kl, nil
}

// pinNamed looks a pin up by name; a missing pin gets a hint about why.
func (s *system) pinNamed(board, field, name string) (gpio.PinIO, error) {
	if pin := s.pin(name); pin != nil {
		return pin, nil
	}
	what := "GPIO pin " + name
	if field != "" {
		what += " (" + field + ")"
	}
	e := &OpenError{Board: board, What: what, Pin: name, Hint: HintGPIOName, Err: errors.New("not found")}
	chips := "/dev/gpiochip0"
	if _, err := s.stat(chips); errors.Is(err, fs.ErrNotExist) {
		e.Hint, e.Node, e.Err = HintGPIOMissing, chips, err
	} else if err := s.canOpen(chips); errors.Is(err, fs.ErrPermission) {
		e.Hint, e.Node, e.Err = HintGPIOPerm, chips, err
	}
	return nil, e
}

var i2cNumber = regexp.MustCompile(`^(?:I2C|/dev/i2c-)?([0-9]+)$`)

// I2CNode maps a periph bus name ("1", "I2C1", "/dev/i2c-1") to its
// /dev/i2c-N node, or "" when the name is not a Linux bus number.
func I2CNode(bus string) string { return i2cDevice(bus) }

func i2cDevice(bus string) string {
	m := i2cNumber.FindStringSubmatch(bus)
	if m == nil {
		return ""
	}
	return "/dev/i2c-" + m[1]
}

func serialHint(port string) string {
	base := filepath.Base(port)
	if strings.HasPrefix(base, "ttyUSB") || strings.HasPrefix(base, "ttyACM") {
		return HintSerialUSB
	}
	return HintSerialUART
}
