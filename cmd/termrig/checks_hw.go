package main

// Opening the hardware the bring-up checks run on: I²C buses, GPIO pins,
// board profiles, and the simulated rig. The checks themselves are in
// termlink/testrig/checks.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"
	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/host/v3"

	"termlink/boards"
	"termlink/display"
	"termlink/display/hd44780"
	"termlink/testrig/checks"
	"termlink/testrig/checks/sim"
)

// hw opens devices for the check commands.
type hw struct{}

// hostInit loads periph's host drivers; it is cheap after the first call.
func (hw) hostInit() error {
	if _, err := host.Init(); err != nil {
		return fmt.Errorf("loading periph's host drivers: %w", err)
	}
	return nil
}

var i2cBusNumber = regexp.MustCompile(`^(?:I2C|/dev/i2c-)?([0-9]+)$`)

// i2cPath maps a bus name ("1", "I2C1", "/dev/i2c-1") to its device node,
// "" for names that are not Linux bus numbers.
func (hw) i2cPath(bus string) string {
	if m := i2cBusNumber.FindStringSubmatch(bus); m != nil {
		return "/dev/i2c-" + m[1]
	}
	return ""
}

// openI2C opens an I²C bus by number or name. A missing node or a
// permission problem is explained before periph is asked (periph's own
// errors lose the errno).
func (h hw) openI2C(bus string) (i2c.BusCloser, string, error) {
	name := bus
	if dev := h.i2cPath(bus); dev != "" {
		name = dev
		if _, err := os.Stat(dev); err != nil {
			return nil, name, checks.ExplainOpen(checks.I2CDevice, dev, err)
		}
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return nil, name, checks.ExplainOpen(checks.I2CDevice, dev, err)
		}
		f.Close()
	}
	if err := h.hostInit(); err != nil {
		return nil, name, err
	}
	b, err := i2creg.Open(bus)
	if err != nil {
		var names []string
		for _, r := range i2creg.All() {
			names = append(names, r.Name)
		}
		if len(names) == 0 {
			return nil, name, checks.ExplainOpen(checks.I2CDevice, name, fmt.Errorf("%w: no I2C bus found (%v)", fs.ErrNotExist, err))
		}
		return nil, name, fmt.Errorf("I2C bus %q: %v (buses: %s)", bus, err, strings.Join(names, ", "))
	}
	return b, name, nil
}

// pin looks a GPIO pin up by name ("GPIO17"), explaining why it is
// missing: no GPIO chip, no permission, or a wrong name.
func (h hw) pin(name string) (gpio.PinIO, error) {
	if err := h.hostInit(); err != nil {
		return nil, err
	}
	if p := gpioreg.ByName(name); p != nil {
		return p, nil
	}
	chip := "/dev/gpiochip0"
	if _, err := os.Stat(chip); err != nil {
		return nil, fmt.Errorf("GPIO pin %s: %w", name, checks.ExplainOpen(checks.GPIODevice, chip, err))
	}
	if f, err := os.OpenFile(chip, os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("GPIO pin %s: %w", name, checks.ExplainOpen(checks.GPIODevice, chip, err))
	} else {
		f.Close()
	}
	return nil, fmt.Errorf("no GPIO pin named %q: periph names the lines GPIO0-GPIO27 on a Raspberry Pi (gpioinfo lists them)", name)
}

// pins looks several pins up.
func (h hw) pins(names []string) ([]gpio.PinIO, error) {
	var out []gpio.PinIO
	for _, n := range names {
		p, err := h.pin(n)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// isSim reports whether a board name means the simulated rig.
func (hw) isSim(board string) bool { return board == "sim" }

// loadBoard loads an embedded profile by name, or a profile file (a name
// with a '/' or ending in .json).
func (hw) loadBoard(name string) (*boards.Profile, error) {
	if strings.Contains(name, "/") || strings.HasSuffix(name, ".json") {
		return boards.LoadFile(name)
	}
	p, err := boards.Load(name)
	if err != nil {
		return nil, fmt.Errorf("%w (boards: %s, or a profile file)", err, strings.Join(boards.Names(), ", "))
	}
	return p, nil
}

// lcdSpec is an LCD to test: from a profile or from flags.
type lcdSpec struct {
	bus        string // I²C bus name; "" for a GPIO LCD
	addr       uint16
	rows, cols int
	rom        display.ROM
	pins       hd44780.PinMap
	gpio       *boards.LCDPins
}

// boardLCD returns the LCD of a profile, or an error when it has none.
func (hw) boardLCD(p *boards.Profile) (lcdSpec, error) {
	d := p.Display
	s := lcdSpec{rows: d.Rows, cols: d.Cols}
	if d.ROM != "" {
		rom, err := display.ParseROM(d.ROM)
		if err != nil {
			return s, fmt.Errorf("board %s: %w", p.Name, err)
		}
		s.rom = rom
	}
	switch d.Kind {
	case boards.HD44780I2C:
		s.bus, s.addr = d.Bus, uint16(d.Address)
		if m := d.PinMap; m != nil {
			s.pins = hd44780.DefaultPinMap
			for _, f := range []struct {
				src *int
				dst *uint8
			}{{m.RS, &s.pins.RS}, {m.RW, &s.pins.RW}, {m.EN, &s.pins.EN}, {m.BL, &s.pins.BL},
				{m.D4, &s.pins.D4}, {m.D5, &s.pins.D5}, {m.D6, &s.pins.D6}, {m.D7, &s.pins.D7}} {
				if f.src != nil {
					*f.dst = uint8(*f.src)
				}
			}
			s.pins.BacklightActiveLow = m.BacklightActiveLow
		}
	case boards.HD44780GPIO:
		s.gpio = d.Pins
	default:
		return s, fmt.Errorf("board %s has no character LCD (display kind %q)", p.Name, d.Kind)
	}
	return s, nil
}

// openGPIOLCD opens an HD44780 wired to GPIO lines.
func (h hw) openGPIOLCD(s lcdSpec) (*hd44780.Dev, string, error) {
	lp := s.gpio
	names := []string{lp.RS, lp.EN, lp.D4, lp.D5, lp.D6, lp.D7}
	ps, err := h.pins(names)
	if err != nil {
		return nil, "", err
	}
	opts := &hd44780.Opts{Rows: s.rows, Cols: s.cols, ROM: s.rom, Refresh: -1}
	if lp.Backlight != "" {
		bl, err := h.pin(lp.Backlight)
		if err != nil {
			return nil, "", err
		}
		opts.Backlight = bl
	}
	dev, err := hd44780.NewGPIO(ps[0], ps[1], ps[2], ps[3], ps[4], ps[5], opts)
	if err != nil {
		return nil, "", err
	}
	return dev, "GPIO " + strings.Join(names, ","), nil
}

// parseAddr parses an I²C address: 0x27, 39.
func (hw) parseAddr(s string) (uint16, error) {
	v, err := strconv.ParseUint(s, 0, 16)
	if err != nil || v > 0x7F {
		return 0, fmt.Errorf("I2C address %q: want a 7-bit address such as 0x27", s)
	}
	return uint16(v), nil
}

// parseSize parses COLSxROWS: 16x2, 20x4.
func (hw) parseSize(s string) (rows, cols int, err error) {
	c, r, ok := strings.Cut(strings.ToLower(s), "x")
	cols, err1 := strconv.Atoi(c)
	rows, err2 := strconv.Atoi(r)
	if !ok || err1 != nil || err2 != nil || rows < 1 || cols < 1 {
		return 0, 0, fmt.Errorf("size %q: want COLSxROWS such as 16x2 or 20x4", s)
	}
	return rows, cols, nil
}

// parseBauds parses a comma-separated list of baud rates.
func (hw) parseBauds(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("baud rate %q: want positive numbers separated by commas, such as 9600,115200", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// simRig starts the simulated rig.
func (hw) simRig(o sim.Options) (*sim.Rig, error) {
	rig, err := sim.New(o)
	if err != nil {
		return nil, fmt.Errorf("starting the simulated rig: %w", err)
	}
	return rig, nil
}

// isTerminal reports whether w looks like a terminal (a character
// device), to redraw the keypad table in place.
func (hw) isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// openError is how a device that did not open is reported: as a failed
// Result, so that --json still prints one.
func (hw) openError(name string, err error) checks.Result {
	var oe *boards.OpenError
	if errors.As(err, &oe) && oe.Hint != "" {
		return checks.Failed(name, fmt.Errorf("%s: %v: %s", oe.What, oe.Err, oe.Hint))
	}
	return checks.Failed(name, err)
}
