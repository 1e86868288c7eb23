package hd44780_test

import (
	"testing"

	"termlink/display"
	"termlink/display/hd44780"
)

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

// The check mark that confirms an answer on the glass (device's
// questions) is a built-in glyph: shown, not folded to "v".
func TestBuiltinCheckMark(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	if !r.dev.Shows('✓') {
		t.Fatal("the driver does not show ✓")
	}
	text := display.Fold(r.dev, "✓ Allow once")
	if text != "✓ Allow once" {
		t.Fatalf("Fold = %q", text)
	}
	r.draw(text)
	if got := r.bus.Text()[0]; got != "⓪ Allow once    " {
		t.Errorf("row = %q", got)
	}
}
