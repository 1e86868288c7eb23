package hd44780_test

import (
	"strings"
	"testing"
	"time"

	"periph.io/x/conn/v3/gpio"
	phd "periph.io/x/devices/v3/hd44780"
	"periph.io/x/devices/v3/pcf857x"

	"termlink/display"
	"termlink/display/hd44780"
	"termlink/testrig/lcdemu"
)

// Frame updates on a 20x4 display, measured on the emulator: transactions
// and bytes per frame, and the time those take on a 100 kHz bus (9 bit times
// per byte, the address byte included).

func reportBus(b *testing.B, st lcdemu.Stats, frames int) {
	b.ReportMetric(float64(st.Tx)/float64(frames), "tx/frame")
	b.ReportMetric(float64(st.WriteBytes)/float64(frames), "bytes/frame")
	wire := float64(st.Tx+st.WriteBytes) * 90e-3 // ms at 100 kHz
	b.ReportMetric(wire/float64(frames), "ms@100kHz/frame")
}

func fullFrames() [2]*display.Frame {
	var fs [2]*display.Frame
	for i := range fs {
		fs[i] = display.NewFrame(4, 20)
		for r := range 4 {
			fs[i].SetLine(r, strings.Repeat(string(rune('A'+i*4+r)), 20))
		}
	}
	return fs
}

func BenchmarkDraw20x4OneCell(b *testing.B) {
	r := newRig(b, 4, 20, &hd44780.Opts{Refresh: -1})
	f := fullFrames()[0]
	if err := r.dev.Draw(ctx, f); err != nil {
		b.Fatal(err)
	}
	r.bus.ResetStats()
	n := 0
	for b.Loop() {
		f.Set(2, 7, rune('a'+n%2))
		if err := r.dev.Draw(ctx, f); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportBus(b, r.bus.Stats(), n)
}

func BenchmarkDraw20x4FullScreen(b *testing.B) {
	r := newRig(b, 4, 20, &hd44780.Opts{Refresh: -1})
	fs := fullFrames()
	r.bus.ResetStats()
	n := 0
	for b.Loop() {
		if err := r.dev.Draw(ctx, fs[n%2]); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportBus(b, r.bus.Stats(), n)
}

// periph.io/x/devices/v3/hd44780 drives GPIO pins, so it is pointed at the
// emulator through periph's own PCF8574 driver (pcf857x), as it would be on a
// backpack: every pin change is one I²C transaction of one byte.
func newPeriph(tb testing.TB, timing bool) (*lcdemu.Bus, *phd.Dev) {
	tb.Helper()
	// A 5 V module: 15 ms after power-on is enough, which periph waits.
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: 4, Cols: 20, Timing: timing, PowerOnDelay: 15 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	exp, err := pcf857x.New(bus, 0x27, pcf857x.PCF8574)
	if err != nil {
		tb.Fatal(err)
	}
	if err := exp.Pins[3].Out(gpio.High); err != nil { // backlight: unknown to periph's driver
		tb.Fatal(err)
	}
	data := []gpio.PinOut{exp.Pins[4], exp.Pins[5], exp.Pins[6], exp.Pins[7]}
	dev, err := phd.New(data, exp.Pins[0], exp.Pins[2])
	if err != nil {
		tb.Fatal(err)
	}
	return bus, dev
}

// periphFull writes a whole 20x4 frame with periph's driver. Its SetCursor
// computes line*0x40+column in a byte, so rows 2 and 3 (0x14, 0x54) cannot be
// addressed; they are reached by writing rows 0+2 and 1+3 as 40 characters
// each, which the controller's address counter runs through.
func periphFull(dev *phd.Dev, f *display.Frame) error {
	for line, rows := range [][2]int{{0, 2}, {1, 3}} {
		if err := dev.SetCursor(uint8(line), 0); err != nil {
			return err
		}
		if err := dev.Print(f.Line(rows[0]) + f.Line(rows[1])); err != nil {
			return err
		}
	}
	return nil
}

func TestPeriphDriverOnEmulator(t *testing.T) {
	bus, dev := newPeriph(t, true)
	f := fullFrames()[1]
	if err := periphFull(dev, f); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(bus.Text(), "|"); got != strings.Join(f.Lines(), "|") {
		t.Errorf("glass %q", got)
	}
	// What the emulator says about it, for the record (not a failure of
	// ours): mostly the 50 µs periph waits after the first 0x3 of the
	// initialisation, where the datasheet asks for 4.1 ms.
	kinds := map[lcdemu.Kind]int{}
	for _, w := range bus.Warnings() {
		kinds[w.Kind]++
	}
	for i, w := range bus.Warnings() {
		if i < 40 && testing.Verbose() {
			t.Log(w)
		}
	}
	t.Logf("periph hd44780 on the emulator: %d transactions, %d bytes, warnings by kind: %v",
		bus.Stats().Tx, bus.Stats().WriteBytes, kinds)
}

func BenchmarkPeriphHD44780FullScreen(b *testing.B) {
	bus, dev := newPeriph(b, false)
	fs := fullFrames()
	bus.ResetStats()
	n := 0
	for b.Loop() {
		if err := periphFull(dev, fs[n%2]); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportBus(b, bus.Stats(), n)
}

func BenchmarkDraw20x4OneLine(b *testing.B) {
	r := newRig(b, 4, 20, &hd44780.Opts{Refresh: -1})
	f := fullFrames()[0]
	if err := r.dev.Draw(ctx, f); err != nil {
		b.Fatal(err)
	}
	r.bus.ResetStats()
	n := 0
	for b.Loop() {
		f.SetLine(1, strings.Repeat(string(rune('a'+n%2)), 20))
		if err := r.dev.Draw(ctx, f); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportBus(b, r.bus.Stats(), n)
}

// The same one-cell and one-line changes with periph's driver: it has no
// frame, so the caller moves the cursor and prints what changed.
func BenchmarkPeriphHD44780OneCell(b *testing.B) {
	bus, dev := newPeriph(b, false)
	bus.ResetStats()
	n := 0
	for b.Loop() {
		if err := dev.SetCursor(1, 7); err != nil {
			b.Fatal(err)
		}
		if err := dev.Print(string(rune('a' + n%2))); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportBus(b, bus.Stats(), n)
}

func BenchmarkPeriphHD44780OneLine(b *testing.B) {
	bus, dev := newPeriph(b, false)
	bus.ResetStats()
	n := 0
	for b.Loop() {
		if err := dev.SetCursor(1, 0); err != nil {
			b.Fatal(err)
		}
		if err := dev.Print(strings.Repeat(string(rune('a'+n%2)), 20)); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportBus(b, bus.Stats(), n)
}
