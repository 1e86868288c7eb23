// Package hd44780 drives character LCDs built on the Hitachi HD44780U
// controller (and its many clones: KS0066, SPLC780, ST7066, AIP31066) in
// 4-bit mode, either behind a PCF8574 I²C backpack (New) or on four data GPIO
// lines plus RS and EN (NewGPIO).
//
// The driver keeps what the glass shows and sends only the cells that
// changed: Draw takes a whole display.Frame; each run of changed cells goes
// out as one I²C transaction of 4 bytes per character (EN high and EN low for
// each nibble), preceded by a "set DDRAM address" only when the controller's
// address counter is not already there. Up to eight custom glyphs live in
// CGRAM: a glyph already loaded is not loaded again, and when a frame needs a
// glyph that is not loaded the least recently used slot not needed by that
// frame is reloaded. On ROM A00, which has no backslash and no tilde, the
// driver shows them with built-in glyphs.
//
// The controller is re-initialised (the 0x3, 0x3, 0x3, 0x2 nibble sequence of
// the datasheet, which also recovers a controller whose nibbles went out of
// sync) and the whole glass redrawn after any bus error and every
// Opts.Refresh, so a screen glitched by noise heals by itself.
//
// Dev also implements periph's display.TextDisplay (a cursor-addressed text
// API on top of the same frame) and display.DisplayBacklight.
//
// The transactions are timed for an I²C bus of at most 400 kHz (the PCF8574
// is specified up to 100 kHz): at 400 kHz two bytes take 45 µs, more than the
// 37 µs the controller needs per instruction. Instructions that need longer
// (clear, home, the initialisation) are followed by waits on Opts.Sleep.
//
// # Datasheet
//
// https://www.sparkfun.com/datasheets/LCD/HD44780.pdf (Hitachi HD44780U,
// ADE-207-272(Z)): figure 24 (4-bit initialisation), table 6 (instructions),
// table 4 (character ROMs, see termlink/display).
//
// PCF8574: https://www.ti.com/lit/ds/symlink/pcf8574.pdf
package hd44780

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"periph.io/x/conn/v3"
	pdisplay "periph.io/x/conn/v3/display"
	"periph.io/x/conn/v3/gpio"

	"termlink/display"
)

// DefaultRefresh is how often the controller is re-initialised and the glass
// redrawn when Opts.Refresh is 0.
const DefaultRefresh = 30 * time.Second

// Opts configures a Dev. The zero value is a 16x2 display with ROM A00, the
// default pin map, the backlight on and DefaultRefresh.
type Opts struct {
	Rows, Cols int         // display size: 1, 2 or 4 rows of up to 40 (4 rows: 20) columns; 0 means 2 x 16
	ROM        display.ROM // character ROM of the controller
	Pins       PinMap      // PCF8574 wiring (New only); the zero value means DefaultPinMap
	// BacklightOff starts with the backlight off.
	BacklightOff bool
	// Refresh is how often the controller is re-initialised and the glass
	// redrawn (on the next Draw or by Run); 0 means DefaultRefresh, a
	// negative value never.
	Refresh time.Duration
	// Sleep waits; nil means time.Sleep. Tests pass a fake (see
	// termlink/testrig/lcdemu.Clock) so nothing sleeps for real.
	Sleep func(time.Duration)
	// Now is the clock for Refresh; nil means time.Now.
	Now func() time.Time
	// Backlight is the backlight switch for NewGPIO; nil means none.
	Backlight gpio.PinOut
	// Logger gets re-initialisations after errors; nil means slog.Default().
	Logger *slog.Logger
}

// Stats counts what the driver sent.
type Stats struct {
	Tx         int // I²C transactions (GPIO: batches)
	Bytes      int // bytes written to the PCF8574 (0 for GPIO)
	Inits      int // initialisations, the first included
	Errors     int // failed transactions
	GlyphLoads int // custom glyphs written to CGRAM
}

// Dev is an HD44780 display. Its methods are safe for concurrent use.
type Dev struct {
	mu      sync.Mutex
	port    port
	rows    int
	cols    int
	rom     display.ROM
	sleep   func(time.Duration)
	now     func() time.Time
	refresh time.Duration
	log     *slog.Logger

	// What the glass should show.
	frame        *display.Frame
	row, col     int // TextDisplay cursor; col == cols means a pending wrap
	autoScroll   bool
	displayOn    bool
	cursorOn     bool
	blinkOn      bool
	backlight    bool
	glyphs       map[rune]display.Glyph
	builtinGlyph map[rune]bool

	// What the glass shows, as far as the driver knows.
	shown      []byte
	shownValid bool
	slots      [8]slot
	gen        uint64
	ac         int // DDRAM address counter; -1 when unknown
	needInit   bool
	lastInit   time.Time

	// Tables and buffers.
	cellAddr []byte     // cell index -> DDRAM address
	addrCell [128]int16 // DDRAM address -> cell index, -1 when not shown
	codes    []byte
	ops      []byte
	stats    Stats
}

var (
	_ pdisplay.TextDisplay      = (*Dev)(nil)
	_ pdisplay.DisplayBacklight = (*Dev)(nil)
	_ conn.Resource             = (*Dev)(nil)
	_ display.Screen            = (*Dev)(nil)
	_ display.GlyphDefiner      = (*Dev)(nil)
)

// Instructions (datasheet table 6).
const (
	cmdClear    = 0x01
	cmdHome     = 0x02
	cmdEntry    = 0x04 // | 0x02 increment
	cmdDisplay  = 0x08 // | 0x04 display on, 0x02 cursor, 0x01 blink
	cmdFunction = 0x20 // | 0x10 8-bit, 0x08 two lines
	cmdCGRAM    = 0x40
	cmdDDRAM    = 0x80

	opRS = 0x10 // in an op: the nibble goes to the data register

	joinGap     = 1 // unchanged cells rewritten to join two runs
	placeholder = byte(display.Placeholder)
)

func newDev(p port, o Opts) (*Dev, error) {
	if o.Rows == 0 && o.Cols == 0 {
		o.Rows, o.Cols = 2, 16
	}
	switch {
	case o.Rows != 1 && o.Rows != 2 && o.Rows != 4:
		return nil, fmt.Errorf("hd44780: %d rows: want 1, 2 or 4", o.Rows)
	case o.Cols < 1 || o.Cols > 40:
		return nil, fmt.Errorf("hd44780: %d columns: want 1 to 40", o.Cols)
	case o.Rows == 4 && o.Cols > 20:
		return nil, fmt.Errorf("hd44780: 4 rows of %d columns need two controllers", o.Cols)
	}
	if o.ROM != display.A00 && o.ROM != display.A02 {
		return nil, fmt.Errorf("hd44780: unknown ROM %v", o.ROM)
	}
	d := &Dev{
		port: p, rows: o.Rows, cols: o.Cols, rom: o.ROM,
		sleep: o.Sleep, now: o.Now, refresh: o.Refresh, log: o.Logger,
		frame:     display.NewFrame(o.Rows, o.Cols),
		displayOn: true, backlight: !o.BacklightOff,
		glyphs: map[rune]display.Glyph{}, builtinGlyph: map[rune]bool{},
		shown: make([]byte, o.Rows*o.Cols), codes: make([]byte, o.Rows*o.Cols),
		ac: -1,
	}
	if d.sleep == nil {
		d.sleep = time.Sleep
	}
	if d.now == nil {
		d.now = time.Now
	}
	switch {
	case d.refresh == 0:
		d.refresh = DefaultRefresh
	case d.refresh < 0:
		d.refresh = 0
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	for r, g := range builtinGlyphs {
		if !d.rom.Shows(r) {
			d.glyphs[r] = g
			d.builtinGlyph[r] = true
		}
	}
	for i := range d.addrCell {
		d.addrCell[i] = -1
	}
	d.cellAddr = make([]byte, o.Rows*o.Cols)
	for r := 0; r < d.rows; r++ {
		for c := 0; c < d.cols; c++ {
			a := rowBase(r, d.cols) + byte(c)
			d.cellAddr[r*d.cols+c] = a
			d.addrCell[a] = int16(r*d.cols + c)
		}
	}
	if err := d.init(true); err != nil {
		return nil, fmt.Errorf("hd44780: initialising %s: %w", p, err)
	}
	return d, nil
}

func appendCmd(ops []byte, c byte) []byte  { return append(ops, c>>4, c&0x0F) }
func appendData(ops []byte, v byte) []byte { return append(ops, opRS|v>>4, opRS|v&0x0F) }

func (d *Dev) functionSet() byte {
	if d.rows > 1 {
		return cmdFunction | 0x08
	}
	return cmdFunction
}

func (d *Dev) displayControl() byte {
	c := byte(cmdDisplay)
	if d.displayOn {
		c |= 0x04
	}
	if d.cursorOn {
		c |= 0x02
	}
	if d.blinkOn {
		c |= 0x01
	}
	return c
}

// send writes ops in one transaction.
func (d *Dev) send(ops []byte) error {
	d.stats.Tx++
	d.stats.Bytes += d.port.bytes(len(ops))
	if err := d.port.send(ops); err != nil {
		d.stats.Errors++
		return err
	}
	return nil
}

// init runs the 4-bit initialisation of datasheet figure 24. After power-on
// it waits for the supply and clears the display; otherwise (re-init) it
// returns home instead, so the glass does not blank before the redraw.
func (d *Dev) init(powerOn bool) error {
	d.stats.Inits++
	d.lastInit = d.now()
	d.ac, d.shownValid, d.needInit = -1, false, true
	for i := range d.slots {
		if d.slots[i].valid {
			d.slots[i].dirty = true
		}
	}
	d.stats.Tx++
	d.stats.Bytes++
	if err := d.port.idle(d.backlight); err != nil {
		d.stats.Errors++
		return err
	}
	if powerOn {
		d.sleep(50 * time.Millisecond) // > 40 ms after VCC rises to 2.7 V
	}
	for _, step := range []struct {
		nibble byte
		wait   time.Duration
	}{{0x3, 4500 * time.Microsecond}, {0x3, 150 * time.Microsecond}, {0x3, 150 * time.Microsecond}, {0x2, 150 * time.Microsecond}} {
		if err := d.send([]byte{step.nibble}); err != nil {
			return err
		}
		d.sleep(step.wait)
	}
	ops := appendCmd(d.ops[:0], d.functionSet())
	if powerOn {
		ops = appendCmd(ops, cmdDisplay) // display off
		ops = appendCmd(ops, cmdClear)
		if err := d.send(ops); err != nil {
			return err
		}
		d.sleep(2 * time.Millisecond)
		ops = appendCmd(ops[:0], cmdEntry|0x02)
		ops = appendCmd(ops, d.displayControl())
		if err := d.send(ops); err != nil {
			return err
		}
		for i := range d.shown {
			d.shown[i] = ' '
		}
		d.shownValid = true
	} else {
		ops = appendCmd(ops, cmdEntry|0x02)
		ops = appendCmd(ops, d.displayControl())
		ops = appendCmd(ops, cmdHome)
		if err := d.send(ops); err != nil {
			return err
		}
		d.sleep(2 * time.Millisecond)
	}
	d.ops = ops
	d.ac = 0
	d.needInit = false
	return nil
}

// fail records that the controller state is unknown after an error.
func (d *Dev) fail() {
	d.needInit, d.shownValid, d.ac = true, false, -1
}

// sync makes the glass match the frame, re-initialising and retrying once
// after an error.
func (d *Dev) sync(ctx context.Context) error {
	err := d.flush(ctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	d.log.Warn("hd44780: write failed, re-initialising", "dev", d.port.String(), "err", err)
	if err := d.flush(ctx); err != nil {
		return err
	}
	return nil
}

func (d *Dev) flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !d.needInit && d.refresh > 0 && d.now().Sub(d.lastInit) >= d.refresh {
		d.needInit = true
	}
	if d.needInit {
		if err := d.init(false); err != nil {
			d.fail()
			return fmt.Errorf("hd44780: re-initialising %s: %w", d.port, err)
		}
	}
	codes := d.encode()
	if err := d.loadGlyphs(); err != nil {
		d.fail()
		return fmt.Errorf("hd44780: loading custom glyphs: %w", err)
	}
	var prev []byte
	if d.shownValid {
		prev = d.shown
	}
	for _, s := range d.segments(prev, codes) {
		if err := ctx.Err(); err != nil {
			return err
		}
		ops := d.ops[:0]
		if d.ac != int(s.addr) {
			ops = appendCmd(ops, cmdDDRAM|s.addr)
		}
		for i := 0; i < s.n; i++ {
			ops = appendData(ops, codes[d.addrCell[int(s.addr)+i]])
		}
		d.ops = ops
		if err := d.send(ops); err != nil {
			d.fail()
			return fmt.Errorf("hd44780: writing %d cells at DDRAM %#02x: %w", s.n, s.addr, err)
		}
		for i := 0; i < s.n; i++ {
			c := d.addrCell[int(s.addr)+i]
			d.shown[c] = codes[c]
		}
		d.ac = d.after(int(s.addr) + s.n - 1)
	}
	d.shownValid = true
	if d.cursorOn || d.blinkOn {
		want := int(d.cellAddr[d.row*d.cols+min(d.col, d.cols-1)])
		if d.ac != want {
			if err := d.send(appendCmd(d.ops[:0], cmdDDRAM|byte(want))); err != nil {
				d.fail()
				return fmt.Errorf("hd44780: moving the cursor: %w", err)
			}
			d.ac = want
		}
	}
	return nil
}

// Draw makes the glass show f (clipped or padded to the display size),
// sending only the cells that changed. After a bus error it re-initialises the
// controller and redraws everything once before giving up.
func (d *Dev) Draw(ctx context.Context, f *display.Frame) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.frame.CopyFrom(f)
	return d.sync(ctx)
}

// Reset re-initialises the controller and redraws the whole glass.
func (d *Dev) Reset(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.needInit = true
	return d.sync(ctx)
}

// Run re-initialises and redraws every Opts.Refresh until ctx is done, so
// that a glitched glass heals even when nothing is drawn. Draw does the same
// when a refresh is due, so Run is only needed for displays that may stay
// unchanged for long. Errors are logged; Run returns ctx.Err().
func (d *Dev) Run(ctx context.Context) error {
	if d.refresh <= 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	t := time.NewTicker(max(d.refresh/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			d.mu.Lock()
			if d.now().Sub(d.lastInit) >= d.refresh {
				if err := d.sync(ctx); err != nil && ctx.Err() == nil {
					d.log.Warn("hd44780: refresh failed", "dev", d.port.String(), "err", err)
				}
			}
			d.mu.Unlock()
		}
	}
}

// Frame returns a copy of the frame the display shows (or will show once the
// bus works again).
func (d *Dev) Frame() *display.Frame {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.frame.Clone()
}

// Size returns the number of rows and columns.
func (d *Dev) Size() (rows, cols int) { return d.rows, d.cols }

// Shows implements display.Charset: the ROM's characters and the defined
// glyphs.
func (d *Dev) Shows(r rune) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.shows(r)
}

func (d *Dev) shows(r rune) bool {
	if _, ok := d.glyphs[r]; ok {
		return true
	}
	return d.rom.Shows(r)
}

type devCharset struct{ d *Dev }

func (c devCharset) Shows(r rune) bool { return c.d.shows(r) }

// DefineGlyph makes cells holding r show g, a 5x8 pattern, through CGRAM.
// It overrides the ROM's character for r, if any. The glyph is loaded when a
// frame first needs it.
func (d *Dev) DefineGlyph(r rune, g display.Glyph) error {
	if r < 0x20 || !utf8.ValidRune(r) {
		return fmt.Errorf("hd44780: cannot define a glyph for %U", r)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range g {
		g[i] &= 0x1F
	}
	d.glyphs[r] = g
	delete(d.builtinGlyph, r)
	if s := d.slotOf(r); s >= 0 && d.slots[s].g != g {
		d.slots[s].g, d.slots[s].dirty = g, true
	}
	return nil
}

// Stats returns what the driver sent so far.
func (d *Dev) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Backlight implements display.DisplayBacklight: 0 turns the backlight off,
// any other intensity on.
func (d *Dev) Backlight(intensity pdisplay.Intensity) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.port.hasBacklight() {
		return fmt.Errorf("hd44780: no backlight pin: %w", pdisplay.ErrNotImplemented)
	}
	d.backlight = intensity > 0
	d.stats.Tx++
	d.stats.Bytes++
	if err := d.port.idle(d.backlight); err != nil {
		d.stats.Errors++
		d.fail()
		return fmt.Errorf("hd44780: switching the backlight: %w", err)
	}
	return nil
}

// control sends the display on/off control instruction; after an error the
// re-initialisation applies it.
func (d *Dev) control() error {
	if err := d.send(appendCmd(d.ops[:0], d.displayControl())); err != nil {
		d.fail()
		d.log.Warn("hd44780: write failed, re-initialising", "dev", d.port.String(), "err", err)
		return d.flush(context.Background())
	}
	return nil
}

// Halt implements conn.Resource: it turns the display and the backlight off.
func (d *Dev) Halt() error {
	if err := d.Display(false); err != nil {
		return err
	}
	if err := d.Backlight(0); err != nil && !errors.Is(err, pdisplay.ErrNotImplemented) {
		return err
	}
	return nil
}

// String implements display.TextDisplay.
func (d *Dev) String() string {
	return fmt.Sprintf("HD44780 %dx%d ROM %s on %s", d.cols, d.rows, d.rom, d.port)
}

// ROM is the character ROM the glass draws with.
func (d *Dev) ROM() display.ROM { return d.rom }

// port is the wiring: a PCF8574 or GPIO lines.
type port interface {
	// send clocks ops out in one transaction: each op is a nibble (bits
	// 0-3) with opRS for the data register.
	send(ops []byte) error
	// idle sets EN low and the backlight.
	idle(backlight bool) error
	hasBacklight() bool
	// bytes is the number of bytes send puts on the bus for n ops.
	bytes(n int) int
	String() string
}
