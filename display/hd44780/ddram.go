// DDRAM addressing and the write plan: which address ranges a frame's
// changed cells become (the cell diff itself is display.DiffCells).

package hd44780

import (
	"slices"

	"termlink/display"
)

// rowBase is the DDRAM address of the first cell of row: rows 0 and 1 start
// at 0x00 and 0x40, rows 2 and 3 continue them (0x00+cols, 0x40+cols).
func rowBase(row, cols int) byte {
	b := byte((row / 2) * cols)
	if row%2 == 1 {
		b += 0x40
	}
	return b
}

// after returns the address counter after a write at DDRAM address a.
func (d *Dev) after(a int) int {
	a++
	if d.rows == 1 { // 1-line mode: 0x00-0x4F
		return a % 0x50
	}
	switch a {
	case 0x28:
		return 0x40
	case 0x68:
		return 0x00
	}
	return a
}

type segment struct {
	addr byte
	n    int
}

// segments returns the changed DDRAM ranges, in address order, joining ranges
// that are contiguous in DDRAM (row 0 runs on into row 2 on a 20x4 display)
// or separated by at most joinGap shown cells.
func (d *Dev) segments(prev, codes []byte) []segment {
	runs := display.DiffCells(prev, codes, d.cols, 0)
	if len(runs) == 0 {
		return nil
	}
	segs := make([]segment, 0, len(runs))
	for _, r := range runs {
		segs = append(segs, segment{addr: d.cellAddr[r.Row*d.cols+r.Col], n: r.Len})
	}
	slices.SortFunc(segs, func(a, b segment) int { return int(a.addr) - int(b.addr) })
	out := segs[:1]
	for _, s := range segs[1:] {
		last := &out[len(out)-1]
		end := int(last.addr) + last.n
		if d.joinable(end, int(s.addr)) {
			last.n = int(s.addr) + s.n - int(last.addr)
			continue
		}
		out = append(out, s)
	}
	return out
}

// joinable reports whether a write can run on from address end to start:
// same DDRAM line, at most joinGap cells between, all of them shown.
func (d *Dev) joinable(end, start int) bool {
	if start < end || start-end > joinGap || (end >= 0x40) != (start >= 0x40) {
		return false
	}
	for a := end; a < start; a++ {
		if d.addrCell[a] < 0 {
			return false
		}
	}
	return true
}
