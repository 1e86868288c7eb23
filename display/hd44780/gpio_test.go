package hd44780_test

import (
	"errors"
	"strings"
	"testing"

	pdisplay "periph.io/x/conn/v3/display"

	"termlink/display"
	"termlink/display/hd44780"
	"termlink/testrig/fakepin"
	"termlink/testrig/lcdemu"
)

func TestGPIO(t *testing.T) {
	clk := &lcdemu.Clock{}
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: 4, Cols: 20, Timing: true, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	// The GPIO lines drive the emulated PCF8574's port: each Out writes the
	// port byte, so the emulator sees every edge the transport makes.
	port := fakepin.NewPort(func(v byte) error { return bus.Tx(0x27, []byte{v}, nil) })
	pin := port.Pin
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
