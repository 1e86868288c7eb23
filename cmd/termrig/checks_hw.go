package main

// Opening the hardware the bring-up checks run on: I²C buses, GPIO pins,
// board profiles, and the simulated rig. The checks themselves are in
// termlink/testrig/checks.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/i2c"

	"termlink/boards"
	"termlink/device"
	"termlink/display"
	"termlink/display/hd44780"
	"termlink/testrig/checks"
	"termlink/testrig/checks/sim"
)

// hw opens devices for the check commands, through device's opener (the
// one termd uses).
type hw struct{}

// openI2C opens an I²C bus by number or name and returns the name to show
// (its /dev/i2c-N node when it has one).
func (hw) openI2C(bus string) (i2c.BusCloser, string, error) {
	name := bus
	if node := device.I2CNode(bus); node != "" {
		name = node
	}
	b, err := device.OpenI2C(bus)
	if err != nil {
		return nil, name, err
	}
	return b, name, nil
}

// pin looks a GPIO pin up by name ("GPIO17").
func (hw) pin(name string) (gpio.PinIO, error) { return device.OpenPin(name) }

// boardFlags are the board flags of lcd-test, keypad-test and selftest,
// the same family as termd's: --board NAME (an embedded profile, or sim:
// the simulated rig) or --board-file PATH (a profile file).
type boardFlags struct{ name, file string }

func (b *boardFlags) register(fs *flag.FlagSet, what string) {
	fs.StringVar(&b.name, "board", "", "board profile `name`"+what+": "+strings.Join(boards.Names(), ", ")+" (sim: the simulated rig)")
	fs.StringVar(&b.file, "board-file", "", "custom board profile JSON `file` (instead of --board)")
}

// given reports whether either flag was given.
func (b boardFlags) given() bool { return b.name != "" || b.file != "" }

// sim reports whether the board is the simulated rig (--board sim).
func (b boardFlags) sim() bool { return b.name == "sim" && b.file == "" }

// String is the flag as given, for messages.
func (b boardFlags) String() string {
	if b.file != "" {
		return "--board-file " + b.file
	}
	return "--board " + b.name
}

// check refuses both flags at once and a path in --board (usage errors).
func (b boardFlags) check() error {
	if err := boards.CheckFlags(b.name, b.file); err != nil {
		return usageError{err}
	}
	return nil
}

// load loads the profile: the file, or the embedded profile by name.
func (b boardFlags) load() (*boards.Profile, error) { return boards.Select(b.name, b.file) }

// lcdSpec is an LCD to test: from a profile or from flags.
type lcdSpec struct {
	bus        string // I²C bus name; "" for a GPIO LCD
	addr       uint16
	rows, cols int
	rom        display.ROM
	pins       hd44780.PinMap
	board      *boards.Profile // the profile of a GPIO LCD, opened by device
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
		s.bus, s.addr = d.Bus, uint16(d.Address.I2C)
		if m := d.PinMap; m != nil {
			s.pins = device.PinMap(m)
		}
	case boards.HD44780GPIO:
		s.board = p
	default:
		return s, fmt.Errorf("board %s has no character LCD (display kind %q)", p.Name, d.Kind)
	}
	return s, nil
}

// openGPIOLCD opens an HD44780 wired to GPIO lines, as termd does.
func (hw) openGPIOLCD(ctx context.Context, s lcdSpec) (*hd44780.Dev, string, error) {
	parts, err := device.OpenParts(ctx, s.board)
	if err != nil {
		return nil, "", err
	}
	dev, err := device.NewLCD(parts, hd44780.Opts{Refresh: -1})
	if err != nil {
		parts.Close()
		return nil, "", err
	}
	lp := s.board.Display.Pins
	return dev, "GPIO " + strings.Join([]string{lp.RS, lp.EN, lp.D4, lp.D5, lp.D6, lp.D7}, ","), nil
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
// Result, so that --json still prints one. A missing or forbidden device
// node is explained as the other checks explain it.
func (hw) openError(name string, err error) checks.Result {
	var oe *device.OpenError
	if !errors.As(err, &oe) {
		return checks.Failed(name, err)
	}
	if oe.Node != "" {
		kind := checks.SerialDevice
		switch {
		case strings.HasPrefix(oe.Node, "/dev/i2c"):
			kind = checks.I2CDevice
		case strings.HasPrefix(oe.Node, "/dev/gpiochip"):
			kind = checks.GPIODevice
		}
		err := checks.ExplainOpen(kind, oe.Node, oe.Err)
		if oe.Pin != "" {
			err = fmt.Errorf("GPIO pin %s: %w", oe.Pin, err)
		}
		return checks.Failed(name, err)
	}
	if oe.Hint != "" {
		return checks.Failed(name, fmt.Errorf("%s: %v: %s", oe.What, oe.Err, oe.Hint))
	}
	return checks.Failed(name, err)
}
