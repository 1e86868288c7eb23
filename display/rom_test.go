package display

import "testing"

func TestROMCodes(t *testing.T) {
	tests := []struct {
		rom  ROM
		r    rune
		code byte
		ok   bool
	}{
		// Shared ASCII.
		{A00, 'A', 0x41, true},
		{A02, 'A', 0x41, true},
		{A00, ' ', 0x20, true},
		{A00, 'g', 0x67, true}, // not the descender g at 0xE7
		{A00, 'x', 0x78, true},
		// A00: no backslash, no tilde; Yen and arrows instead.
		{A00, '\\', 0, false},
		{A00, '~', 0, false},
		{A00, '¥', 0x5C, true},
		{A00, '→', 0x7E, true},
		{A00, '←', 0x7F, true},
		// A00 katakana and symbols.
		{A00, 'ｱ', 0xB1, true},
		{A00, '｡', 0xA1, true},
		{A00, 'ﾝ', 0xDD, true},
		{A00, 'ﾟ', 0xDF, true},
		{A00, '°', 0xDF, true},
		{A00, 'α', 0xE0, true},
		{A00, 'ä', 0xE1, true},
		{A00, 'β', 0xE2, true},
		{A00, 'µ', 0xE4, true},
		{A00, '√', 0xE8, true},
		{A00, 'ñ', 0xEE, true},
		{A00, 'ö', 0xEF, true},
		{A00, 'Ω', 0xF4, true},
		{A00, 'ü', 0xF5, true},
		{A00, 'π', 0xF7, true},
		{A00, '円', 0xFC, true},
		{A00, '÷', 0xFD, true},
		{A00, '█', 0xFF, true},
		{A00, 'é', 0, false},
		{A00, 'Ä', 0, false},
		{A00, 'ß', 0, false},
		{A00, '⁻', 0, false}, // 0xE9 is "-1", not a bare superscript minus
		// A02.
		{A02, '\\', 0x5C, true},
		{A02, '~', 0x7E, true},
		{A02, '→', 0x1A, true},
		{A02, '←', 0x1B, true},
		{A02, '“', 0x12, true},
		{A02, '⌂', 0x7F, true},
		{A02, 'Ж', 0x82, true},
		{A02, 'Я', 0xAD, true},
		{A02, 'Σ', 0x94, true},
		{A02, '°', 0xB0, true},
		{A02, '£', 0xA3, true},
		{A02, '½', 0xBD, true},
		{A02, 'À', 0xC0, true},
		{A02, 'é', 0xE9, true},
		{A02, 'ß', 0xDF, true},
		{A02, 'Ø', 0xD8, true},
		{A02, 'ÿ', 0xFF, true},
		{A02, 'ｱ', 0, false},
		{A02, '円', 0, false},
		// Never a CGRAM code.
		{A00, 0, 0, false},
		{A02, 7, 0, false},
	}
	for _, tt := range tests {
		code, ok := tt.rom.Code(tt.r)
		if ok != tt.ok || code != tt.code {
			t.Errorf("%v.Code(%q) = %#02x, %v; want %#02x, %v", tt.rom, tt.r, code, ok, tt.code, tt.ok)
		}
		if tt.rom.Shows(tt.r) != tt.ok {
			t.Errorf("%v.Shows(%q) = %v", tt.rom, tt.r, !tt.ok)
		}
	}
}

func TestROMRoundTrip(t *testing.T) {
	for _, rom := range []ROM{A00, A02} {
		for c := 0; c < 256; c++ {
			r := rom.Rune(byte(c))
			if c < 0x10 {
				if r != 0 {
					t.Errorf("%v.Rune(%#02x) = %q, want 0 (CGRAM)", rom, c, r)
				}
				continue
			}
			if r == 0 {
				t.Errorf("%v.Rune(%#02x) = 0", rom, c)
				continue
			}
			code, ok := rom.Code(r)
			if !ok {
				if rom == A00 && c == 0xE9 {
					continue
				}
				t.Errorf("%v: rune %q of code %#02x has no code", rom, r, c)
				continue
			}
			if rom.Rune(code) != r {
				t.Errorf("%v: %q -> %#02x -> %q", rom, r, code, rom.Rune(code))
			}
		}
	}
}

func TestParseROM(t *testing.T) {
	for _, s := range []string{"A00", "a00", " A02 "} {
		if _, err := ParseROM(s); err != nil {
			t.Errorf("ParseROM(%q): %v", s, err)
		}
	}
	if _, err := ParseROM("A01"); err == nil {
		t.Error("ParseROM(A01) did not fail")
	}
	if A02.String() != "A02" || ROM(9).String() != "ROM(9)" {
		t.Error("ROM.String")
	}
	if ROM(9).Shows('A') || ROM(9).Rune('A') != 0 {
		t.Error("unknown ROM shows runes")
	}
}
