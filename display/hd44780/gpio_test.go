package hd44780_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	pdisplay "periph.io/x/conn/v3/display"
	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/physic"

	"termlink/display"
	"termlink/display/hd44780"
	"termlink/testrig/lcdemu"
)

// emuPins wires GPIO lines to the emulator: every Out writes the port byte.
type emuPins struct {
	mu  sync.Mutex
	bus *lcdemu.Bus
	v   byte
}

type emuPin struct {
	p    *emuPins
	bit  byte
	name string
}

func (p *emuPin) String() string { return p.name }

func (p *emuPin) Halt() error { return nil }

func (p *emuPin) Name() string { return p.name }

func (p *emuPin) Number() int { return int(p.bit) }

func (p *emuPin) Function() string { return "Out" }

func (p *emuPin) PWM(gpio.Duty, physic.Frequency) error {
	return errors.New("no PWM")
}

func (p *emuPin) Out(l gpio.Level) error {
	p.p.mu.Lock()
	defer p.p.mu.Unlock()
	if l {
		p.p.v |= 1 << p.bit
	} else {
		p.p.v &^= 1 << p.bit
	}
	return p.p.bus.Tx(0x27, []byte{p.p.v}, nil)
}

func TestGPIO(t *testing.T) {
	clk := &lcdemu.Clock{}
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: 4, Cols: 20, Timing: true, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ep := &emuPins{bus: bus}
	pin := func(bit byte, name string) *emuPin { return &emuPin{p: ep, bit: bit, name: name} }
	dev, err := hd44780.NewGPIO(pin(0, "RS"), pin(2, "EN"), pin(4, "D4"), pin(5, "D5"), pin(6, "D6"), pin(7, "D7"),
		&hd44780.Opts{Rows: 4, Cols: 20, Sleep: clk.Sleep, Now: clk.Now, Backlight: pin(3, "BL")})
	if err != nil {
		t.Fatal(err)
	}
	f := display.NewFrame(4, 20)
	f.SetLines([]string{"parallel", "4-bit", "GPIO", "wiring"})
	if err := dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(bus.Text(), "|"); got != strings.Join(f.Lines(), "|") {
		t.Errorf("glass %q", got)
	}
	if err := dev.Backlight(0); err != nil || bus.State().Backlight {
		t.Errorf("backlight: %v, %+v", err, bus.State())
	}
	for _, w := range bus.Warnings() {
		t.Error(w)
	}
	if !strings.Contains(dev.String(), "GPIO") {
		t.Errorf("String = %q", dev.String())
	}
	// Without a backlight pin, Backlight is not implemented.
	dev2, err := hd44780.NewGPIO(pin(0, "RS"), pin(2, "EN"), pin(4, "D4"), pin(5, "D5"), pin(6, "D6"), pin(7, "D7"),
		&hd44780.Opts{Rows: 4, Cols: 20, Sleep: clk.Sleep, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev2.Backlight(1); !errors.Is(err, pdisplay.ErrNotImplemented) {
		t.Errorf("Backlight without pin = %v", err)
	}
	if _, err := hd44780.NewGPIO(nil, pin(2, "EN"), pin(4, "D4"), pin(5, "D5"), pin(6, "D6"), pin(7, "D7"), nil); err == nil {
		t.Error("nil RS accepted")
	}
}
