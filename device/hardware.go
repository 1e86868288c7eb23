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
	"termlink/testrig/lcdemu"
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
	// CanAnswer: the board has an input a person can answer a question
	// with (a keypad, LCDd's keys, the console): list link.CapChoice. A
	// display without one does not, and the server answers its agents'
	// questions by its fallback policy.
	CanAnswer bool

	dev     *Parts
	runs    []func(ctx context.Context) error
	closers []func() error
}

// OpenBoard opens the display and keypad (or console) a board profile
// describes, with the drivers termd uses on them. It is the one place a
// profile becomes hardware: termd and every termrig check open boards
// through it (OpenParts for the bare parts, NewLCD and NewKeypad for the
// drivers).
func OpenBoard(ctx context.Context, p *boards.Profile, log *slog.Logger) (*Hardware, error) {
	if log == nil {
		log = slog.Default()
	}
	dev, err := OpenParts(ctx, p)
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
	// Key events for the text entry: from the matrix keypad and from the
	// keys LCDd reports.
	var keySources []<-chan input.Event
	d := p.Display
	switch d.Kind {
	case boards.HD44780I2C, boards.HD44780GPIO:
		lcd, err := NewLCD(dev, hd44780.Opts{Logger: log})
		if err != nil {
			return fail(err)
		}
		h.View = &LCDView{Screen: lcd}
		h.runs = append(h.runs, lcd.Run) // heals a glitched glass while idle
	case boards.HD44780Emu:
		lcd, err := NewLCD(dev, hd44780.Opts{Logger: log})
		if err != nil {
			return fail(err)
		}
		h.View, h.LocalTTY = &LCDView{Screen: lcd}, true
		g := newEmuGlass(dev.Bus.(*lcdemu.Bus), dev.TTY, p.Name)
		events := make(chan input.Event)
		keySources = append(keySources, events)
		h.runs = append(h.runs, g.run, func(ctx context.Context) error {
			emuKeys(ctx, dev.TTY, events, inputs)
			return nil
		})
		h.closers = append(h.closers, g.close) // the last screen stays in the terminal
	case boards.LCDproc:
		lcd, keys, err := NewLCDproc(ctx, p, log)
		if err != nil {
			return fail(err)
		}
		h.View = &LCDView{Screen: lcd}
		events := make(chan input.Event)
		keySources = append(keySources, events)
		h.runs = append(h.runs, lcd.Run, func(ctx context.Context) error {
			FromLCDprocKeys(ctx, lcd.Keys(), keys, events)
			return nil
		})
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
		h.CanAnswer = true
		h.runs = append(h.runs, con.Run, func(ctx context.Context) error {
			FromConsole(ctx, con.Events(), inputs)
			return nil
		})
	default:
		return fail(fmt.Errorf("display kind %q is not supported", d.Kind))
	}
	if dev.Keypad != nil {
		pad, err := NewKeypad(dev, input.Opts{Logger: log})
		if err != nil {
			return fail(err)
		}
		keySources = append(keySources, pad.Events())
		h.runs = append(h.runs, pad.Run)
	}
	if len(keySources) > 0 {
		entry, err := KeypadEntry(p.Keypad)
		if err != nil {
			return fail(err)
		}
		events := mergeEvents(keySources)
		actions := make(chan input.Action)
		h.Gate = NewKeyGate()
		h.CanAnswer = true
		gated := make(chan input.Event)
		h.runs = append(h.runs, events.run,
			func(ctx context.Context) error { GateKeys(ctx, h.Gate, events.out, gated); return nil },
			func(ctx context.Context) error { return input.Drive(ctx, gated, entry, actions) },
			func(ctx context.Context) error { FromActions(ctx, actions, inputs); return nil })
	}
	return h, nil
}

// NewLCD starts the HD44780 driver on an opened hd44780-i2c or
// hd44780-gpio profile: size, ROM, backlight and backpack wiring from the
// profile; opts gives the rest (logger, refresh, sleep).
func NewLCD(parts *Parts, opts hd44780.Opts) (*hd44780.Dev, error) {
	p := parts.Profile
	d := p.Display
	rom, err := display.ParseROM(d.ROM)
	if err != nil {
		return nil, fmt.Errorf("board %s: %w", p.Name, err)
	}
	opts.Rows, opts.Cols, opts.ROM = d.Rows, d.Cols, rom
	if d.Backlight != nil && !*d.Backlight {
		opts.BacklightOff = true
	}
	var lcd *hd44780.Dev
	switch {
	case d.Kind == boards.HD44780Emu && parts.Bus != nil:
		lcd, err = hd44780.New(parts.Bus, parts.Addr, &opts)
	case d.Kind == boards.HD44780I2C && parts.Bus != nil:
		if pm := d.PinMap; pm != nil {
			opts.Pins = PinMap(pm)
		}
		lcd, err = hd44780.New(parts.Bus, parts.Addr, &opts)
	case d.Kind == boards.HD44780GPIO && parts.LCD != nil:
		l := parts.LCD
		if l.Backlight != nil {
			opts.Backlight = l.Backlight
		}
		lcd, err = hd44780.NewGPIO(l.RS, l.EN, l.D4, l.D5, l.D6, l.D7, &opts)
	default:
		return nil, fmt.Errorf("board %s has no character LCD on I2C or GPIO (display kind %q)", p.Name, d.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("LCD: %w", err)
	}
	return lcd, nil
}

// PinMap converts a profile's PCF8574 wiring into the driver's; fields
// the profile leaves out keep the common wiring.
func PinMap(pm *boards.PinMap) hd44780.PinMap {
	m := hd44780.DefaultPinMap()
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

// NewKeypad starts the matrix keypad scanner on an opened profile's
// keypad lines, with its keymap and timing; opts gives the rest, and its
// non-zero Timing fields override the profile's (a check that counts a
// held key as one press sets RepeatDelay -1).
func NewKeypad(parts *Parts, opts input.Opts) (*input.Keypad, error) {
	k := parts.Profile.Keypad
	if k == nil || parts.Keypad == nil {
		return nil, fmt.Errorf("board %s has no keypad", parts.Profile.Name)
	}
	km, err := k.Layout()
	if err != nil {
		return nil, err
	}
	t := KeypadTiming(k)
	for _, f := range []struct{ dst, src *time.Duration }{{&t.Debounce, &opts.Timing.Debounce},
		{&t.RepeatDelay, &opts.Timing.RepeatDelay}, {&t.RepeatInterval, &opts.Timing.RepeatInterval},
		{&t.StuckAfter, &opts.Timing.StuckAfter}} {
		if *f.src != 0 {
			*f.dst = *f.src
		}
	}
	opts.Keymap, opts.Timing = km, t
	pad, err := input.New(parts.Keypad.Rows, parts.Keypad.Cols, opts)
	if err != nil {
		return nil, fmt.Errorf("keypad: %w", err)
	}
	return pad, nil
}

// KeypadTiming returns a profile keypad's debounce and repeat settings
// (zero fields mean input's defaults).
func KeypadTiming(k *boards.Keypad) input.Timing {
	return input.Timing{Debounce: time.Duration(k.Debounce), RepeatDelay: time.Duration(k.RepeatDelay),
		RepeatInterval: k.RepeatInterval()}
}

// KeypadEntry returns the text entry a profile's keypad asks for: a
// MultiTap or, in kiosk mode, a Kiosk. Without a keypad block it is
// multi-tap with the 4x4 bindings (LCDd's keys on an lcdproc board).
func KeypadEntry(k *boards.Keypad) (input.Entry, error) {
	if k == nil {
		return input.NewMultiTap(input.MultiTapOpts{Keys: input.Keys4x4()}), nil
	}
	if k.Mode == "kiosk" {
		return input.NewKiosk(k.PhraseMap(), k.EntryKeys())
	}
	return input.NewMultiTap(input.MultiTapOpts{Keys: k.EntryKeys(), Timeout: time.Duration(k.MultitapTimeout)}), nil
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

// Parts are the board's opened parts (its I2C bus and the LCD's address,
// its lines), for checks that run beside the drivers (termd's remote
// self-test probes the backpack's address on the bus).
func (h *Hardware) Parts() *Parts { return h.dev }

// Close releases the board's devices (and restores a local terminal).
func (h *Hardware) Close() error {
	var errs []error
	for _, c := range h.closers {
		errs = append(errs, c())
	}
	return errors.Join(append(errs, h.dev.Close())...)
}
