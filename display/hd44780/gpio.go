// GPIO transport: the LCD wired in 4-bit mode straight to GPIO lines (RS,
// EN, D4-D7, R/W tied to ground), one Out per line and nibble.

package hd44780

import (
	"fmt"
	"time"

	"periph.io/x/conn/v3/gpio"
)

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
