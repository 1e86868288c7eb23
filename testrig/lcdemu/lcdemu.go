// Package lcdemu emulates an HD44780 character LCD behind a PCF8574 I²C
// backpack. A *Bus is a periph.io i2c.Bus: hand it to a driver (ours in
// termlink/display/hd44780, or any other) and read back what the glass shows.
//
// The emulator decodes the PCF8574 port byte stream the way the wiring does:
// every written byte sets the eight port pins; the controller latches RS, R/W
// and D4-D7 on each falling edge of EN that followed a rising edge. It then
// runs the HD44780U state machine from the datasheet (Hitachi ADE-207-272,
// https://www.sparkfun.com/datasheets/LCD/HD44780.pdf): power-on in 8-bit
// mode (the unconnected DB0-DB3 read high through the chip's pull-ups, so
// 8-bit instructions have a low nibble of 0xF), function set to 4-bit mode,
// entry mode, display on/off control, clear, home, cursor and display shift,
// CGRAM and DDRAM addresses, data writes with address auto-increment, the
// 2-line DDRAM layout (0x00-0x27 and 0x40-0x67) and the row addresses of
// 16x2, 20x4 and 16x4 glass (0x00, 0x40, 0x00+cols, 0x40+cols), and reads of
// the busy flag, address counter and RAM.
//
// What a real chip would ignore or mis-handle is reported as a Warning and
// otherwise executed anyway: data or instructions before the 4-bit
// initialisation, nibbles out of sync, RS or data lines changing on the EN
// edge, DDRAM addresses that do not exist or that the glass does not show
// and, when Opts.Timing is set, instructions sent while the controller is
// busy (37 µs per instruction, 41 µs per data write, 1.52 ms for clear and
// home, 4.1 ms and 100 µs after the first two function sets of the
// initialisation, Opts.PowerOnDelay after power-on). Timing uses the bus speed for the
// time each byte takes on the wire and Opts.Now between transactions; a
// driver using a fake sleep must advance the same clock (see Clock).
//
// Text renders the glass (custom CGRAM characters as the markers ⓪-⑦), and
// Render draws it in a box with the backlight state. The bus answers only at
// its address (other addresses fail as a NACK would), can fail transactions
// on purpose (InjectErrors), counts transactions and bytes (Stats), and can
// write every transaction to a trace (Opts.Trace, SetTrace): one line per Tx
// with the time, the address and the bytes in hex. It is safe for concurrent
// use.
package lcdemu

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"

	"termlink/display"
)

// PinMap gives the PCF8574 port bit (0-7) wired to each LCD line.
type PinMap struct {
	RS, RW, EN, BL, D4, D5, D6, D7 uint8
}

// DefaultPinMap is the wiring of the common PCF8574 LCD backpacks:
// P0=RS, P1=RW, P2=EN, P3=backlight, P4-P7=D4-D7.
var DefaultPinMap = PinMap{RS: 0, RW: 1, EN: 2, BL: 3, D4: 4, D5: 5, D6: 6, D7: 7}

// Opts configures a Bus. The zero value is a 16x2 A00 display at 0x27 on a
// 100 kHz bus, without the timing model.
type Opts struct {
	Addr       uint16           // I²C address; 0 means 0x27
	Rows, Cols int              // glass size; 0 means 2 x 16
	ROM        display.ROM      // character ROM used to render the glass
	Pins       PinMap           // backpack wiring; the zero value means DefaultPinMap
	Speed      physic.Frequency // initial bus speed; 0 means 100 kHz
	// Timing turns on the busy-time model (warnings of kind Busy).
	Timing bool
	// PowerOnDelay is how long after power-on the controller accepts
	// instructions; 0 means 40 ms, the datasheet's figure for VCC = 2.7 V
	// (it is 15 ms at 4.5 V).
	PowerOnDelay time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Clock, when not nil, is the clock instead of Now, and each transaction
	// advances it to the moment its last byte is on the wire, as a real
	// transaction blocks its caller. Share it with the driver's sleep.
	Clock *Clock
	// Trace, when not nil, receives one line per transaction.
	Trace io.Writer
	// MaxWarnings caps the warnings kept; 0 means 1000.
	MaxWarnings int
}

// Kind classifies a Warning.
type Kind int

// Warning kinds.
const (
	DataBeforeInit    Kind = iota + 1 // data write before the 4-bit initialisation
	CommandBeforeInit                 // instruction other than function set in 8-bit mode
	ShortInit                         // 4-bit mode set without the function-set resets first
	NibbleSync                        // the two nibbles of a byte disagree (RS): out of sync
	Busy                              // instruction while the controller is busy
	BadAddress                        // DDRAM address that does not exist in this mode
	OutsideWindow                     // data written at a DDRAM address the glass does not show
	Setup                             // RS/RW/data changed on or during the EN pulse
	BusSpeed                          // bus faster than the PCF8574's 100 kHz
)

func (k Kind) String() string {
	switch k {
	case DataBeforeInit:
		return "data before init"
	case CommandBeforeInit:
		return "command before init"
	case ShortInit:
		return "short init"
	case NibbleSync:
		return "nibble out of sync"
	case Busy:
		return "busy"
	case BadAddress:
		return "bad address"
	case OutsideWindow:
		return "outside window"
	case Setup:
		return "setup"
	case BusSpeed:
		return "bus speed"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Warning is something a real chip would ignore or mis-handle.
type Warning struct {
	Tx   int // transaction number (1-based) it happened in; 0 outside any
	Kind Kind
	Msg  string
}

func (w Warning) String() string { return fmt.Sprintf("tx %d: %s: %s", w.Tx, w.Kind, w.Msg) }

// Stats counts the traffic.
type Stats struct {
	Tx           int // transactions addressed to the emulator, failed ones included
	WriteBytes   int
	ReadBytes    int
	NACK         int // transactions to other addresses
	Injected     int // transactions failed by InjectErrors
	Pulses       int // EN write pulses (nibbles in 4-bit mode)
	Instructions int
	DataWrites   int
}

// Bytes returns the bytes written and read.
func (s Stats) Bytes() int { return s.WriteBytes + s.ReadBytes }

// State is a snapshot of the controller registers.
type State struct {
	Ready         bool // in 4-bit mode after a proper initialisation
	FourBit       bool
	TwoLines      bool
	DisplayOn     bool
	CursorOn      bool
	BlinkOn       bool
	Backlight     bool
	Increment     bool // entry mode I/D
	ShiftOnWrite  bool // entry mode S
	AC            byte // address counter
	CGRAM         bool // AC points into CGRAM
	Shift         int  // display shift, in characters to the left
	PendingNibble bool // a high nibble waits for its low nibble
	Port          byte // PCF8574 output latch
}

// ErrInjected is returned by transactions failed by InjectErrors.
var ErrInjected = errors.New("lcdemu: injected I2C error")

// Bus is the emulated I²C bus with one PCF8574 + HD44780 on it.
type Bus struct {
	mu           sync.Mutex
	addr         uint16
	rows, cols   int
	rom          display.ROM
	pin          pinBits
	timing       bool
	powerOnDelay time.Duration
	now          func() time.Time
	clock        *Clock
	trace        io.Writer
	maxWarnings  int
	speed        physic.Frequency
	closed       bool

	port byte
	// EN pulse in progress.
	pulse            bool
	pulseRS, pulseRW bool

	// Controller.
	dl8         bool // 8-bit interface
	initialised bool // set to 4-bit mode by a function set in 8-bit mode
	twoLines    bool
	displayOn   bool
	cursorOn    bool
	blinkOn     bool
	inc         bool
	shiftWrite  bool
	shift       int
	ac          byte
	cgMode      bool
	pending     bool
	pendNib     byte
	pendRS      bool
	readPhase   int
	fsResets    int // DL=1 function sets in a row
	ddram       [128]byte
	cgram       [64]byte
	powerOn     time.Time
	busyUntil   time.Time
	busFree     time.Time // end of the last transaction on the wire

	txn      int
	warnings []Warning
	dropped  int
	stats    Stats
	failN    int
	failPart int
}

type pinBits struct {
	rs, rw, en, bl byte
	d              [4]byte
	data           byte
}

var _ i2c.BusCloser = (*Bus)(nil)

// New returns an emulated bus, powered on.
func New(opts *Opts) (*Bus, error) {
	var o Opts
	if opts != nil {
		o = *opts
	}
	if o.Addr == 0 {
		o.Addr = 0x27
	}
	if o.Addr > 0x7F {
		return nil, fmt.Errorf("lcdemu: I2C address %#x is not a 7-bit address", o.Addr)
	}
	if o.Rows == 0 && o.Cols == 0 {
		o.Rows, o.Cols = 2, 16
	}
	if err := checkSize(o.Rows, o.Cols); err != nil {
		return nil, err
	}
	if o.Pins == (PinMap{}) {
		o.Pins = DefaultPinMap
	}
	pb, err := pinBitsOf(o.Pins)
	if err != nil {
		return nil, err
	}
	if o.Speed == 0 {
		o.Speed = 100 * physic.KiloHertz
	}
	if o.Clock != nil {
		o.Now = o.Clock.Now
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.PowerOnDelay <= 0 {
		o.PowerOnDelay = 40 * time.Millisecond
	}
	if o.MaxWarnings <= 0 {
		o.MaxWarnings = 1000
	}
	b := &Bus{
		addr: o.Addr, rows: o.Rows, cols: o.Cols, rom: o.ROM, pin: pb, clock: o.Clock,
		timing: o.Timing, powerOnDelay: o.PowerOnDelay, now: o.Now, trace: o.Trace, maxWarnings: o.MaxWarnings,
	}
	b.setSpeed(o.Speed)
	b.powerCycle()
	return b, nil
}

func checkSize(rows, cols int) error {
	switch {
	case rows != 1 && rows != 2 && rows != 4:
		return fmt.Errorf("lcdemu: %d rows: want 1, 2 or 4", rows)
	case cols < 1 || cols > 40:
		return fmt.Errorf("lcdemu: %d columns: want 1 to 40", cols)
	case rows == 4 && cols > 20:
		return fmt.Errorf("lcdemu: 4 rows of %d columns need two controllers", cols)
	}
	return nil
}

func pinBitsOf(m PinMap) (pinBits, error) {
	lines := []uint8{m.RS, m.RW, m.EN, m.BL, m.D4, m.D5, m.D6, m.D7}
	var seen byte
	for _, l := range lines {
		if l > 7 {
			return pinBits{}, fmt.Errorf("lcdemu: pin map %+v: port bit %d does not exist", m, l)
		}
		if seen&(1<<l) != 0 {
			return pinBits{}, fmt.Errorf("lcdemu: pin map %+v: port bit %d used twice", m, l)
		}
		seen |= 1 << l
	}
	p := pinBits{rs: 1 << m.RS, rw: 1 << m.RW, en: 1 << m.EN, bl: 1 << m.BL,
		d: [4]byte{1 << m.D4, 1 << m.D5, 1 << m.D6, 1 << m.D7}}
	p.data = p.d[0] | p.d[1] | p.d[2] | p.d[3]
	return p, nil
}

func (p pinBits) nibble(v byte) byte {
	var n byte
	for i, m := range p.d {
		if v&m != 0 {
			n |= 1 << i
		}
	}
	return n
}

func (p pinBits) dataBits(n byte) byte {
	var v byte
	for i, m := range p.d {
		if n&(1<<i) != 0 {
			v |= m
		}
	}
	return v
}

// String implements i2c.Bus.
func (b *Bus) String() string {
	return fmt.Sprintf("lcdemu(HD44780 %dx%d ROM %s, PCF8574 at %#02x)", b.cols, b.rows, b.rom, b.addr)
}

// Close implements io.Closer: later transactions fail.
func (b *Bus) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// SetSpeed implements i2c.Bus. The PCF8574 is specified up to 100 kHz; a
// faster bus works in the emulator but adds a BusSpeed warning.
func (b *Bus) SetSpeed(f physic.Frequency) error {
	if f <= 0 {
		return fmt.Errorf("lcdemu: invalid bus speed %s", f)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.setSpeed(f)
	return nil
}

func (b *Bus) setSpeed(f physic.Frequency) {
	b.speed = f
	if f > 100*physic.KiloHertz {
		b.warn(BusSpeed, "bus at %s; the PCF8574 is specified up to 100 kHz", f)
	}
}

// Tx implements i2c.Bus: w is written to the port byte by byte, then r is
// read from it.
func (b *Bus) Tx(addr uint16, w, r []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	err := b.tx(now, addr, w, r)
	if b.clock != nil {
		b.clock.advanceTo(b.busFree)
	}
	if b.trace != nil {
		status := "ok"
		if err != nil {
			status = "err=" + strings.ReplaceAll(err.Error(), " ", "_")
		}
		fmt.Fprintf(b.trace, "%s addr=%#02x w=%x r=%x %s\n",
			now.UTC().Format("2006-01-02T15:04:05.000000Z"), addr, w, r, status)
	}
	return err
}

func (b *Bus) tx(now time.Time, addr uint16, w, r []byte) error {
	if b.closed {
		return errors.New("lcdemu: bus closed")
	}
	if addr != b.addr {
		b.stats.NACK++
		return fmt.Errorf("lcdemu: no ACK at I2C address %#02x (the emulated backpack is at %#02x)", addr, b.addr)
	}
	b.stats.Tx++
	b.txn++
	// The time each byte completes on the wire: 9 bit times per byte, the
	// address byte first.
	t := now
	if b.busFree.After(t) {
		t = b.busFree
	}
	byteTime := time.Duration(9 * float64(time.Second) / (float64(b.speed) / float64(physic.Hertz)))
	t = t.Add(byteTime)
	if b.failN > 0 {
		b.failN--
		b.stats.Injected++
		for _, v := range w[:min(b.failPart, len(w))] {
			t = t.Add(byteTime)
			b.write(v, t)
			b.stats.WriteBytes++
		}
		b.busFree = t
		return fmt.Errorf("%w (transaction %d to %#02x)", ErrInjected, b.txn, addr)
	}
	for _, v := range w {
		t = t.Add(byteTime)
		b.write(v, t)
	}
	for i := range r {
		t = t.Add(byteTime)
		r[i] = b.read()
	}
	b.busFree = t
	b.stats.WriteBytes += len(w)
	b.stats.ReadBytes += len(r)
	return nil
}

// write applies one byte to the PCF8574 output latch.
func (b *Bus) write(v byte, t time.Time) {
	p := b.port
	b.port = v
	pin := b.pin
	enBefore, enAfter := p&pin.en != 0, v&pin.en != 0
	switch {
	case !enBefore && enAfter: // rising edge: RS and R/W are sampled
		b.pulse = true
		b.pulseRS, b.pulseRW = v&pin.rs != 0, v&pin.rw != 0
	case enBefore && enAfter:
		if b.pulse && !b.pulseRW && (v^p)&(pin.rs|pin.rw) != 0 {
			b.warn(Setup, "RS or R/W changed while EN was high")
		}
	case enBefore && !enAfter: // falling edge: data are latched
		if !b.pulse {
			return // no rising edge seen since power-on
		}
		b.pulse = false
		if b.pulseRW {
			b.endRead()
			return
		}
		if (v^p)&(pin.data|pin.rs|pin.rw) != 0 {
			b.warn(Setup, "data, RS or R/W changed on the EN falling edge (port %#02x -> %#02x)", p, v)
		}
		rs := p&pin.rs != 0
		if rs != b.pulseRS {
			b.warn(Setup, "RS changed during the EN pulse")
		}
		b.nibble(rs, pin.nibble(p), t)
	}
}

// read returns the port pins: the latch, with D4-D7 driven by the controller
// during a read pulse (a pin latched low stays low).
func (b *Bus) read() byte {
	v := b.port
	if !b.pulse || !b.pulseRW {
		return v
	}
	var full byte
	if b.pulseRS {
		full = b.mem(b.ac)
	} else {
		full = b.ac & 0x7F
		if b.timing && b.busFree.Before(b.busyUntil) {
			full |= 0x80
		}
	}
	n := full >> 4
	if !b.dl8 && b.readPhase == 1 {
		n = full & 0x0F
	}
	return v&^b.pin.data | v&b.pin.dataBits(n)
}

func (b *Bus) endRead() {
	if !b.dl8 {
		b.readPhase ^= 1
		if b.readPhase == 1 {
			return
		}
	}
	if b.pulseRS {
		b.advance()
	}
}

func (b *Bus) mem(a byte) byte {
	if b.cgMode {
		return b.cgram[a&0x3F]
	}
	return b.ddram[a&0x7F]
}

func (b *Bus) nibble(rs bool, n byte, t time.Time) {
	b.stats.Pulses++
	if b.timing {
		switch {
		case t.Before(b.powerOn.Add(b.powerOnDelay)):
			b.warn(Busy, "write %v after power-on, before the supply settled (%v)", t.Sub(b.powerOn).Round(time.Microsecond), b.powerOnDelay)
		case t.Before(b.busyUntil):
			b.warn(Busy, "write while busy for another %v", b.busyUntil.Sub(t).Round(time.Microsecond))
		}
	}
	if b.dl8 {
		b.exec(rs, n<<4|0x0F, t) // DB0-DB3 are pulled up
		return
	}
	if !b.pending {
		b.pending, b.pendNib, b.pendRS = true, n, rs
		return
	}
	b.pending = false
	if rs != b.pendRS {
		b.warn(NibbleSync, "high nibble %#x with RS=%d, low nibble %#x with RS=%d: nibbles out of sync",
			b.pendNib, bit(b.pendRS), n, bit(rs))
	}
	b.exec(rs, b.pendNib<<4|n, t)
}

func bit(v bool) int {
	if v {
		return 1
	}
	return 0
}

const (
	execTime  = 37 * time.Microsecond
	writeTime = 41 * time.Microsecond // 37 µs + tADD
	longTime  = 1520 * time.Microsecond
)

func (b *Bus) exec(rs bool, v byte, t time.Time) {
	busy := execTime
	defer func() { b.busyUntil = t.Add(busy) }()
	if rs {
		busy = writeTime
		b.stats.DataWrites++
		if b.dl8 || !b.initialised {
			b.warn(DataBeforeInit, "data %#02x written before the 4-bit initialisation", v)
		}
		if b.cgMode {
			b.cgram[b.ac&0x3F] = v
			b.advance()
			return
		}
		if _, _, ok := b.cellOf(b.ac); !ok {
			b.warn(OutsideWindow, "data %#02x written at DDRAM %#02x, which the %dx%d glass does not show", v, b.ac, b.cols, b.rows)
		}
		b.ddram[b.ac&0x7F] = v
		b.advance()
		if b.shiftWrite {
			if b.inc {
				b.shift++
			} else {
				b.shift--
			}
		}
		return
	}
	b.stats.Instructions++
	if v&0xE0 != 0x20 {
		b.fsResets = 0
		if b.dl8 {
			b.warn(CommandBeforeInit, "instruction %#02x in 8-bit mode, before the 4-bit initialisation", v)
		}
	}
	switch {
	case v&0x80 != 0: // set DDRAM address
		b.cgMode = false
		b.ac = v & 0x7F
		if !b.validDDRAM(b.ac) {
			b.warn(BadAddress, "DDRAM address %#02x does not exist in %d-line mode", b.ac, 1+bit(b.twoLines))
		}
	case v&0x40 != 0: // set CGRAM address
		b.cgMode = true
		b.ac = v & 0x3F
	case v&0x20 != 0: // function set
		b.twoLines = v&0x08 != 0
		if v&0x10 != 0 {
			b.fsResets++
			switch b.fsResets {
			case 1:
				busy = 4100 * time.Microsecond
			case 2:
				busy = 100 * time.Microsecond
			}
			b.dl8 = true
			b.pending = false
			b.readPhase = 0
			return
		}
		if b.dl8 {
			if b.fsResets == 0 {
				b.warn(ShortInit, "4-bit mode set without the function-set resets first (datasheet figure 24)")
			}
			b.initialised = true
			b.dl8 = false
			b.pending = false
			b.readPhase = 0
		}
		b.fsResets = 0
	case v&0x10 != 0: // cursor or display shift
		right := v&0x04 != 0
		if v&0x08 != 0 {
			if right {
				b.shift--
			} else {
				b.shift++
			}
		} else {
			b.step(right)
		}
	case v&0x08 != 0: // display on/off control
		b.displayOn, b.cursorOn, b.blinkOn = v&0x04 != 0, v&0x02 != 0, v&0x01 != 0
	case v&0x04 != 0: // entry mode set
		b.inc, b.shiftWrite = v&0x02 != 0, v&0x01 != 0
	case v&0x02 != 0: // return home
		busy = longTime
		b.ac, b.cgMode, b.shift = 0, false, 0
	case v&0x01 != 0: // clear display
		busy = longTime
		for i := range b.ddram {
			b.ddram[i] = ' '
		}
		b.ac, b.cgMode, b.shift, b.inc = 0, false, 0, true
	}
}

func (b *Bus) validDDRAM(a byte) bool {
	if b.twoLines {
		return a <= 0x27 || (a >= 0x40 && a <= 0x67)
	}
	return a <= 0x4F
}

func (b *Bus) advance() { b.step(b.inc) }

// step moves the address counter one place, wrapping like the chip.
func (b *Bus) step(up bool) {
	if b.cgMode {
		if up {
			b.ac = (b.ac + 1) & 0x3F
		} else {
			b.ac = (b.ac - 1) & 0x3F
		}
		return
	}
	a := b.ac
	switch {
	case b.twoLines && up:
		a++
		switch a {
		case 0x28:
			a = 0x40
		case 0x68:
			a = 0x00
		}
	case b.twoLines:
		switch a {
		case 0x40:
			a = 0x27
		case 0x00:
			a = 0x67
		default:
			a--
		}
	case up:
		a = (a + 1) % 0x50
	case a == 0:
		a = 0x4F
	default:
		a--
	}
	b.ac = a & 0x7F
}

// addrOf returns the DDRAM address shown at row, col, if that cell is driven.
func (b *Bus) addrOf(row, col int) (byte, bool) {
	if b.twoLines {
		if row >= 2 && b.rows < 4 {
			return 0, false
		}
		base := byte(0x00)
		if row%2 == 1 {
			base = 0x40
		}
		pos := ((row/2)*b.cols + col + b.shift) % 40
		if pos < 0 {
			pos += 40
		}
		return base + byte(pos), true
	}
	if row != 0 {
		return 0, false // 1-line mode drives the first row only
	}
	pos := (col + b.shift) % 80
	if pos < 0 {
		pos += 80
	}
	return byte(pos), true
}

// cellOf returns the cell that shows DDRAM address a.
func (b *Bus) cellOf(a byte) (row, col int, ok bool) {
	for r := 0; r < b.rows; r++ {
		for c := 0; c < b.cols; c++ {
			if x, ok := b.addrOf(r, c); ok && x == a {
				return r, c, true
			}
		}
	}
	return 0, 0, false
}

func (b *Bus) warn(k Kind, format string, args ...any) {
	if len(b.warnings) >= b.maxWarnings {
		b.dropped++
		return
	}
	b.warnings = append(b.warnings, Warning{Tx: b.txn, Kind: k, Msg: fmt.Sprintf(format, args...)})
}

func (b *Bus) powerCycle() {
	b.port = 0xFF // PCF8574 outputs are high after power-on
	b.pulse = false
	b.dl8, b.initialised, b.twoLines = true, false, false
	b.displayOn, b.cursorOn, b.blinkOn = false, false, false
	b.inc, b.shiftWrite, b.shift = true, false, 0
	b.ac, b.cgMode, b.pending, b.readPhase, b.fsResets = 0, false, false, 0, 0
	for i := range b.ddram {
		b.ddram[i] = ' '
	}
	b.powerOn = b.now()
	b.busyUntil = time.Time{}
}

// PowerCycle puts the PCF8574 and the controller back in their power-on
// state, as a brown-out would: 8-bit mode, display off, DDRAM blank.
func (b *Bus) PowerCycle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.powerCycle()
}

// InjectErrors makes the next n transactions fail with ErrInjected after
// applying their first applied bytes (0: none), as a glitch on the wire would.
func (b *Bus) InjectErrors(n, applied int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failN, b.failPart = n, max(applied, 0)
}

// Poke overwrites the character code shown at row, col behind the driver's
// back, as electrical noise might.
func (b *Bus) Poke(row, col int, code byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if row < 0 || row >= b.rows || col < 0 || col >= b.cols {
		return
	}
	if a, ok := b.addrOf(row, col); ok {
		b.ddram[a] = code
	}
}

// Glitch clocks one stray EN pulse with the current port lines, as a spike on
// EN would: in 4-bit mode the controller's nibbles go out of sync.
func (b *Bus) Glitch() {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.now()
	if b.busFree.After(t) {
		t = b.busFree
	}
	b.nibble(b.port&b.pin.rs != 0, b.pin.nibble(b.port), t)
}

// Text returns what the glass shows, one string per row of Cols runes. Custom
// characters show as ⓪-⑦ (CGRAM slot 0-7); a display turned off shows spaces.
func (b *Bus) Text() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, b.rows)
	for r := range out {
		var sb strings.Builder
		for c := 0; c < b.cols; c++ {
			sb.WriteRune(b.runeAt(r, c))
		}
		out[r] = sb.String()
	}
	return out
}

var slotMarkers = []rune("⓪①②③④⑤⑥⑦")

func (b *Bus) runeAt(row, col int) rune {
	a, ok := b.addrOf(row, col)
	if !ok || !b.displayOn {
		return ' '
	}
	code := b.ddram[a]
	if code < 0x10 {
		return slotMarkers[code&7]
	}
	return b.rom.Rune(code)
}

// Codes returns the character codes at every cell, whether the display is on
// or not; cells not driven in 1-line mode read 0x20.
func (b *Bus) Codes() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([][]byte, b.rows)
	for r := range out {
		out[r] = make([]byte, b.cols)
		for c := range out[r] {
			out[r][c] = ' '
			if a, ok := b.addrOf(r, c); ok {
				out[r][c] = b.ddram[a]
			}
		}
	}
	return out
}

// CGRAM returns the pattern of custom character slot (0-7).
func (b *Bus) CGRAM(slot int) display.Glyph {
	b.mu.Lock()
	defer b.mu.Unlock()
	var g display.Glyph
	copy(g[:], b.cgram[(slot&7)*8:])
	for i := range g {
		g[i] &= 0x1F
	}
	return g
}

// Render draws the glass in a box, with the backlight and display state.
func (b *Bus) Render() string {
	rows := b.Text()
	st := b.State()
	var sb strings.Builder
	line := strings.Repeat("─", b.cols)
	sb.WriteString("┌" + line + "┐\n")
	for _, r := range rows {
		sb.WriteString("│" + r + "│\n")
	}
	sb.WriteString("└" + line + "┘\n")
	onOff := map[bool]string{true: "on", false: "off"}
	fmt.Fprintf(&sb, "backlight %s, display %s", onOff[st.Backlight], onOff[st.DisplayOn])
	if st.CursorOn || st.BlinkOn {
		fmt.Fprintf(&sb, ", cursor at %#02x", st.AC)
	}
	return sb.String()
}

// State returns a snapshot of the controller registers.
func (b *Bus) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return State{
		Ready: !b.dl8 && b.initialised, FourBit: !b.dl8, TwoLines: b.twoLines,
		DisplayOn: b.displayOn, CursorOn: b.cursorOn, BlinkOn: b.blinkOn,
		Backlight: b.port&b.pin.bl != 0, Increment: b.inc, ShiftOnWrite: b.shiftWrite,
		AC: b.ac, CGRAM: b.cgMode, Shift: b.shift, PendingNibble: b.pending, Port: b.port,
	}
}

// Warnings returns the warnings so far, oldest first.
func (b *Bus) Warnings() []Warning {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := append([]Warning(nil), b.warnings...)
	if b.dropped > 0 {
		out = append(out, Warning{Tx: b.txn, Msg: fmt.Sprintf("%d more warnings dropped", b.dropped)})
	}
	return out
}

// ResetWarnings forgets the warnings so far.
func (b *Bus) ResetWarnings() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.warnings, b.dropped = nil, 0
}

// Stats returns the traffic counters.
func (b *Bus) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// ResetStats zeroes the traffic counters.
func (b *Bus) ResetStats() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats = Stats{}
}

// SetTrace sends one line per transaction to w from now on (nil: stop):
// "<UTC time> addr=0x27 w=<hex> r=<hex> ok|err=<message>".
func (b *Bus) SetTrace(w io.Writer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trace = w
}

// Clock is a fake clock for tests: a driver sleeps on it (Sleep advances it)
// and the emulator reads it and advances it by the wire time of each
// transaction (Opts.Clock), so the timing model sees the driver's waits
// without anyone sleeping for real. The zero value starts at the Unix
// epoch. It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = time.Unix(0, 0)
	}
	return c.t
}

func (c *Clock) advanceTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.t) {
		c.t = t
	}
}

// Sleep advances the fake time by d.
func (c *Clock) Sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = time.Unix(0, 0)
	}
	if d > 0 {
		c.t = c.t.Add(d)
	}
}
