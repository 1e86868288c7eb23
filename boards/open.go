package boards

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
	"periph.io/x/host/v3"

	"termlink/display/console"
)

// Device is an opened profile: the pieces its drivers need. Only the
// fields for the profile's display kind and keypad are set.
type Device struct {
	Profile *Profile

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

	// console without a serial port: this process's terminal, in raw mode.
	TTY *console.TTY
}

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
func (d *Device) Close() error {
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
	Board string // profile name
	What  string // "I2C bus \"1\"", "GPIO pin GPIO25 (display.pins.rs)", ...
	Hint  string // what to check, for a human
	Err   error
}

func (e *OpenError) Error() string {
	s := fmt.Sprintf("boards: %s: open %s: %v", e.Board, e.What, e.Err)
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
		hostInit: func() error { _, err := host.Init(); return err },
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
// initialised (host.Init) here, and only when the profile has an LCD or a
// keypad. Errors are *OpenError with a hint of what to check. Close the
// Device when done.
func Open(ctx context.Context, p *Profile) (*Device, error) {
	return realSystem().open(ctx, p)
}

func (s *system) open(ctx context.Context, p *Profile) (_ *Device, err error) {
	if p == nil {
		return nil, errors.New("boards: Open: nil profile")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("boards: %s: %w", p.Name, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("boards: %s: invalid profile: %w", p.Name, err)
	}
	d := &Device{Profile: p}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	fail := func(what, hint string, err error) error {
		return &OpenError{Board: p.Name, What: what, Hint: hint, Err: err}
	}

	disp := p.Display
	if disp.Kind == HD44780I2C || disp.Kind == HD44780GPIO || p.Keypad != nil {
		if err := s.hostInit(); err != nil {
			return nil, fail("periph host drivers", "", err)
		}
	}

	switch disp.Kind {
	case HD44780I2C:
		what := fmt.Sprintf("I2C bus %q", disp.Bus)
		if dev := i2cDevice(disp.Bus); dev != "" {
			if _, err := s.stat(dev); errors.Is(err, fs.ErrNotExist) {
				return nil, fail(what, HintI2CMissing, fmt.Errorf("%s does not exist", dev))
			}
			if err := s.canOpen(dev); errors.Is(err, fs.ErrPermission) {
				return nil, fail(what, HintI2CPermission, err)
			}
		}
		bus, err := s.i2cOpen(disp.Bus)
		if err != nil {
			hint := HintI2CBus
			if names := s.i2cNames(); len(names) > 0 {
				sort.Strings(names)
				hint += " (buses present: " + strings.Join(names, ", ") + ")"
			} else {
				hint += "; no I2C bus found: " + HintI2CMissing
			}
			return nil, fail(what, hint, err)
		}
		d.Bus, d.Addr = bus, uint16(disp.Address)
	case HD44780GPIO:
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
	case Console:
		if sp := p.Serial; sp != nil {
			what := "serial port " + sp.Port
			if _, err := s.stat(sp.Port); errors.Is(err, fs.ErrNotExist) {
				return nil, fail(what, serialHint(sp.Port), fmt.Errorf("%s does not exist", sp.Port))
			}
			port, err := s.openSerial(ctx, sp.Port, sp.Baud)
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

	if k := p.Keypad; k != nil {
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
		d.Keypad = kl
	}
	return d, nil
}

// gpio looks a pin up by name; a missing pin gets a hint about why.
func (s *system) gpio(p *Profile, field, name string) (gpio.PinIO, error) {
	if pin := s.pin(name); pin != nil {
		return pin, nil
	}
	hint := HintGPIOName
	chips := "/dev/gpiochip0"
	if _, err := s.stat(chips); errors.Is(err, fs.ErrNotExist) {
		hint = HintGPIOMissing
	} else if err := s.canOpen(chips); errors.Is(err, fs.ErrPermission) {
		hint = HintGPIOPerm
	}
	return nil, &OpenError{Board: p.Name, What: fmt.Sprintf("GPIO pin %s (%s)", name, field), Hint: hint,
		Err: errors.New("not found")}
}

var i2cNumber = regexp.MustCompile(`^(?:I2C|/dev/i2c-)?([0-9]+)$`)

// i2cDevice maps a periph bus name to its /dev/i2c-N node, or "" when the
// name is not a Linux bus number.
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
