package device

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"termlink/boards"
	"termlink/device/input"
	"termlink/display"
	"termlink/display/console"
	"termlink/display/hd44780"
)

// Hardware is an opened board: a view on its display and the inputs from
// its keypad or console.
type Hardware struct {
	View   View
	Inputs <-chan Input
	// LocalTTY is set when the display is this process's own terminal (the
	// sim board): logs must not go to it.
	LocalTTY bool
	// Gate is the KeyGate on the keypad (nil without one): give it to
	// Daemon.Gate.
	Gate *KeyGate

	dev     *boards.Device
	runs    []func(ctx context.Context) error
	closers []func() error
}

// OpenBoard opens the display and keypad (or console) a board profile
// describes, with the drivers termd uses on them.
func OpenBoard(ctx context.Context, p *boards.Profile, log *slog.Logger) (*Hardware, error) {
	if log == nil {
		log = slog.Default()
	}
	dev, err := boards.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	h := &Hardware{dev: dev}
	inputs := make(chan Input)
	h.Inputs = inputs
	fail := func(err error) (*Hardware, error) {
		_ = dev.Close()
		return nil, fmt.Errorf("board %s: %w", p.Name, err)
	}
	d := p.Display
	switch d.Kind {
	case boards.HD44780I2C, boards.HD44780GPIO:
		rom, err := display.ParseROM(d.ROM)
		if err != nil {
			return fail(err)
		}
		opts := &hd44780.Opts{Rows: d.Rows, Cols: d.Cols, ROM: rom, Logger: log}
		if d.Backlight != nil && !*d.Backlight {
			opts.BacklightOff = true
		}
		var lcd *hd44780.Dev
		if d.Kind == boards.HD44780I2C {
			if pm := d.PinMap; pm != nil {
				opts.Pins = pinMap(pm)
			}
			lcd, err = hd44780.New(dev.Bus, dev.Addr, opts)
		} else {
			l := dev.LCD
			if l.Backlight != nil {
				opts.Backlight = l.Backlight
			}
			lcd, err = hd44780.NewGPIO(l.RS, l.EN, l.D4, l.D5, l.D6, l.D7, opts)
		}
		if err != nil {
			return fail(fmt.Errorf("LCD: %w", err))
		}
		h.View = &LCDView{Screen: lcd}
		h.runs = append(h.runs, lcd.Run) // heals a glitched glass while idle
	case boards.Console:
		var rw io.ReadWriter
		if dev.Serial != nil {
			rw = dev.Serial
		} else {
			rw, h.LocalTTY = dev.TTY, true
		}
		opts := console.Opts{Logger: log}
		if c := p.Console; c != nil {
			opts.Width, opts.Height = c.Cols, c.Rows
		}
		con := console.New(rw, opts)
		h.View = &ConsoleView{Console: con}
		h.closers = append(h.closers, func() error {
			fctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = con.Flush(fctx) // the last screen ("offline: stopped")
			return con.Close()
		})
		h.runs = append(h.runs, con.Run, func(ctx context.Context) error {
			FromConsole(ctx, con.Events(), inputs)
			return nil
		})
	default:
		return fail(fmt.Errorf("display kind %q is not supported", d.Kind))
	}
	if kp := p.Keypad; kp != nil && dev.Keypad != nil {
		km, err := kp.InputKeymap()
		if err != nil {
			return fail(err)
		}
		entry, err := kp.Entry()
		if err != nil {
			return fail(err)
		}
		pad, err := input.New(dev.Keypad.Rows, dev.Keypad.Cols, input.Opts{Keymap: km, Timing: kp.Timing(), Logger: log})
		if err != nil {
			return fail(fmt.Errorf("keypad: %w", err))
		}
		actions := make(chan input.Action)
		h.Gate = NewKeyGate()
		gated := make(chan input.Event)
		h.runs = append(h.runs, pad.Run,
			func(ctx context.Context) error { GateKeys(ctx, h.Gate, pad.Events(), gated); return nil },
			func(ctx context.Context) error { return input.Drive(ctx, gated, entry, actions) },
			func(ctx context.Context) error { FromActions(ctx, actions, inputs); return nil })
	}
	return h, nil
}

func pinMap(pm *boards.PinMap) hd44780.PinMap {
	m := hd44780.DefaultPinMap
	set := func(dst *uint8, v *int) {
		if v != nil {
			*dst = uint8(*v)
		}
	}
	set(&m.RS, pm.RS)
	set(&m.RW, pm.RW)
	set(&m.EN, pm.EN)
	set(&m.BL, pm.BL)
	set(&m.D4, pm.D4)
	set(&m.D5, pm.D5)
	set(&m.D6, pm.D6)
	set(&m.D7, pm.D7)
	m.BacklightActiveLow = pm.BacklightActiveLow
	return m
}

// Run runs the board's drivers (keypad scanning, console input, LCD
// refresh) until ctx ends.
func (h *Hardware) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(h.runs))
	for i, run := range h.runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close releases the board's devices (and restores a local terminal).
func (h *Hardware) Close() error {
	var errs []error
	for _, c := range h.closers {
		errs = append(errs, c())
	}
	return errors.Join(append(errs, h.dev.Close())...)
}
