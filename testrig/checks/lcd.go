package checks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	pdisplay "periph.io/x/conn/v3/display"
	"periph.io/x/conn/v3/i2c"

	"termlink/display"
	"termlink/display/hd44780"
)

// LCDOptions configure LCDTest.
type LCDOptions struct {
	// Bus names the bus in messages ("/dev/i2c-1").
	Bus string
	// Rows, Cols and ROM describe the display; 0 rows and columns mean
	// 16x2.
	Rows, Cols int
	ROM        display.ROM
	// Pins is the backpack's wiring; the zero value is the common one.
	Pins hd44780.PinMap
	// Hold is how long each pattern stays on the glass for a person to
	// look at it; 0 moves on at once (tests, CI).
	Hold time.Duration
	// Frames is the number of full-screen frames drawn to measure the
	// frame rate; 0 means 40.
	Frames int
	// Sleep and Now go to the driver (hd44780.Opts), and Now times the
	// frame rate; nil means the real clock. On the emulator, pass its
	// Clock: the frame rate is then what the bus's wire time allows, as
	// on real hardware.
	Sleep func(time.Duration)
	Now   func() time.Time
	// OnPattern, when set, is called once each pattern is on the glass,
	// with the pattern's name: tests compare the emulator's glass there,
	// and the simulated rig draws it.
	OnPattern func(name string)
	// Logger receives the driver's re-initialisations; nil discards them.
	Logger *slog.Logger
}

// LCD test pattern names, in the order LCDTest shows them.
const (
	PatternFill    = "fill"
	PatternROMLow  = "rom-low"
	PatternROMHigh = "rom-high"
	PatternCustom  = "custom"
	PatternCursor  = "cursor"
	PatternFPS     = "fps"
)

// Glyphs LCDTest defines: a full block and eight bar-graph levels.
const (
	runeFull = '\uE000'
	runeBar0 = '\uE010' // runeBar0+i: the bottom i+1 pixel rows lit
)

// FullGlyph has every pixel on.
var FullGlyph = display.Glyph{0x1F, 0x1F, 0x1F, 0x1F, 0x1F, 0x1F, 0x1F, 0x1F}

// BarGlyph returns the custom glyph i (0-7) of the custom-character
// pattern: the bottom i+1 pixel rows lit.
func BarGlyph(i int) display.Glyph {
	var g display.Glyph
	for row := 7 - i; row < 8; row++ {
		g[row] = 0x1F
	}
	return g
}

// ROMPage returns the character codes of the lower (ASCII) or upper page
// of rom that show a character: 0x20-0x7F (A02 also 0x10-0x1F) and
// 0xA0-0xFF (A02 from 0x80; A00 has nothing at 0x80-0x9F).
func ROMPage(rom display.ROM, upper bool) []byte {
	lo, hi := 0x20, 0x7F
	if rom == display.A02 {
		lo = 0x10
	}
	if upper {
		lo, hi = 0xA0, 0xFF
		if rom == display.A02 {
			lo = 0x80
		}
	}
	var codes []byte
	for c := lo; c <= hi; c++ {
		codes = append(codes, byte(c))
	}
	return codes
}

// LCDTest opens the HD44780 behind the PCF8574 backpack at addr on bus
// with the real driver and shows test patterns: every pixel on, both pages
// of the character ROM, eight custom characters, a blinking cursor moving
// over every cell, and full-screen redraws to measure the frame rate. It
// reports frames per second and the I²C errors seen; a draw that fails is
// retried (the driver re-initialises the controller), and the check fails
// only when the display does not come back. What the glass shows is for a
// person to judge (or, on the emulator, for the test to read).
func LCDTest(ctx context.Context, bus i2c.Bus, addr uint16, o LCDOptions) Result {
	r := newResult("lcd-test")
	if o.Bus == "" {
		o.Bus = "the bus"
	}
	if o.Rows == 0 && o.Cols == 0 {
		o.Rows, o.Cols = 2, 16
	}
	if o.Frames <= 0 {
		o.Frames = 40
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if LikelyPart(addr) == "unknown" {
		r.Fail("I2C address %#02x: an LCD backpack is at 0x20-0x27 (PCF8574) or 0x38-0x3F (PCF8574A)", addr)
		return *r
	}
	if err := Probe(bus, addr); err != nil {
		lcdAbsent(ctx, r, bus, addr, o.Bus, err)
		return *r
	}
	dev, err := hd44780.New(bus, addr, &hd44780.Opts{
		Rows: o.Rows, Cols: o.Cols, ROM: o.ROM, Pins: o.Pins, Refresh: -1,
		Sleep: o.Sleep, Now: o.Now, Logger: o.Logger,
	})
	if err != nil {
		r.Fail("opening the LCD at %#02x on %s: %v", addr, o.Bus, err)
		return *r
	}
	return lcdPatterns(ctx, r, dev, fmt.Sprintf("%#02x on %s", addr, o.Bus), o)
}

// LCDPatterns shows LCDTest's patterns on an opened display (an HD44780
// on GPIO lines, say: hd44780.NewGPIO) and reports the same way. where
// names the display in the summary.
func LCDPatterns(ctx context.Context, dev *hd44780.Dev, where string, o LCDOptions) Result {
	r := newResult("lcd-test")
	o.Rows, o.Cols = dev.Size()
	if o.Frames <= 0 {
		o.Frames = 40
	}
	return lcdPatterns(ctx, r, dev, where, o)
}

func lcdPatterns(ctx context.Context, r *Result, dev *hd44780.Dev, where string, o LCDOptions) Result {
	if o.Now == nil {
		o.Now = time.Now
	}
	t := &lcdTest{ctx: ctx, r: r, dev: dev, o: o, patterns: map[string]bool{}}
	r.Detailf("%s", dev)
	t.run()
	st := dev.Stats()
	r.Set("i2c_errors", float64(st.Errors))
	r.Set("reinits", float64(max(0, st.Inits-1)))
	r.Set("transactions", float64(st.Tx))
	r.Set("bytes", float64(st.Bytes))
	r.Set("glyph_loads", float64(st.GlyphLoads))
	if r.Pass {
		fps, _ := r.Metric("fps")
		errs := "no bus errors"
		if st.Errors > 0 {
			errs = fmt.Sprintf("%s, all recovered by re-initialising (%s): check the wires and pull-ups if this repeats",
				plural(st.Errors, "bus error"), plural(max(0, st.Inits-1), "time"))
		}
		r.Summary = fmt.Sprintf("%dx%d %s at %s: %d patterns shown, %.1f fps full-screen, %s", o.Cols, o.Rows, o.ROM, where, len(t.patterns), fps, errs)
		r.Detailf("look at the glass: each pattern must show as described; blocks on one row only or nothing at all: turn the contrast potentiometer on the backpack")
	}
	return *r
}

// plural returns "1 error" or "2 errors".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// lcdAbsent explains why nothing answers at addr.
func lcdAbsent(ctx context.Context, r *Result, bus i2c.Bus, addr uint16, busName string, err error) {
	if !isNACK(err) {
		r.Fail("the LCD at %#02x on %s does not answer: %v (check SDA/SCL and the pull-ups)", addr, busName, err)
		return
	}
	found, _, serr := scan(ctx, bus, 0x08, 0x77)
	if serr != nil {
		r.Fail("no LCD answers at %#02x on %s", addr, busName)
		return
	}
	if lcd := lcdCandidates(found); len(lcd) > 0 {
		r.Fail("no LCD answers at %#02x on %s, but a backpack answers at %s: wrong address (pass --addr %s or fix the board profile)",
			addr, busName, strings.Join(lcd, ", "), lcd[0])
		return
	}
	if len(found) > 0 {
		var names []string
		for _, a := range found {
			names = append(names, fmt.Sprintf("%#02x", a))
		}
		r.Fail("no LCD answers at %#02x on %s (only %s, not LCD backpacks): check the backpack's wires and power", addr, busName, strings.Join(names, ", "))
		return
	}
	r.Fail("no device answers on %s at all (the LCD should be at %#02x): check VCC, GND, SDA and SCL", busName, addr)
}

type lcdTest struct {
	ctx      context.Context
	r        *Result
	dev      *hd44780.Dev
	o        LCDOptions
	patterns map[string]bool
	failed   bool
}

func (t *lcdTest) run() {
	rows, cols := t.o.Rows, t.o.Cols
	f := display.NewFrame(rows, cols)
	if err := t.dev.DefineGlyph(runeFull, FullGlyph); err != nil {
		t.r.Fail("defining a glyph: %v", err)
		return
	}
	for i := range 8 {
		if err := t.dev.DefineGlyph(runeBar0+rune(i), BarGlyph(i)); err != nil {
			t.r.Fail("defining a glyph: %v", err)
			return
		}
	}

	// Every pixel of every cell on: dead pixels show as gaps.
	f.Fill(runeFull)
	t.show(PatternFill, f, "every pixel of every cell on: gaps are dead pixels")

	// Both ROM pages, one screen at a time.
	for _, upper := range []bool{false, true} {
		codes := ROMPage(t.o.ROM, upper)
		name, what := PatternROMLow, "ASCII"
		if upper {
			name, what = PatternROMHigh, "upper page"
			if t.o.ROM == display.A00 {
				what += " (katakana, Greek)"
			} else {
				what += " (Cyrillic, Greek, Latin-1)"
			}
		}
		cells := rows * cols
		for start := 0; start < len(codes) && !t.failed; start += cells {
			f.Clear()
			for i, c := range codes[start:min(start+cells, len(codes))] {
				f.Set(i/cols, i%cols, t.o.ROM.Rune(c))
			}
			end := min(start+cells, len(codes)) - 1
			t.show(name, f, fmt.Sprintf("ROM %s %s, codes %#02x-%#02x", t.o.ROM, what, codes[start], codes[end]))
		}
	}

	// The eight custom characters: a bar graph rising left to right.
	for i := range rows * cols {
		f.Set(i/cols, i%cols, runeBar0+rune(i%8))
	}
	t.show(PatternCustom, f, "custom characters: bars rising from 1 to 8 pixel rows, repeated")

	// A blinking cursor over every cell, with a marker drawn under it.
	t.cursor(f)

	// Full-screen redraws: every cell changes every frame.
	t.fps(f)
	if t.failed {
		return
	}
	fps, _ := t.r.Metric("fps")
	f.Clear()
	f.SetLine(0, "lcd-test done")
	if rows > 1 {
		f.SetLine(1, fmt.Sprintf("%.0f fps %d err", fps, t.dev.Stats().Errors))
	}
	t.draw(f)
}

// draw draws f, retrying twice more when the driver's own retry (a
// re-initialisation and a full redraw) failed too.
func (t *lcdTest) draw(f *display.Frame) bool {
	if t.failed {
		return false
	}
	var err error
	for range 3 {
		if err = t.ctx.Err(); err != nil {
			break
		}
		if err = t.dev.Draw(t.ctx, f); err == nil {
			return true
		}
	}
	t.failed = true
	if t.ctx.Err() != nil {
		t.r.Fail("interrupted: %v", context.Cause(t.ctx))
	} else {
		t.r.Fail("the LCD stopped answering after %d I2C errors: %v (loose wire, power dip, or missing pull-ups?)", t.dev.Stats().Errors, err)
	}
	return false
}

func (t *lcdTest) show(name string, f *display.Frame, what string) {
	if !t.draw(f) {
		return
	}
	t.patterns[name] = true
	t.r.Detailf("%-8s %s", name, what)
	if t.o.OnPattern != nil {
		t.o.OnPattern(name)
	}
	t.hold(t.o.Hold)
}

func (t *lcdTest) hold(d time.Duration) {
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-t.ctx.Done():
	case <-tm.C:
	}
}

// cursor moves the hardware cursor (blinking block) and a '>' marker over
// every cell, and measures how many moves per second the bus carries.
func (t *lcdTest) cursor(f *display.Frame) {
	if t.failed {
		return
	}
	rows, cols := t.o.Rows, t.o.Cols
	if err := t.dev.Cursor(pdisplay.CursorBlink); err != nil {
		// The driver re-initialised and retried; one more try.
		if err = t.dev.Cursor(pdisplay.CursorBlink); err != nil {
			t.failed = true
			t.r.Fail("turning the cursor on: %v", err)
			return
		}
	}
	step := t.o.Hold / time.Duration(rows*cols)
	start := t.o.Now()
	for i := range rows * cols {
		f.Clear()
		f.Set(i/cols, i%cols, '>')
		if !t.draw(f) {
			return
		}
		if err := t.dev.MoveTo(i/cols, i%cols); err != nil && !t.retryMove(i/cols, i%cols, err) {
			return
		}
		t.hold(step)
	}
	elapsed := t.o.Now().Sub(start)
	if step == 0 && elapsed > 0 {
		t.r.Set("cursor_moves_per_s", round3(float64(rows*cols)/elapsed.Seconds()))
	}
	t.patterns[PatternCursor] = true
	t.r.Detailf("%-8s a blinking block cursor and a '>' stepping over every cell, row by row", PatternCursor)
	if t.o.OnPattern != nil {
		t.o.OnPattern(PatternCursor)
	}
	if err := t.dev.Cursor(pdisplay.CursorOff); err != nil {
		_ = t.dev.Cursor(pdisplay.CursorOff)
	}
}

func (t *lcdTest) retryMove(row, col int, err error) bool {
	if err2 := t.dev.MoveTo(row, col); err2 != nil {
		t.failed = true
		t.r.Fail("moving the cursor: %v", errors.Join(err, err2))
		return false
	}
	return true
}

// fps alternates two frames that differ in every cell.
func (t *lcdTest) fps(f *display.Frame) {
	if t.failed {
		return
	}
	rows, cols := t.o.Rows, t.o.Cols
	start := t.o.Now()
	for n := range t.o.Frames {
		for i := range rows * cols {
			f.Set(i/cols, i%cols, rune('A'+(i+n)%26))
		}
		if !t.draw(f) {
			return
		}
	}
	elapsed := t.o.Now().Sub(start)
	fps := float64(t.o.Frames) / max(elapsed.Seconds(), 1e-9)
	t.r.Set("fps", round3(fps))
	t.patterns[PatternFPS] = true
	t.r.Detailf("%-8s %d full-screen frames in %v: %.1f frames per second", PatternFPS, t.o.Frames, elapsed.Round(time.Microsecond), fps)
	if t.o.OnPattern != nil {
		t.o.OnPattern(PatternFPS)
	}
	t.hold(t.o.Hold)
}
