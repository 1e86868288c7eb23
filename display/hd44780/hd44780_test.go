package hd44780_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"periph.io/x/conn/v3/physic"

	pdisplay "periph.io/x/conn/v3/display"
	"periph.io/x/conn/v3/display/displaytest"
	"periph.io/x/conn/v3/gpio"

	"termlink/display"
	"termlink/display/hd44780"
	"termlink/testrig/lcdemu"
)

var ctx = context.Background()

// rig is the driver on the emulator, sharing a fake clock.
type rig struct {
	t   testing.TB
	clk *lcdemu.Clock
	bus *lcdemu.Bus
	dev *hd44780.Dev
}

func newRig(t testing.TB, rows, cols int, o *hd44780.Opts) *rig {
	t.Helper()
	clk := &lcdemu.Clock{}
	var rom display.ROM
	if o != nil {
		rom = o.ROM
	}
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: rows, Cols: cols, ROM: rom, Timing: true, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var opts hd44780.Opts
	if o != nil {
		opts = *o
	}
	opts.Rows, opts.Cols = rows, cols
	opts.Sleep, opts.Now = clk.Sleep, clk.Now
	opts.Logger = slog.New(slog.DiscardHandler)
	dev, err := hd44780.New(bus, 0x27, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, clk: clk, bus: bus, dev: dev}
}

func (r *rig) draw(lines ...string) *display.Frame {
	r.t.Helper()
	rows, cols := r.dev.Size()
	f := display.NewFrame(rows, cols)
	f.SetLines(lines)
	if err := r.dev.Draw(ctx, f); err != nil {
		r.t.Fatal(err)
	}
	return f
}

func (r *rig) glassIs(f *display.Frame) {
	r.t.Helper()
	if got, want := r.bus.Text(), f.Lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		r.t.Errorf("glass:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func (r *rig) noWarnings() {
	r.t.Helper()
	for _, w := range r.bus.Warnings() {
		r.t.Errorf("emulator warning: %v", w)
	}
}

func TestInitIsClean(t *testing.T) {
	for _, size := range [][2]int{{2, 16}, {4, 20}, {4, 16}, {2, 40}, {1, 16}, {2, 8}} {
		t.Run(fmt.Sprintf("%dx%d", size[1], size[0]), func(t *testing.T) {
			r := newRig(t, size[0], size[1], nil)
			st := r.bus.State()
			if !st.Ready || !st.FourBit || st.TwoLines != (size[0] > 1) || !st.DisplayOn || !st.Backlight ||
				!st.Increment || st.ShiftOnWrite || st.CursorOn || st.BlinkOn || st.PendingNibble {
				t.Errorf("state after init: %+v", st)
			}
			r.glassIs(display.NewFrame(size[0], size[1]))
			r.noWarnings()
			if s := r.dev.Stats(); s.Inits != 1 || s.Errors != 0 || s.Tx != r.bus.Stats().Tx || s.Bytes != r.bus.Stats().WriteBytes {
				t.Errorf("driver stats %+v, emulator %+v", s, r.bus.Stats())
			}
		})
	}
}

func TestTextAtRowsAndCols(t *testing.T) {
	tests := []struct {
		rows, cols int
		lines      []string
	}{
		{2, 16, []string{"Hello, world!", "  second line  x"}},
		{4, 20, []string{"row zero", "row one        right", "row two", "                   3"}},
		{4, 16, []string{"a", "b", "c", "d"}},
		{2, 40, []string{strings.Repeat("x", 40), "y"}},
		{1, 16, []string{"just one line"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%dx%d", tt.cols, tt.rows), func(t *testing.T) {
			r := newRig(t, tt.rows, tt.cols, nil)
			f := r.draw(tt.lines...)
			r.glassIs(f)
			// Single cells at the corners of every row.
			for row := range tt.rows {
				f.Set(row, 0, rune('0'+row))
				f.Set(row, tt.cols-1, rune('A'+row))
			}
			if err := r.dev.Draw(ctx, f); err != nil {
				t.Fatal(err)
			}
			r.glassIs(f)
			r.noWarnings()
		})
	}
}

func TestOnlyChangesAreSent(t *testing.T) {
	r := newRig(t, 4, 20, nil)
	f := r.draw("The quick brown fox", "jumps over", "the lazy dog", "0123456789")
	r.bus.ResetStats()

	// The same frame again: nothing to send.
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 0 {
		t.Fatalf("unchanged frame: %+v", s)
	}

	// One cell: one transaction, address + character = 8 bytes.
	f.Set(1, 5, '!')
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 1 || s.WriteBytes != 8 {
		t.Fatalf("one changed cell: %+v, want 1 Tx of 8 bytes", s)
	}
	// The next cell: the address counter is already there, 4 bytes.
	r.bus.ResetStats()
	f.Set(1, 6, '?')
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 1 || s.WriteBytes != 4 {
		t.Fatalf("next cell: %+v, want 1 Tx of 4 bytes", s)
	}
	// Two cells one apart on a row: joined into one run of 3.
	r.bus.ResetStats()
	f.Set(2, 0, 'T')
	f.Set(2, 2, 'E')
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 1 || s.WriteBytes != 4+3*4 {
		t.Fatalf("gap of one: %+v", s)
	}
	// Far apart: two runs.
	r.bus.ResetStats()
	f.Set(3, 0, 'x')
	f.Set(3, 10, 'y')
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 2 || s.WriteBytes != 2*8 {
		t.Fatalf("two runs: %+v", s)
	}
	// Every cell: rows 0 and 2, then 1 and 3, run on in DDRAM: 2 runs.
	r.bus.ResetStats()
	f.Fill('#')
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 2 || s.WriteBytes > 2*4+80*4 {
		t.Fatalf("full screen: %+v", s)
	}
	r.glassIs(f)
	r.noWarnings()
}

func pua(i int) rune { return rune(0xE000 + i) }

func glyph(i int) display.Glyph {
	return display.Glyph{byte(i), 0x1F, byte(i), 0x1F, byte(i), 0x1F, byte(i), 0x1F}
}

func TestCustomGlyphReuseAndLRU(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	for i := range 10 {
		if err := r.dev.DefineGlyph(pua(i), glyph(i)); err != nil {
			t.Fatal(err)
		}
	}
	if !r.dev.Shows(pua(3)) || r.dev.Shows(pua(11)) {
		t.Fatal("Shows does not follow DefineGlyph")
	}
	f := display.NewFrame(2, 16)
	f.SetLine(0, "bat ")
	f.Set(0, 4, pua(0))
	draw := func() {
		t.Helper()
		if err := r.dev.Draw(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	draw()
	if n := r.dev.Stats().GlyphLoads; n != 1 {
		t.Fatalf("loads = %d, want 1", n)
	}
	if got := r.bus.Text()[0]; got != "bat ⓪           " {
		t.Errorf("row 0 = %q", got)
	}
	if g := r.bus.CGRAM(0); g != glyph(0) {
		t.Errorf("CGRAM(0) = %x", g)
	}
	// Same glyph elsewhere, text changed: no reload.
	f.SetLine(1, "x")
	f.Set(1, 2, pua(0))
	draw()
	if n := r.dev.Stats().GlyphLoads; n != 1 {
		t.Fatalf("glyph reloaded: loads = %d", n)
	}
	// Eight glyphs fill CGRAM.
	for i := range 8 {
		f.Set(1, 4+i, pua(i))
	}
	draw()
	if n := r.dev.Stats().GlyphLoads; n != 8 {
		t.Fatalf("loads = %d, want 8", n)
	}
	// A ninth glyph evicts the least recently used one not on the frame.
	f.Set(0, 4, ' ')
	f.Set(1, 2, ' ')
	f.Set(1, 4, pua(8)) // pua(0) leaves the frame
	draw()
	if n := r.dev.Stats().GlyphLoads; n != 9 {
		t.Fatalf("loads = %d, want 9", n)
	}
	if got := []rune(r.bus.Text()[1])[4]; got != '⓪' {
		t.Errorf("ninth glyph shows as %q, want it in slot 0", got)
	}
	if g := r.bus.CGRAM(0); g != glyph(8) {
		t.Errorf("CGRAM(0) = %x, want glyph 8", g)
	}
	// Nine different glyphs on one frame: one shows the placeholder.
	f.Set(0, 15, pua(9))
	draw()
	if got := r.bus.Text()[0][len(r.bus.Text()[0])-1]; got != '?' {
		t.Errorf("ninth glyph in one frame shows %q, want ?", got)
	}
	// Redefining a loaded glyph reloads it in place.
	if err := r.dev.DefineGlyph(pua(8), glyph(0x0A)); err != nil {
		t.Fatal(err)
	}
	draw()
	if g := r.bus.CGRAM(0); g != glyph(0x0A) {
		t.Errorf("redefined glyph: CGRAM(0) = %x", g)
	}
	r.noWarnings()
	if err := r.dev.DefineGlyph(0x07, glyph(1)); err == nil {
		t.Error("DefineGlyph of a control character did not fail")
	}
}

func TestBuiltinBackslashTildeOnA00(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	if !r.dev.Shows('\\') || !r.dev.Shows('~') {
		t.Fatal("A00 driver does not show backslash and tilde")
	}
	text := display.Fold(r.dev, `C:\temp ~5 °C`)
	if text != `C:\temp ~5 °C` {
		t.Fatalf("Fold = %q", text)
	}
	r.draw(text)
	if got := r.bus.Text()[0]; got != "C:⓪temp ①5 ﾟC   " {
		t.Errorf("row = %q", got)
	}
	// A02 has both in ROM: no glyphs.
	r2 := newRig(t, 2, 16, &hd44780.Opts{ROM: display.A02})
	r2.draw(display.Fold(r2.dev, `C:\temp ~5 °C é`))
	if got := r2.bus.Text()[0]; got != `C:\temp ~5 °C é ` {
		t.Errorf("A02 row = %q", got)
	}
	if r2.dev.Stats().GlyphLoads != 0 {
		t.Error("A02 loaded glyphs")
	}
}

func TestUnfoldedRunesInFrame(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	f := display.NewFrame(2, 16)
	f.SetLine(0, "é ß 🙂 \x01 ¥")
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	// Cell by cell: é -> e, ß has no one-cell form, the emoji is the
	// placeholder, control characters are blank.
	if got := r.bus.Text()[0]; got != "e ? ?   ¥       " {
		t.Errorf("row = %q", got)
	}
}

func TestBacklight(t *testing.T) {
	r := newRig(t, 2, 16, &hd44780.Opts{BacklightOff: true})
	if r.bus.State().Backlight {
		t.Fatal("backlight on with BacklightOff")
	}
	f := r.draw("lit?")
	if err := r.dev.Backlight(255); err != nil {
		t.Fatal(err)
	}
	if !r.bus.State().Backlight || !strings.Contains(r.bus.Render(), "backlight on") {
		t.Error("backlight not on")
	}
	// Later writes keep it on.
	f.SetLine(1, "yes")
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if !r.bus.State().Backlight {
		t.Error("backlight dropped by a write")
	}
	if err := r.dev.Backlight(0); err != nil {
		t.Fatal(err)
	}
	if r.bus.State().Backlight || !strings.Contains(r.bus.Render(), "backlight off") {
		t.Error("backlight not off")
	}
	r.glassIs(f)
	r.noWarnings()
}

func TestRecoveryAfterI2CErrors(t *testing.T) {
	r := newRig(t, 4, 20, nil)
	r.draw("before", "the", "error", "!")

	// One transaction fails after half a nibble reached the port: the retry
	// re-initialises and redraws, Draw succeeds.
	r.bus.InjectErrors(1, 3)
	f := r.draw("after", "one", "glitch", "ok")
	r.glassIs(f)
	if n := r.dev.Stats().Inits; n != 2 {
		t.Errorf("inits = %d, want 2", n)
	}

	// The bus stays down: Draw fails, and the next frame after it comes back
	// is right.
	r.bus.InjectErrors(20, 5)
	f.SetLine(0, "while down")
	if err := r.dev.Draw(ctx, f); err == nil {
		t.Fatal("Draw on a dead bus did not fail")
	} else if !errors.Is(err, lcdemu.ErrInjected) {
		t.Errorf("error %v does not wrap the bus error", err)
	}
	r.bus.InjectErrors(0, 0)
	f.SetLine(3, "back up")
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	r.glassIs(f)
	if st := r.bus.State(); !st.Ready || st.PendingNibble || !st.DisplayOn {
		t.Errorf("state after recovery: %+v", st)
	}
	if s := r.dev.Stats(); s.Errors == 0 {
		t.Errorf("stats: %+v", s)
	}
}

func TestRefreshHealsGlass(t *testing.T) {
	corruptions := []struct {
		name string
		do   func(*lcdemu.Bus)
	}{
		{"poked cell", func(b *lcdemu.Bus) { b.Poke(1, 3, 'X') }},
		{"stray EN pulse", func(b *lcdemu.Bus) { b.Glitch() }},
		{"power cycle", func(b *lcdemu.Bus) { b.PowerCycle() }},
	}
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, 2, 16, &hd44780.Opts{Refresh: time.Minute})
			f := r.draw("steady text", "second row")
			c.do(r.bus)
			r.clk.Sleep(30 * time.Second)
			f.Set(0, 15, '*') // a small change before the refresh is due
			if err := r.dev.Draw(ctx, f); err != nil {
				t.Fatal(err)
			}
			r.clk.Sleep(31 * time.Second)
			if err := r.dev.Draw(ctx, f); err != nil {
				t.Fatal(err)
			}
			r.glassIs(f)
			if n := r.dev.Stats().Inits; n != 2 {
				t.Errorf("inits = %d, want 2", n)
			}
		})
	}
}

func TestResetHeals(t *testing.T) {
	r := newRig(t, 2, 16, &hd44780.Opts{Refresh: -1})
	f := r.draw("abc")
	r.bus.PowerCycle()
	r.clk.Sleep(time.Hour)
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if r.bus.State().DisplayOn {
		t.Fatal("refresh ran though disabled")
	}
	if err := r.dev.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	r.glassIs(f)
}

func TestRunRefreshesIdleDisplay(t *testing.T) {
	bus, err := lcdemu.New(&lcdemu.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := hd44780.New(bus, 0x27, &hd44780.Opts{Refresh: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f := display.NewFrame(2, 16)
	f.SetLine(0, "idle")
	if err := dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- dev.Run(runCtx) }()
	bus.PowerCycle()
	deadline := time.Now().Add(5 * time.Second)
	for bus.Text()[0] != "idle            " {
		if time.Now().After(deadline) {
			t.Fatalf("glass not healed: %q", bus.Text())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v", err)
	}
}

func TestDrawHonoursContext(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	f := display.NewFrame(2, 16)
	f.SetLine(0, "never")
	if err := r.dev.Draw(cctx, f); !errors.Is(err, context.Canceled) {
		t.Fatalf("Draw = %v", err)
	}
	// Nothing is lost: the next Draw shows the frame.
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	r.glassIs(f)
}

func TestPeriphTextDisplayChecks(t *testing.T) {
	for _, size := range [][2]int{{2, 16}, {4, 20}} {
		t.Run(fmt.Sprintf("%dx%d", size[1], size[0]), func(t *testing.T) {
			r := newRig(t, size[0], size[1], nil)
			for _, err := range displaytest.TestTextDisplay(r.dev, false) {
				t.Error(err)
			}
			if got := r.bus.Text()[0]; !strings.HasPrefix(got, "Set dev on") {
				t.Errorf("glass row 0 = %q", got)
			}
			r.noWarnings()
		})
	}
}

func TestTextDisplayCursorAndWrite(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	d := r.dev
	if err := d.Cursor(pdisplay.CursorUnderline, pdisplay.CursorBlink); err != nil {
		t.Fatal(err)
	}
	if st := r.bus.State(); !st.CursorOn || !st.BlinkOn {
		t.Errorf("cursor state %+v", st)
	}
	if err := d.MoveTo(1, 3); err != nil {
		t.Fatal(err)
	}
	if ac := r.bus.State().AC; ac != 0x43 {
		t.Errorf("cursor at %#02x, want 0x43", ac)
	}
	if err := d.MoveTo(2, 0); !errors.Is(err, pdisplay.ErrInvalidCommand) {
		t.Errorf("MoveTo(2, 0) = %v", err)
	}
	if _, err := d.WriteString("abc"); err != nil {
		t.Fatal(err)
	}
	if ac := r.bus.State().AC; ac != 0x46 {
		t.Errorf("cursor after write at %#02x, want 0x46", ac)
	}
	if err := d.Move(pdisplay.Backward); err != nil {
		t.Fatal(err)
	}
	if err := d.Move(pdisplay.Up); err != nil {
		t.Fatal(err)
	}
	if ac := r.bus.State().AC; ac != 0x05 {
		t.Errorf("cursor after moves at %#02x, want 0x05", ac)
	}
	if err := d.Cursor(pdisplay.CursorMode(9)); err == nil {
		t.Error("bad cursor mode accepted")
	}
	if err := d.Cursor(pdisplay.CursorOff); err != nil {
		t.Fatal(err)
	}
	// Write wraps rows; '\n' starts a row; with auto scroll the text moves up.
	if err := d.Clear(); err != nil {
		t.Fatal(err)
	}
	if err := d.AutoScroll(true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteString("0123456789abcdefXYZ\nlast"); err != nil {
		t.Fatal(err)
	}
	if got := r.bus.Text(); got[0] != "XYZ             " || got[1] != "last            " {
		t.Errorf("glass = %q", got)
	}
	if err := d.AutoScroll(false); err != nil {
		t.Fatal(err)
	}
	if err := d.Home(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteString("Grüße…"); err != nil {
		t.Fatal(err)
	}
	if got := r.bus.Text()[0]; got != "Grüsse...       " {
		t.Errorf("folded write = %q", got)
	}
	if err := d.Display(false); err != nil {
		t.Fatal(err)
	}
	if r.bus.State().DisplayOn || strings.TrimSpace(strings.Join(r.bus.Text(), "")) != "" {
		t.Error("display still on")
	}
	if err := d.Display(true); err != nil {
		t.Fatal(err)
	}
	if got := d.Frame().Line(0); got != "Grüsse...       " {
		t.Errorf("Frame = %q", got)
	}
	if err := d.Halt(); err != nil {
		t.Fatal(err)
	}
	if st := r.bus.State(); st.DisplayOn || st.Backlight {
		t.Errorf("after Halt: %+v", st)
	}
	if d.MinRow() != 0 || d.MinCol() != 0 || d.Rows() != 2 || d.Cols() != 16 || !strings.Contains(d.String(), "16x2") {
		t.Error("TextDisplay accessors")
	}
	r.noWarnings()
}

func TestLayoutPagesOnGlass(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	pages := display.Layout(r.dev, "Dès que possible — “vraiment” ! Merci beaucoup…", 2, 16)
	if len(pages) != 2 {
		t.Fatalf("pages = %q", pages)
	}
	f := display.NewFrame(2, 16)
	for _, p := range pages {
		f.SetLines(p)
		if err := r.dev.Draw(ctx, f); err != nil {
			t.Fatal(err)
		}
		r.glassIs(f)
	}
	if got := r.bus.Text(); got[0] != "Merci           " || got[1] != "beaucoup...     " {
		t.Errorf("last page = %q", got)
	}
}

func TestNewValidation(t *testing.T) {
	bus, err := lcdemu.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	quiet := func(o hd44780.Opts) *hd44780.Opts {
		o.Sleep = func(time.Duration) {}
		o.Logger = slog.New(slog.DiscardHandler)
		return &o
	}
	tests := []struct {
		name string
		addr uint16
		opts *hd44780.Opts
	}{
		{"address below", 0x1F, nil},
		{"address between", 0x30, nil},
		{"address above", 0x40, nil},
		{"no device there", 0x20, quiet(hd44780.Opts{})},
		{"3 rows", 0x27, quiet(hd44780.Opts{Rows: 3, Cols: 16})},
		{"41 columns", 0x27, quiet(hd44780.Opts{Rows: 2, Cols: 41})},
		{"40x4", 0x27, quiet(hd44780.Opts{Rows: 4, Cols: 40})},
		{"bad ROM", 0x27, quiet(hd44780.Opts{ROM: 7})},
		{"pin used twice", 0x27, quiet(hd44780.Opts{Pins: hd44780.PinMap{RS: 0, RW: 1, EN: 1, BL: 3, D4: 4, D5: 5, D6: 6, D7: 7}})},
		{"pin out of range", 0x27, quiet(hd44780.Opts{Pins: hd44780.PinMap{RS: 8, RW: 1, EN: 2, BL: 3, D4: 4, D5: 5, D6: 6, D7: 7}})},
	}
	for _, tt := range tests {
		if _, err := hd44780.New(bus, tt.addr, tt.opts); err == nil {
			t.Errorf("%s: New did not fail", tt.name)
		}
	}
	if _, err := hd44780.New(nil, 0x27, nil); err == nil {
		t.Error("nil bus accepted")
	}
	// PCF8574A addresses are valid.
	busA, err := lcdemu.New(&lcdemu.Opts{Addr: 0x3F})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hd44780.New(busA, 0x3F, quiet(hd44780.Opts{})); err != nil {
		t.Errorf("0x3F: %v", err)
	}
}

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

func TestBusTooFastIsCaught(t *testing.T) {
	// At 1 MHz two bytes take 18 µs, less than the 37 µs an instruction
	// needs: the emulator's timing model reports it.
	r := newRig(t, 2, 16, nil)
	if err := r.bus.SetSpeed(physic.MegaHertz); err != nil {
		t.Fatal(err)
	}
	r.bus.ResetWarnings()
	r.draw("fast")
	busy := 0
	for _, w := range r.bus.Warnings() {
		if w.Kind == lcdemu.Busy {
			busy++
		}
	}
	if busy == 0 {
		t.Error("no busy warnings at 1 MHz")
	}
}

func TestConcurrentUse(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := display.NewFrame(2, 16)
			for j := range 20 {
				f.SetLine(i%2, fmt.Sprintf("g%d %d", i, j))
				if err := r.dev.Draw(ctx, f); err != nil {
					t.Error(err)
					return
				}
				if _, err := r.dev.WriteString("."); err != nil {
					t.Error(err)
					return
				}
				_ = r.dev.Stats()
				_ = r.dev.Shows('x')
			}
		}()
	}
	wg.Wait()
	r.glassIs(r.dev.Frame())
	r.noWarnings()
}

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

func (p *emuPin) String() string   { return p.name }
func (p *emuPin) Halt() error      { return nil }
func (p *emuPin) Name() string     { return p.name }
func (p *emuPin) Number() int      { return int(p.bit) }
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

func TestCommandErrorReinitialises(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	f := r.draw("still here")
	// The display-off instruction is lost on the wire: the driver
	// re-initialises, which applies the display state and redraws.
	r.bus.InjectErrors(1, 1)
	if err := r.dev.Display(false); err != nil {
		t.Fatal(err)
	}
	if st := r.bus.State(); st.DisplayOn || !st.Ready || st.PendingNibble {
		t.Errorf("state: %+v", st)
	}
	if err := r.dev.Display(true); err != nil {
		t.Fatal(err)
	}
	r.glassIs(f)
	// A failed backlight switch is applied by the next re-initialisation.
	r.bus.InjectErrors(1, 0)
	if err := r.dev.Backlight(0); err == nil {
		t.Fatal("Backlight on a failing bus did not fail")
	}
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if r.bus.State().Backlight {
		t.Error("backlight on after re-initialisation")
	}
	r.glassIs(f)
}
