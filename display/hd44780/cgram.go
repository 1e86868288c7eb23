// The CGRAM cache: up to eight custom glyphs, loaded once, the least
// recently used slot reloaded when a frame needs a glyph that is not loaded;
// and the character code of each cell.

package hd44780

import (
	"slices"
	"unicode/utf8"

	"termlink/display"
)

type slot struct {
	r     rune
	g     display.Glyph
	valid bool
	dirty bool // CGRAM does not hold g yet
	used  uint64
}

// builtinGlyphs stand in for characters ROM A00 lacks.
var builtinGlyphs = map[rune]display.Glyph{
	'\\': {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00, 0x00},
	'~':  {0x00, 0x00, 0x00, 0x0D, 0x12, 0x00, 0x00, 0x00},
	'✓':  {0x00, 0x01, 0x03, 0x16, 0x1C, 0x08, 0x00, 0x00}, // an answer confirmed (device: questions)
}

// encode turns the frame into character codes, assigning CGRAM slots to the
// custom glyphs it needs (least recently used first).
func (d *Dev) encode() []byte {
	d.gen++
	cells := d.frame
	var miss []rune
	for r := 0; r < d.rows; r++ {
		for _, x := range cells.Row(r) {
			g, ok := d.glyphs[x]
			if !ok {
				continue
			}
			if s := d.slotOf(x); s >= 0 {
				if d.slots[s].g != g { // redefined since loaded
					d.slots[s].g, d.slots[s].dirty = g, true
				}
				d.slots[s].used = d.gen
			} else if !slices.Contains(miss, x) {
				miss = append(miss, x)
			}
		}
	}
	for _, x := range miss {
		if s := d.victim(); s >= 0 {
			d.slots[s] = slot{r: x, g: d.glyphs[x], valid: true, dirty: true, used: d.gen}
		}
	}
	i := 0
	for r := 0; r < d.rows; r++ {
		for _, x := range cells.Row(r) {
			d.codes[i] = d.code(x)
			i++
		}
	}
	return d.codes
}

func (d *Dev) slotOf(x rune) int {
	for i := range d.slots {
		if d.slots[i].valid && d.slots[i].r == x {
			return i
		}
	}
	return -1
}

// victim returns a free slot, or the least recently used one not needed by
// the current frame, or -1.
func (d *Dev) victim() int {
	best := -1
	for i := range d.slots {
		s := &d.slots[i]
		if !s.valid {
			return i
		}
		if s.used != d.gen && (best < 0 || s.used < d.slots[best].used) {
			best = i
		}
	}
	return best
}

// code returns the character code for x.
func (d *Dev) code(x rune) byte {
	if _, ok := d.glyphs[x]; ok {
		if s := d.slotOf(x); s >= 0 && d.slots[s].used == d.gen {
			return byte(s)
		}
		return placeholder // more than 8 glyphs in one frame
	}
	if c, ok := d.rom.Code(x); ok {
		return c
	}
	f := display.FoldRune(d.rom, x)
	if f == "" {
		return ' '
	}
	if r, n := utf8.DecodeRuneInString(f); n == len(f) {
		if c, ok := d.rom.Code(r); ok {
			return c
		}
	}
	return placeholder
}

// loadGlyphs writes the dirty CGRAM slots in one transaction.
func (d *Dev) loadGlyphs() error {
	ops := d.ops[:0]
	next, n := -1, 0
	for i := range d.slots {
		s := &d.slots[i]
		if !s.valid || !s.dirty {
			continue
		}
		if next != i*8 {
			ops = appendCmd(ops, cmdCGRAM|byte(i*8))
		}
		for _, row := range s.g {
			ops = appendData(ops, row&0x1F)
		}
		next = (i + 1) * 8
		n++
	}
	d.ops = ops
	if n == 0 {
		return nil
	}
	d.ac = -1 // the address counter now points into CGRAM
	if err := d.send(ops); err != nil {
		return err
	}
	for i := range d.slots {
		d.slots[i].dirty = false
	}
	d.stats.GlyphLoads += n
	return nil
}
