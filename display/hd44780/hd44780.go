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
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"periph.io/x/conn/v3"
	pdisplay "periph.io/x/conn/v3/display"
	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/i2c"

	"termlink/display"
)

// PinMap gives the PCF8574 port bit (0-7) wired to each LCD line.
type PinMap struct {
	RS, RW, EN, BL, D4, D5, D6, D7 uint8
	// BacklightActiveLow is set for backpacks whose backlight is on when BL
	// is low.
	BacklightActiveLow bool
}

// DefaultPinMap is the wiring of the common PCF8574 backpacks (and the one
// used when Opts.Pins is the zero value): P0=RS, P1=RW, P2=EN, P3=backlight,
// P4-P7=D4-D7.
var DefaultPinMap = PinMap{RS: 0, RW: 1, EN: 2, BL: 3, D4: 4, D5: 5, D6: 6, D7: 7}

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

type slot struct {
	r     rune
	g     display.Glyph
	valid bool
	dirty bool // CGRAM does not hold g yet
	used  uint64
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

// New opens an HD44780 behind a PCF8574 (addresses 0x20-0x27) or PCF8574A
// (0x38-0x3F) on bus and initialises it.
func New(bus i2c.Bus, addr uint16, opts *Opts) (*Dev, error) {
	if bus == nil {
		return nil, errors.New("hd44780: nil I2C bus")
	}
	if !(addr >= 0x20 && addr <= 0x27) && !(addr >= 0x38 && addr <= 0x3F) {
		return nil, fmt.Errorf("hd44780: I2C address %#02x: a PCF8574 answers at 0x20-0x27, a PCF8574A at 0x38-0x3F", addr)
	}
	var o Opts
	if opts != nil {
		o = *opts
	}
	pins := o.Pins
	if pins == (PinMap{}) {
		pins = DefaultPinMap
	}
	p, err := newPCF(bus, addr, pins)
	if err != nil {
		return nil, err
	}
	return newDev(p, o)
}

// NewGPIO opens an HD44780 wired in 4-bit mode to GPIO lines (R/W tied to
// ground) and initialises it. opts.Backlight is the optional backlight
// switch.
func NewGPIO(rs, en, d4, d5, d6, d7 gpio.PinOut, opts *Opts) (*Dev, error) {
	for i, p := range []gpio.PinOut{rs, en, d4, d5, d6, d7} {
		if p == nil {
			return nil, fmt.Errorf("hd44780: pin %s is nil", []string{"RS", "EN", "D4", "D5", "D6", "D7"}[i])
		}
	}
	var o Opts
	if opts != nil {
		o = *opts
	}
	sleep := o.Sleep
	if sleep == nil {
		sleep = time.Sleep
	}
	return newDev(&gpioPort{rs: rs, en: en, d: [4]gpio.PinOut{d4, d5, d6, d7}, bl: o.Backlight, sleep: sleep}, o)
}

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

// rowBase is the DDRAM address of the first cell of row: rows 0 and 1 start
// at 0x00 and 0x40, rows 2 and 3 continue them (0x00+cols, 0x40+cols).
func rowBase(row, cols int) byte {
	b := byte((row / 2) * cols)
	if row%2 == 1 {
		b += 0x40
	}
	return b
}

// builtinGlyphs stand in for characters ROM A00 lacks.
var builtinGlyphs = map[rune]display.Glyph{
	'\\': {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00, 0x00},
	'~':  {0x00, 0x00, 0x00, 0x0D, 0x12, 0x00, 0x00, 0x00},
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

// after returns the address counter after a write at DDRAM address a.
func (d *Dev) after(a int) int {
	a++
	if d.rows == 1 { // 1-line mode: 0x00-0x4F
		return a % 0x50
	}
	switch a {
	case 0x28:
		return 0x40
	case 0x68:
		return 0x00
	}
	return a
}

type segment struct {
	addr byte
	n    int
}

// segments returns the changed DDRAM ranges, in address order, joining ranges
// that are contiguous in DDRAM (row 0 runs on into row 2 on a 20x4 display)
// or separated by at most joinGap shown cells.
func (d *Dev) segments(prev, codes []byte) []segment {
	runs := display.DiffCells(prev, codes, d.cols, 0)
	if len(runs) == 0 {
		return nil
	}
	segs := make([]segment, 0, len(runs))
	for _, r := range runs {
		segs = append(segs, segment{addr: d.cellAddr[r.Row*d.cols+r.Col], n: r.Len})
	}
	slices.SortFunc(segs, func(a, b segment) int { return int(a.addr) - int(b.addr) })
	out := segs[:1]
	for _, s := range segs[1:] {
		last := &out[len(out)-1]
		end := int(last.addr) + last.n
		if d.joinable(end, int(s.addr)) {
			last.n = int(s.addr) + s.n - int(last.addr)
			continue
		}
		out = append(out, s)
	}
	return out
}

// joinable reports whether a write can run on from address end to start:
// same DDRAM line, at most joinGap cells between, all of them shown.
func (d *Dev) joinable(end, start int) bool {
	if start < end || start-end > joinGap || (end >= 0x40) != (start >= 0x40) {
		return false
	}
	for a := end; a < start; a++ {
		if d.addrCell[a] < 0 {
			return false
		}
	}
	return true
}

// encode turns the frame into character codes, assigning CGRAM slots to the
// custom glyphs it needs (least recently used first).
func (d *Dev) encode() []byte {
	d.gen++
	cells := d.frame
	var miss []rune
	for r := 0; r < d.rows; r++ {
		for _, x := range cells.Row(r) {
			g, ok := d.glyphs[x]
			if !ok {
				continue
			}
			if s := d.slotOf(x); s >= 0 {
				if d.slots[s].g != g { // redefined since loaded
					d.slots[s].g, d.slots[s].dirty = g, true
				}
				d.slots[s].used = d.gen
			} else if !slices.Contains(miss, x) {
				miss = append(miss, x)
			}
		}
	}
	for _, x := range miss {
		if s := d.victim(); s >= 0 {
			d.slots[s] = slot{r: x, g: d.glyphs[x], valid: true, dirty: true, used: d.gen}
		}
	}
	i := 0
	for r := 0; r < d.rows; r++ {
		for _, x := range cells.Row(r) {
			d.codes[i] = d.code(x)
			i++
		}
	}
	return d.codes
}

func (d *Dev) slotOf(x rune) int {
	for i := range d.slots {
		if d.slots[i].valid && d.slots[i].r == x {
			return i
		}
	}
	return -1
}

// victim returns a free slot, or the least recently used one not needed by
// the current frame, or -1.
func (d *Dev) victim() int {
	best := -1
	for i := range d.slots {
		s := &d.slots[i]
		if !s.valid {
			return i
		}
		if s.used != d.gen && (best < 0 || s.used < d.slots[best].used) {
			best = i
		}
	}
	return best
}

// code returns the character code for x.
func (d *Dev) code(x rune) byte {
	if _, ok := d.glyphs[x]; ok {
		if s := d.slotOf(x); s >= 0 && d.slots[s].used == d.gen {
			return byte(s)
		}
		return placeholder // more than 8 glyphs in one frame
	}
	if c, ok := d.rom.Code(x); ok {
		return c
	}
	f := display.FoldRune(d.rom, x)
	if f == "" {
		return ' '
	}
	if r, n := utf8.DecodeRuneInString(f); n == len(f) {
		if c, ok := d.rom.Code(r); ok {
			return c
		}
	}
	return placeholder
}

// loadGlyphs writes the dirty CGRAM slots in one transaction.
func (d *Dev) loadGlyphs() error {
	ops := d.ops[:0]
	next, n := -1, 0
	for i := range d.slots {
		s := &d.slots[i]
		if !s.valid || !s.dirty {
			continue
		}
		if next != i*8 {
			ops = appendCmd(ops, cmdCGRAM|byte(i*8))
		}
		for _, row := range s.g {
			ops = appendData(ops, row&0x1F)
		}
		next = (i + 1) * 8
		n++
	}
	d.ops = ops
	if n == 0 {
		return nil
	}
	d.ac = -1 // the address counter now points into CGRAM
	if err := d.send(ops); err != nil {
		return err
	}
	for i := range d.slots {
		d.slots[i].dirty = false
	}
	d.stats.GlyphLoads += n
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

// Rows implements display.TextDisplay.
func (d *Dev) Rows() int { return d.rows }

// Cols implements display.TextDisplay.
func (d *Dev) Cols() int { return d.cols }

// MinRow implements display.TextDisplay: rows count from 0.
func (d *Dev) MinRow() int { return 0 }

// MinCol implements display.TextDisplay: columns count from 0.
func (d *Dev) MinCol() int { return 0 }

// AutoScroll implements display.TextDisplay: when on, text written past the
// last cell scrolls the display up a row; when off it continues at the top
// left.
func (d *Dev) AutoScroll(enabled bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.autoScroll = enabled
	return nil
}

// Clear implements display.TextDisplay: it blanks the frame and moves the
// cursor home.
func (d *Dev) Clear() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.frame.Clear()
	d.row, d.col = 0, 0
	return d.sync(context.Background())
}

// Home implements display.TextDisplay.
func (d *Dev) Home() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.row, d.col = 0, 0
	return d.sync(context.Background())
}

// Cursor implements display.TextDisplay: CursorOff, CursorUnderline, and
// CursorBlock or CursorBlink (the HD44780's blinking block).
func (d *Dev) Cursor(modes ...pdisplay.CursorMode) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cursor, blink := d.cursorOn, d.blinkOn
	for _, m := range modes {
		switch m {
		case pdisplay.CursorOff:
			cursor, blink = false, false
		case pdisplay.CursorUnderline:
			cursor = true
		case pdisplay.CursorBlock, pdisplay.CursorBlink:
			blink = true
		default:
			return fmt.Errorf("hd44780: cursor mode %d: %w", m, pdisplay.ErrInvalidCommand)
		}
	}
	d.cursorOn, d.blinkOn = cursor, blink
	if err := d.control(); err != nil {
		return err
	}
	return d.sync(context.Background())
}

// Display implements display.TextDisplay: it turns the glass on or off,
// keeping its contents.
func (d *Dev) Display(on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.displayOn = on
	return d.control()
}

// Move implements display.TextDisplay. Forward and Backward wrap across rows,
// Up and Down wrap around the display.
func (d *Dev) Move(dir pdisplay.CursorDirection) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	col := min(d.col, d.cols-1)
	switch dir {
	case pdisplay.Forward:
		col++
		if col == d.cols {
			col, d.row = 0, (d.row+1)%d.rows
		}
	case pdisplay.Backward:
		col--
		if col < 0 {
			col, d.row = d.cols-1, (d.row+d.rows-1)%d.rows
		}
	case pdisplay.Up:
		d.row = (d.row + d.rows - 1) % d.rows
	case pdisplay.Down:
		d.row = (d.row + 1) % d.rows
	default:
		return fmt.Errorf("hd44780: move direction %d: %w", dir, pdisplay.ErrInvalidCommand)
	}
	d.col = col
	return d.syncCursor()
}

// MoveTo implements display.TextDisplay; row and col count from 0.
func (d *Dev) MoveTo(row, col int) error {
	if row < 0 || row >= d.rows || col < 0 || col >= d.cols {
		return fmt.Errorf("hd44780: MoveTo(%d, %d) outside the %dx%d display: %w", row, col, d.cols, d.rows, pdisplay.ErrInvalidCommand)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.row, d.col = row, col
	return d.syncCursor()
}

func (d *Dev) syncCursor() error {
	if !d.cursorOn && !d.blinkOn {
		return nil
	}
	return d.sync(context.Background())
}

// Write implements display.TextDisplay and io.Writer: p is UTF-8 text, folded
// to what the display shows (see display.Fold), written from the cursor on;
// '\n' starts the next row. It returns len(p) once the text is in the frame,
// with the error of the bus, if any; the text reaches the glass on the next
// successful write.
func (d *Dev) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range display.Fold(devCharset{d}, string(p)) {
		if r == '\n' {
			d.newline()
			continue
		}
		if d.col >= d.cols {
			d.newline()
		}
		d.frame.Set(d.row, d.col, r)
		d.col++
	}
	return len(p), d.sync(context.Background())
}

// WriteString implements display.TextDisplay.
func (d *Dev) WriteString(s string) (int, error) { return d.Write([]byte(s)) }

func (d *Dev) newline() {
	d.col = 0
	d.row++
	if d.row < d.rows {
		return
	}
	if d.autoScroll {
		d.frame.ScrollUp(1)
		d.row = d.rows - 1
	} else {
		d.row = 0
	}
}

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

type pcfPort struct {
	bus   i2c.Bus
	addr  uint16
	rs    byte
	en    byte
	bl    byte
	blLow bool
	d     [4]byte
	base  byte // backlight bit as last set
	buf   []byte
}

func newPCF(bus i2c.Bus, addr uint16, m PinMap) (*pcfPort, error) {
	var seen byte
	for _, l := range []uint8{m.RS, m.RW, m.EN, m.BL, m.D4, m.D5, m.D6, m.D7} {
		if l > 7 {
			return nil, fmt.Errorf("hd44780: pin map: PCF8574 port bit %d does not exist", l)
		}
		if seen&(1<<l) != 0 {
			return nil, fmt.Errorf("hd44780: pin map: PCF8574 port bit %d used twice", l)
		}
		seen |= 1 << l
	}
	return &pcfPort{bus: bus, addr: addr, rs: 1 << m.RS, en: 1 << m.EN, bl: 1 << m.BL,
		blLow: m.BacklightActiveLow, d: [4]byte{1 << m.D4, 1 << m.D5, 1 << m.D6, 1 << m.D7}}, nil
}

func (p *pcfPort) send(ops []byte) error {
	buf := p.buf[:0]
	for _, op := range ops {
		v := p.base
		for i, m := range p.d {
			if op&(1<<i) != 0 {
				v |= m
			}
		}
		if op&opRS != 0 {
			v |= p.rs
		}
		buf = append(buf, v|p.en, v) // data latched on the falling edge
	}
	p.buf = buf
	return p.bus.Tx(p.addr, buf, nil)
}

func (p *pcfPort) idle(backlight bool) error {
	p.base = 0
	if backlight != p.blLow {
		p.base = p.bl
	}
	return p.bus.Tx(p.addr, []byte{p.base}, nil)
}

func (p *pcfPort) hasBacklight() bool { return true }
func (p *pcfPort) bytes(n int) int    { return 2 * n }
func (p *pcfPort) String() string     { return fmt.Sprintf("PCF8574 %#02x on %s", p.addr, p.bus) }

type gpioPort struct {
	rs, en gpio.PinOut
	d      [4]gpio.PinOut
	bl     gpio.PinOut
	sleep  func(time.Duration)
}

func (g *gpioPort) send(ops []byte) error {
	for i, op := range ops {
		if err := g.rs.Out(op&opRS != 0); err != nil {
			return err
		}
		for j, p := range g.d {
			if err := p.Out(op&(1<<j) != 0); err != nil {
				return err
			}
		}
		if err := g.en.Out(gpio.High); err != nil {
			return err
		}
		g.sleep(time.Microsecond) // EN pulse width >= 450 ns
		if err := g.en.Out(gpio.Low); err != nil {
			return err
		}
		if i%2 == 1 {
			g.sleep(50 * time.Microsecond) // 37 µs per instruction
		}
	}
	return nil
}

func (g *gpioPort) idle(backlight bool) error {
	if err := g.en.Out(gpio.Low); err != nil {
		return err
	}
	if g.bl != nil {
		return g.bl.Out(gpio.Level(backlight))
	}
	return nil
}

func (g *gpioPort) hasBacklight() bool { return g.bl != nil }
func (g *gpioPort) bytes(int) int      { return 0 }
func (g *gpioPort) String() string {
	return fmt.Sprintf("GPIO RS=%s EN=%s D4-D7=%s,%s,%s,%s", g.rs, g.en, g.d[0], g.d[1], g.d[2], g.d[3])
}
