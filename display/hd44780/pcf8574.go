// PCF8574 transport: the LCD behind an 8-bit I²C port expander (the common
// "I2C backpack"), one port byte per EN edge.

package hd44780

import (
	"errors"
	"fmt"

	"periph.io/x/conn/v3/i2c"
)

// PinMap gives the PCF8574 port bit (0-7) wired to each LCD line.
type PinMap struct {
	RS, RW, EN, BL, D4, D5, D6, D7 uint8
	// BacklightActiveLow is set for backpacks whose backlight is on when BL
	// is low.
	BacklightActiveLow bool
}

// DefaultPinMap returns the wiring of the common PCF8574 backpacks (and the
// one used when Opts.Pins is the zero value): P0=RS, P1=RW, P2=EN,
// P3=backlight, P4-P7=D4-D7. Each call returns a fresh value: changing it
// changes nothing else.
func DefaultPinMap() PinMap { return defaultPinMap }

var defaultPinMap = PinMap{RS: 0, RW: 1, EN: 2, BL: 3, D4: 4, D5: 5, D6: 6, D7: 7}

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
		pins = defaultPinMap
	}
	p, err := newPCF(bus, addr, pins)
	if err != nil {
		return nil, err
	}
	return newDev(p, o)
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
