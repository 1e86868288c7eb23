package checks

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"termlink/display"
	"termlink/testrig/lcdemu"
)

// glassChecker compares the emulator's glass with each LCD pattern.
type glassChecker struct {
	t          *testing.T
	bus        *lcdemu.Bus
	rows, cols int
	rom        display.ROM
	seen       map[string]int
	romScreen  map[bool]int
}

func (g *glassChecker) cellGlyph(code byte) (display.Glyph, bool) {
	if code >= 8 {
		return display.Glyph{}, false
	}
	return g.bus.CGRAM(int(code)), true
}

// check runs in OnPattern: the glass must show the pattern just drawn.
func (g *glassChecker) check(name string) {
	t := g.t
	t.Helper()
	g.seen[name]++
	codes := g.bus.Codes()
	text := g.bus.Text()
	n := g.rows * g.cols
	at := func(i int) byte { return codes[i/g.cols][i%g.cols] }
	switch name {
	case PatternFill:
		for i := range n {
			if gl, ok := g.cellGlyph(at(i)); !ok || gl != FullGlyph {
				t.Fatalf("fill: cell %d shows code %#02x (%v), want the full block glyph\n%s", i, at(i), gl, strings.Join(text, "\n"))
			}
		}
	case PatternROMLow, PatternROMHigh:
		upper := name == PatternROMHigh
		page := ROMPage(g.rom, upper)
		start := g.romScreen[upper] * n
		g.romScreen[upper]++
		for i := range n {
			want := byte(' ')
			if start+i < len(page) {
				// The driver maps runes back to codes; a rune the ROM
				// table cannot map back shows as the placeholder.
				c, ok := g.rom.Code(g.rom.Rune(page[start+i]))
				want = c
				if !ok {
					want = '?'
				}
			}
			if at(i) != want {
				t.Fatalf("%s screen %d: cell %d shows %#02x, want %#02x\n%s", name, g.romScreen[upper], i, at(i), want, strings.Join(text, "\n"))
			}
		}
	case PatternCustom:
		for i := range n {
			if gl, ok := g.cellGlyph(at(i)); !ok || gl != BarGlyph(i%8) {
				t.Fatalf("custom: cell %d shows code %#02x (%v), want bar %d\n%s", i, at(i), gl, i%8, strings.Join(text, "\n"))
			}
		}
	case PatternCursor:
		st := g.bus.State()
		last := []rune(text[g.rows-1])[g.cols-1]
		wantAC := byte((g.rows-1)/2*g.cols + g.cols - 1)
		if (g.rows-1)%2 == 1 {
			wantAC += 0x40
		}
		if !st.BlinkOn || last != '>' || st.AC != wantAC {
			t.Fatalf("cursor: blink %v, last cell %q, AC %#02x (want blink, '>', %#02x)\n%s", st.BlinkOn, last, st.AC, wantAC, strings.Join(text, "\n"))
		}
	case PatternFPS:
		for _, row := range text {
			for _, c := range row {
				if c < 'A' || c > 'Z' {
					t.Fatalf("fps: glass shows %q\n%s", c, strings.Join(text, "\n"))
				}
			}
		}
	default:
		t.Fatalf("unknown pattern %q", name)
	}
}

func TestLCDTestOnEmulator(t *testing.T) {
	for _, tt := range []struct {
		rows, cols int
		rom        display.ROM
		inject     string // pattern after which errors are injected
		errs       int    // transactions that fail
		applied    int    // bytes of each failed transaction that reach the port
	}{
		{2, 16, display.A00, "", 0, 0},
		{4, 20, display.A02, "", 0, 0},
		{2, 16, display.A00, PatternFill, 1, 0},   // the driver's re-init recovers
		{4, 20, display.A00, PatternROMLow, 3, 0}, // the check's own retries recover
		{2, 16, display.A02, PatternCustom, 2, 3}, // half-sent transactions: garbage reaches the controller
	} {
		name := fmt.Sprintf("%dx%d-%s-%s", tt.cols, tt.rows, tt.rom, tt.inject)
		t.Run(name, func(t *testing.T) {
			bus, clk := newEmu(t, 0x27, tt.rows, tt.cols, tt.rom)
			g := &glassChecker{t: t, bus: bus, rows: tt.rows, cols: tt.cols, rom: tt.rom, seen: map[string]int{}, romScreen: map[bool]int{}}
			injected := false
			res := LCDTest(context.Background(), bus, 0x27, LCDOptions{
				Bus: "emu", Rows: tt.rows, Cols: tt.cols, ROM: tt.rom, Frames: 10,
				Sleep: clk.Sleep, Now: clk.Now,
				OnPattern: func(p string) {
					g.check(p)
					if p == tt.inject && !injected {
						injected = true
						bus.InjectErrors(tt.errs, tt.applied)
					}
				},
			})
			var out strings.Builder
			res.WriteText(&out)
			t.Logf("\n%s", out.String())
			if !res.Pass {
				t.Fatalf("failed: %s", res.Summary)
			}
			for _, p := range []string{PatternFill, PatternROMLow, PatternROMHigh, PatternCustom, PatternCursor, PatternFPS} {
				if g.seen[p] == 0 {
					t.Errorf("pattern %s never shown", p)
				}
			}
			if fps, _ := res.Metric("fps"); fps <= 0 {
				t.Errorf("fps %v", fps)
			}
			errs, _ := res.Metric("i2c_errors")
			reinits, _ := res.Metric("reinits")
			if int(errs) != tt.errs || (tt.errs > 0) != (reinits > 0) {
				t.Errorf("i2c_errors %v reinits %v, want %d errors", errs, reinits, tt.errs)
			}
			if tt.errs > 0 && !strings.Contains(res.Summary, "all recovered") {
				t.Errorf("summary %q does not say the errors were recovered", res.Summary)
			}
			if text := bus.Text(); !strings.HasPrefix(text[0], "lcd-test done") || !strings.Contains(text[1], " fps ") {
				t.Errorf("final glass:\n%s", strings.Join(text, "\n"))
			}
			if st := bus.State(); st.BlinkOn || st.CursorOn {
				t.Errorf("cursor left on: %+v", st)
			}
			// Without injected errors the driver must never do what a real
			// chip would mis-handle. After an error its re-initialisation
			// runs into the emulator's busy-time model (the power-on waits
			// of figure 24 applied to a resync), and half-sent transactions
			// feed the controller garbage: those warnings are the driver's
			// and the emulator's business, logged only.
			for _, w := range bus.Warnings() {
				if tt.errs == 0 {
					t.Errorf("emulator warning: %v", w)
				} else {
					t.Logf("emulator warning after injected errors: %v", w)
				}
			}
		})
	}
}

func TestLCDTestFailures(t *testing.T) {
	t.Run("does not recover", func(t *testing.T) {
		bus, clk := newEmu(t, 0x27, 2, 16, display.A00)
		res := LCDTest(context.Background(), bus, 0x27, LCDOptions{Sleep: clk.Sleep, Now: clk.Now,
			OnPattern: func(p string) {
				if p == PatternROMLow {
					bus.InjectErrors(1000, 0)
				}
			}})
		if res.Pass || !strings.Contains(res.Summary, "the LCD stopped answering after") {
			t.Fatalf("pass %v summary %q", res.Pass, res.Summary)
		}
		if errs, _ := res.Metric("i2c_errors"); errs < 6 {
			t.Errorf("i2c_errors %v", errs)
		}
	})
	emu3f, _ := newEmu(t, 0x3F, 2, 16, display.A00)
	tests := []struct {
		name string
		bus  interface {
			Tx(uint16, []byte, []byte) error
		}
		addr uint16
		want string
	}{
		{"wrong address", emu3f, 0x27, "no LCD answers at 0x27 on emu, but a backpack answers at 0x3f: wrong address (pass --addr 0x3f"},
		{"no device", deadBus{errNACK}, 0x27, "no device answers on emu at all (the LCD should be at 0x27): check VCC, GND, SDA and SCL"},
		{"broken bus", deadBus{errTimeout}, 0x27, "the LCD at 0x27 on emu does not answer: sysfs-i2c: connection timed out"},
		{"not a backpack address", emu3f, 0x50, "I2C address 0x50: an LCD backpack is at 0x20-0x27"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res Result
			switch b := tt.bus.(type) {
			case *lcdemu.Bus:
				res = LCDTest(context.Background(), b, tt.addr, LCDOptions{Bus: "emu"})
			case deadBus:
				res = LCDTest(context.Background(), b, tt.addr, LCDOptions{Bus: "emu"})
			}
			if res.Pass || !strings.Contains(res.Summary, tt.want) {
				t.Fatalf("pass %v summary %q; want failure with %q", res.Pass, res.Summary, tt.want)
			}
		})
	}
}
