package console_test

import (
	"bytes"
	"io/fs"
	"testing"

	"termlink/display"
	"termlink/server/console"
)

// The embedded glyphs.js is what GlyphsJS makes now: run
// `go generate ./server/console` after changing a glyph or a ROM table.
func TestGlyphsJSUpToDate(t *testing.T) {
	got, err := fs.ReadFile(console.Files(), "glyphs.js")
	if err != nil {
		t.Fatal(err)
	}
	if want := console.GlyphsJS(); !bytes.Equal(got, want) {
		t.Fatalf("static/glyphs.js (%d bytes) differs from console.GlyphsJS (%d bytes): run go generate ./server/console", len(got), len(want))
	}
}

// Every pattern is 5 dots wide with a blank cursor row (but █), printable
// ASCII is drawn on both ROMs, and the codes where the ROMs differ have
// their own pattern.
func TestGlyphs(t *testing.T) {
	for _, rom := range []display.ROM{display.A00, display.A02} {
		g := console.Glyphs(rom)
		for c := byte(0x20); c < 0x80; c++ {
			p, ok := g[c]
			if !ok {
				t.Errorf("%s: no pattern for %#02x %q", rom, c, rom.Rune(c))
				continue
			}
			if p[7] != 0 && c != 0xFF {
				t.Errorf("%s %#02x: the cursor row is not blank", rom, c)
			}
			if (c == ' ') != (p == display.Glyph{}) {
				t.Errorf("%s %#02x %q: pattern %x", rom, c, rom.Rune(c), p)
			}
		}
	}
	a00, a02 := console.Glyphs(display.A00), console.Glyphs(display.A02)
	for _, c := range []byte{0x5C, 0x7E, 0x7F} {
		if a00[c] == a02[c] {
			t.Errorf("%#02x (%q on A00, %q on A02) is drawn the same on both ROMs", c, display.A00.Rune(c), display.A02.Rune(c))
		}
	}
	seen := map[display.Glyph]byte{}
	for c := byte(0x21); c < 0x7E; c++ {
		if o, dup := seen[a02[c]]; dup {
			t.Errorf("A02 %q and %q have the same pattern", display.A02.Rune(o), display.A02.Rune(c))
		}
		seen[a02[c]] = c
	}
}
