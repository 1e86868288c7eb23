package display

import (
	"fmt"
	"strings"
	"sync"
)

// ROM is the character generator ROM of an HD44780U controller (mask code
// A00 or A02). It is a Charset: Shows reports the runes the ROM has.
//
// The tables follow Table 4 of the HD44780U datasheet (ADE-207-272); see the
// package documentation.
type ROM uint8

const (
	// A00 is the Japanese standard font, by far the most common: ASCII
	// without backslash and tilde, half-width katakana, a few Greek letters.
	A00 ROM = iota
	// A02 is the European standard font: full ASCII, Latin-1 letters,
	// Cyrillic capitals, Greek letters and symbols.
	A02
)

// Placeholder is shown for a rune that neither the charset nor a
// transliteration can show. Both ROMs have it (0x3F).
const Placeholder = '?'

// String returns "A00" or "A02".
func (rom ROM) String() string {
	switch rom {
	case A00:
		return "A00"
	case A02:
		return "A02"
	}
	return fmt.Sprintf("ROM(%d)", uint8(rom))
}

// ParseROM parses "A00" or "A02" (case-insensitive).
func ParseROM(s string) (ROM, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "A00":
		return A00, nil
	case "A02":
		return A02, nil
	}
	return 0, fmt.Errorf("display: unknown HD44780 ROM %q (want A00 or A02)", s)
}

// Shows reports whether the ROM has a character for r.
func (rom ROM) Shows(r rune) bool {
	_, ok := rom.Code(r)
	return ok
}

// Code returns the character code that shows r, if the ROM has one. It never
// returns a CGRAM code (0x00-0x0F).
func (rom ROM) Code(r rune) (byte, bool) {
	t := romTables()
	if int(rom) >= len(t) {
		return 0, false
	}
	b, ok := t[rom].enc[r]
	return b, ok
}

// Rune returns the rune that character code shows: ' ' for codes whose
// pattern is blank, and 0 for the CGRAM codes 0x00-0x0F, whose pattern the
// ROM does not know.
func (rom ROM) Rune(code byte) rune {
	t := romTables()
	if int(rom) >= len(t) {
		return 0
	}
	return t[rom].dec[code]
}

type romTable struct {
	dec [256]rune
	enc map[rune]byte
}

// romTables builds the decode and encode tables once, on first use.
var romTables = sync.OnceValue(func() []romTable {
	return []romTable{buildROM(a00Layout()), buildROM(a02Layout())}
})

type romLayout struct {
	dec        [256]rune
	aliases    map[rune]byte // extra runes shown by an existing code
	decodeOnly []byte        // codes whose rune must not be encoded to them
}

func buildROM(l romLayout) romTable {
	t := romTable{dec: l.dec, enc: make(map[rune]byte, 300)}
	skip := map[byte]bool{}
	for _, c := range l.decodeOnly {
		skip[c] = true
	}
	// The first code wins, so 'g' is 0x67 and not the descender g at 0xE7,
	// and ' ' is 0x20, not one of the blank codes.
	for c := 0x10; c < 256; c++ {
		r := l.dec[c]
		if r == 0 || skip[byte(c)] || (r == ' ' && c != 0x20) {
			continue
		}
		if _, dup := t.enc[r]; !dup {
			t.enc[r] = byte(c)
		}
	}
	for r, c := range l.aliases {
		t.enc[r] = c
	}
	return t
}

// setRow fills codes from start with the runes of s.
func setRow(dec *[256]rune, start int, s string) {
	i := start
	for _, r := range s {
		dec[i] = r
		i++
	}
}

func asciiBase(dec *[256]rune) {
	for c := 0x10; c < 256; c++ {
		dec[c] = ' '
	}
	for c := 0x20; c < 0x7F; c++ {
		dec[c] = rune(c)
	}
}

// a00Layout is ROM code A00 (Japanese standard font), datasheet Table 4.
func a00Layout() romLayout {
	var l romLayout
	asciiBase(&l.dec)
	l.dec[0x5C] = '¥'
	l.dec[0x7E] = '→'
	l.dec[0x7F] = '←'
	// 0xA1-0xDF: JIS X 0201 half-width katakana, U+FF61-U+FF9F.
	for c := 0xA1; c <= 0xDF; c++ {
		l.dec[c] = rune(0xFF61 + c - 0xA1)
	}
	// 0xE0-0xFF. 0xE7, 0xEA, 0xF0, 0xF1, 0xF9 are g j p q y with true
	// descenders, 0xE9 is a superscript "-1", 0xF8 an x with a bar.
	setRow(&l.dec, 0xE0, "αäβεμσρg√⁻jˣ¢£ñö")
	setRow(&l.dec, 0xF0, "pqθ∞ΩüΣπxy千万円÷ █")
	l.aliases = map[rune]byte{
		'°':      0xDF, // the handakuten is the usual degree sign
		'゜':      0xDF,
		'゛':      0xDE,
		'µ':      0xE4, // micro sign
		'Ω':      0xF4, // ohm sign
		'∑':      0xF6,
		'■':      0xFF,
		'\u00A0': 0x20,
	}
	l.decodeOnly = []byte{0xE9}
	return l
}

// a02Layout is ROM code A02 (European standard font), datasheet Table 4.
func a02Layout() romLayout {
	var l romLayout
	asciiBase(&l.dec)
	setRow(&l.dec, 0x10, "▶◀“”⏫⏬●↲↑↓→←≤≥▲▼")
	l.dec[0x7F] = '⌂'
	setRow(&l.dec, 0x80, "БДЖЗИЙЛПУЦЧШЩЪЫЭ")
	setRow(&l.dec, 0x90, "α♪ΓπΣσ♬τ🔔θΩδ∞♥ε∩")
	setRow(&l.dec, 0xA0, "‖¡¢£¤¥¦§ƒ©ª«ЮЯ®´")
	setRow(&l.dec, 0xB0, "°±²³₧μ¶·ω¹º»¼½¾¿")
	// 0xC0-0xFF follow ISO 8859-1, except 0xD8, which is a Phi.
	for c := 0xC0; c < 256; c++ {
		l.dec[c] = rune(c)
	}
	l.dec[0xD8] = 'Φ'
	l.aliases = map[rune]byte{
		'µ':      0xB5, // micro sign
		'Ω':      0x9A, // ohm sign
		'∑':      0x94,
		'Ø':      0xD8, // drawn like the Phi
		'↵':      0x17,
		'⏎':      0x17,
		'\u00A0': 0x20,
	}
	return l
}
