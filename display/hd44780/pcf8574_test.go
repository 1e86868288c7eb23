package hd44780_test

import (
	"testing"

	"termlink/display"
	"termlink/display/hd44780"
	"termlink/testrig/lcdemu"
)

func TestCustomPinMap(t *testing.T) {
	pins := hd44780.PinMap{RS: 4, RW: 5, EN: 6, BL: 7, D4: 0, D5: 1, D6: 2, D7: 3}
	clk := &lcdemu.Clock{}
	bus, err := lcdemu.New(&lcdemu.Opts{Pins: lcdemu.PinMap{RS: 4, RW: 5, EN: 6, BL: 7, D4: 0, D5: 1, D6: 2, D7: 3}, Timing: true, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := hd44780.New(bus, 0x27, &hd44780.Opts{Pins: pins, Sleep: clk.Sleep, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	f := display.NewFrame(2, 16)
	f.SetLine(1, "rewired")
	if err := dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if got := bus.Text()[1]; got != "rewired         " {
		t.Errorf("row 1 = %q", got)
	}
	for _, w := range bus.Warnings() {
		t.Error(w)
	}
}

// DefaultPinMap hands out a copy: changing it does not rewire the next New.
func TestDefaultPinMapIsACopy(t *testing.T) {
	m := hd44780.DefaultPinMap()
	m.RS, m.EN = m.EN, m.RS
	if got := hd44780.DefaultPinMap(); got == m || got.RS != 0 || got.EN != 2 {
		t.Fatalf("DefaultPinMap() = %+v after changing a copy", got)
	}
	r := newRig(t, 2, 16, nil) // the emulator wired as the common backpack
	r.glassIs(r.draw("common wiring"))
	r.noWarnings()
}
