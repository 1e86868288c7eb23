package display

import (
	"testing"
	"unicode/utf8"
)

// FuzzLayout checks that folding and wrapping never panic, never produce a
// line wider than cols, never produce a rune the ROM cannot show, and never
// lose a non-space rune to wrapping.
func FuzzLayout(f *testing.F) {
	f.Add("Hello, world", 16, 2, false)
	f.Add("Grüße — “quoted” …", 20, 4, true)
	f.Add("averyveryverylongwordindeed and more", 5, 2, false)
	f.Add("\n\n a \r\n\tb\u2028ｶﾞ🙂", 1, 1, true)
	f.Add("", 0, 0, false)
	f.Add("\xff\xfe", 3, -1, true)
	f.Fuzz(func(t *testing.T, text string, cols, rows int, a02 bool) {
		cols, rows = cols%64, rows%8
		rom := A00
		if a02 {
			rom = A02
		}
		folded := Fold(rom, text)
		for _, r := range folded {
			if r != '\n' && !rom.Shows(r) {
				t.Fatalf("Fold(%q) has %q, not in %v", text, r, rom)
			}
		}
		lines := Wrap(folded, cols)
		want := 0
		for _, r := range folded {
			if r != ' ' && r != '\n' {
				want++
			}
		}
		got := 0
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); n > cols {
				t.Fatalf("Wrap(%q, %d): line %q has %d runes", folded, cols, l, n)
			}
			for _, r := range l {
				if r == '\n' {
					t.Fatalf("line %q has a newline", l)
				}
				if r != ' ' {
					got++
				}
			}
		}
		if cols > 0 && got != want {
			t.Fatalf("Wrap(%q, %d) kept %d of %d non-space runes: %q", folded, cols, got, want, lines)
		}
		pages := Layout(rom, text, rows, cols)
		n := 0
		for _, p := range pages {
			if len(p) == 0 || len(p) > rows {
				t.Fatalf("page of %d lines for %d rows", len(p), rows)
			}
			n += len(p)
		}
		if rows > 0 && n != len(lines) {
			t.Fatalf("pages hold %d lines, want %d", n, len(lines))
		}
		fr := NewFrame(rows, cols)
		if len(pages) > 0 {
			fr.SetLines(pages[0])
		}
		for r := 0; r < fr.Rows(); r++ {
			if utf8.RuneCountInString(fr.Line(r)) != cols {
				t.Fatalf("frame row %d is %q", r, fr.Line(r))
			}
		}
	})
}
