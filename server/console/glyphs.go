package console

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"termlink/display"
)

//go:generate go run ./internal/genglyphs

// The LCD mirror draws each cell with the 5x8 dot pattern the HD44780's
// character ROM gives that character (datasheet ADE-207-272, Table 4), so
// the operator sees what the glass shows. static/glyphs.js is generated
// from the tables here and display.ROM (which character code shows which
// rune, the same tables the driver and the emulator testrig/lcdemu use):
// TestGlyphsJSUpToDate fails when it differs from GlyphsJS.
//
// The patterns cover the codes 0x20-0x7F of both ROMs and a few others
// (█, °); a character the tables have no pattern for (katakana, A02's
// accented letters) is drawn by the browser inside the cell.

// asciiFont is 0x20-0x7F as both ROMs draw them (the codes where they
// differ are in romFont): one line per code, the code, then 7 rows of 5
// dots ('#' lit); the eighth row (the cursor's) is blank.
const asciiFont = `
20 ..... ..... ..... ..... ..... ..... .....
21 ..#.. ..#.. ..#.. ..#.. ..... ..... ..#..
22 .#.#. .#.#. .#.#. ..... ..... ..... .....
23 .#.#. .#.#. ##### .#.#. ##### .#.#. .#.#.
24 ..#.. .#### #.#.. .###. ..#.# ####. ..#..
25 ##... ##..# ...#. ..#.. .#... #..## ...##
26 .##.. #..#. #.#.. .#... #.#.# #..#. .##.#
27 .##.. ..#.. .#... ..... ..... ..... .....
28 ...#. ..#.. .#... .#... .#... ..#.. ...#.
29 .#... ..#.. ...#. ...#. ...#. ..#.. .#...
2A ..... ..#.. #.#.# .###. #.#.# ..#.. .....
2B ..... ..#.. ..#.. ##### ..#.. ..#.. .....
2C ..... ..... ..... ..... .##.. ..#.. .#...
2D ..... ..... ..... ##### ..... ..... .....
2E ..... ..... ..... ..... ..... .##.. .##..
2F ..... ....# ...#. ..#.. .#... #.... .....
30 .###. #...# #..## #.#.# ##..# #...# .###.
31 ..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.
32 .###. #...# ....# ...#. ..#.. .#... #####
33 ##### ...#. ..#.. ...#. ....# #...# .###.
34 ...#. ..##. .#.#. #..#. ##### ...#. ...#.
35 ##### #.... ####. ....# ....# #...# .###.
36 ..##. .#... #.... ####. #...# #...# .###.
37 ##### ....# ...#. ..#.. .#... .#... .#...
38 .###. #...# #...# .###. #...# #...# .###.
39 .###. #...# #...# .#### ....# ...#. .##..
3A ..... .##.. .##.. ..... .##.. .##.. .....
3B ..... .##.. .##.. ..... .##.. ..#.. .#...
3C ...#. ..#.. .#... #.... .#... ..#.. ...#.
3D ..... ..... ##### ..... ##### ..... .....
3E .#... ..#.. ...#. ....# ...#. ..#.. .#...
3F .###. #...# ....# ...#. ..#.. ..... ..#..
40 .###. #...# ....# .##.# #.#.# #.#.# .###.
41 .###. #...# #...# #...# ##### #...# #...#
42 ####. #...# #...# ####. #...# #...# ####.
43 .###. #...# #.... #.... #.... #...# .###.
44 ###.. #..#. #...# #...# #...# #..#. ###..
45 ##### #.... #.... ####. #.... #.... #####
46 ##### #.... #.... ####. #.... #.... #....
47 .###. #...# #.... #.### #...# #...# .####
48 #...# #...# #...# ##### #...# #...# #...#
49 .###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.
4A ..### ...#. ...#. ...#. ...#. #..#. .##..
4B #...# #..#. #.#.. ##... #.#.. #..#. #...#
4C #.... #.... #.... #.... #.... #.... #####
4D #...# ##.## #.#.# #.#.# #...# #...# #...#
4E #...# #...# ##..# #.#.# #..## #...# #...#
4F .###. #...# #...# #...# #...# #...# .###.
50 ####. #...# #...# ####. #.... #.... #....
51 .###. #...# #...# #...# #.#.# #..#. .##.#
52 ####. #...# #...# ####. #.#.. #..#. #...#
53 .#### #.... #.... .###. ....# ....# ####.
54 ##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..
55 #...# #...# #...# #...# #...# #...# .###.
56 #...# #...# #...# #...# #...# .#.#. ..#..
57 #...# #...# #...# #.#.# #.#.# #.#.# .#.#.
58 #...# #...# .#.#. ..#.. .#.#. #...# #...#
59 #...# #...# #...# .#.#. ..#.. ..#.. ..#..
5A ##### ....# ...#. ..#.. .#... #.... #####
5B .###. .#... .#... .#... .#... .#... .###.
5D .###. ...#. ...#. ...#. ...#. ...#. .###.
5E ..#.. .#.#. #...# ..... ..... ..... .....
5F ..... ..... ..... ..... ..... ..... #####
60 .#... ..#.. ...#. ..... ..... ..... .....
61 ..... ..... .###. ....# .#### #...# .####
62 #.... #.... #.##. ##..# #...# #...# ####.
63 ..... ..... .###. #.... #.... #...# .###.
64 ....# ....# .##.# #..## #...# #...# .####
65 ..... ..... .###. #...# ##### #.... .###.
66 ..##. .#..# .#... ###.. .#... .#... .#...
67 ..... ..... .#### #...# .#### ....# .###.
68 #.... #.... #.##. ##..# #...# #...# #...#
69 ..#.. ..... .##.. ..#.. ..#.. ..#.. .###.
6A ...#. ..... ..##. ...#. ...#. #..#. .##..
6B #.... #.... #..#. #.#.. ##... #.#.. #..#.
6C .##.. ..#.. ..#.. ..#.. ..#.. ..#.. .###.
6D ..... ..... ##.#. #.#.# #.#.# #...# #...#
6E ..... ..... #.##. ##..# #...# #...# #...#
6F ..... ..... .###. #...# #...# #...# .###.
70 ..... ..... ####. #...# ####. #.... #....
71 ..... ..... .##.# #..## .#### ....# ....#
72 ..... ..... #.##. ##..# #.... #.... #....
73 ..... ..... .###. #.... .###. ....# ####.
74 .#... .#... ###.. .#... .#... .#..# ..##.
75 ..... ..... #...# #...# #...# #..## .##.#
76 ..... ..... #...# #...# #...# .#.#. ..#..
77 ..... ..... #...# #...# #.#.# #.#.# .#.#.
78 ..... ..... #...# .#.#. ..#.. .#.#. #...#
79 ..... ..... #...# #...# .#### ....# .###.
7A ..... ..... ##### ...#. ..#.. .#... #####
7B ...#. ..#.. ..#.. .#... ..#.. ..#.. ...#.
7C ..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#..
7D .#... ..#.. ..#.. ...#. ..#.. ..#.. .#...
`

// romFont is what each ROM draws beyond (or instead of) asciiFont.
var romFont = map[display.ROM]string{
	display.A00: `
5C #...# .#.#. ##### ..#.. ##### ..#.. ..#..
7E ..... ..#.. ...#. ##### ...#. ..#.. .....
7F ..... ..#.. .#... ##### .#... ..#.. .....
DF ###.. #.#.. ###.. ..... ..... ..... .....
FF ##### ##### ##### ##### ##### ##### ##### #####
`,
	display.A02: `
5C ..... #.... .#... ..#.. ...#. ....# .....
7E ..... ..... .#... #.#.# ...#. ..... .....
7F ..... ..#.. .#.#. #...# #...# #...# #####
B0 .##.. #..#. #..#. .##.. ..... ..... .....
`,
}

// Glyphs returns the 5x8 patterns rom draws, by character code.
func Glyphs(rom display.ROM) map[byte]display.Glyph {
	out := map[byte]display.Glyph{}
	parseFont(asciiFont, out)
	parseFont(romFont[rom], out)
	return out
}

func parseFont(text string, into map[byte]display.Glyph) {
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		var code byte
		if _, err := fmt.Sscanf(f[0], "%X", &code); err != nil || len(f) < 8 || len(f) > 9 {
			panic(fmt.Sprintf("console: bad glyph line %q", line)) // TestGlyphs covers every line
		}
		var g display.Glyph
		for i, row := range f[1:] {
			if len(row) != 5 {
				panic(fmt.Sprintf("console: glyph %s row %d is %q, want 5 dots", f[0], i, row))
			}
			for _, dot := range row {
				g[i] <<= 1
				if dot == '#' {
					g[i] |= 1
				}
			}
		}
		into[code] = g
	}
}

// GlyphsJS is static/glyphs.js: for each ROM, which code shows each rune
// (display.ROM) and the pattern of each code drawn here (8 rows of 5 bits,
// as two hex digits a row).
func GlyphsJS() []byte {
	var b bytes.Buffer
	b.WriteString("// Code generated by go generate ./server/console (glyphs.go); DO NOT EDIT.\n")
	b.WriteString("// The HD44780 character ROMs: code of each rune, 5x8 pattern of each code.\n")
	b.WriteString("'use strict';\nwindow.TERMLINK_GLYPHS = {\n")
	for _, rom := range []display.ROM{display.A00, display.A02} {
		fmt.Fprintf(&b, "  %s: {\n    codes: {", rom)
		type pair struct {
			r    rune
			code byte
		}
		var pairs []pair
		for r := rune(0); r < 0x20000; r++ { // every rune the ROM shows, aliases (° µ Ω) too
			if code, ok := rom.Code(r); ok {
				pairs = append(pairs, pair{r, code})
			}
		}
		for i, p := range pairs {
			if i%12 == 0 {
				b.WriteString("\n      ")
			} else {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%q: %d,", string(p.r), p.code)
		}
		b.WriteString("\n    },\n    glyphs: {")
		glyphs := Glyphs(rom)
		codes := make([]int, 0, len(glyphs))
		for c := range glyphs {
			codes = append(codes, int(c))
		}
		sort.Ints(codes)
		for i, c := range codes {
			if i%6 == 0 {
				b.WriteString("\n      ")
			} else {
				b.WriteString(" ")
			}
			g := glyphs[byte(c)]
			fmt.Fprintf(&b, "%d: '%x',", c, g[:])
		}
		b.WriteString("\n    },\n  },\n")
	}
	b.WriteString("};\n")
	return b.Bytes()
}
