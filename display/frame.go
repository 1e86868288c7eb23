package display

import (
	"context"
	"strings"
	"unicode/utf8"
)

// Charset reports which runes a screen can show in one cell as they are.
//
// ROM implements it; drivers implement it too when they add runes of their own
// (custom CGRAM glyphs).
type Charset interface {
	Shows(r rune) bool
}

// Screen is a display the device hands whole frames to.
//
// Draw shows f. Implementations keep what the glass shows and send only the
// cells that changed; they copy f, so the caller may reuse it. A frame of
// another size is drawn clipped to the screen and padded with spaces.
type Screen interface {
	Charset
	// Size returns the number of rows and columns of the screen.
	Size() (rows, cols int)
	// Draw makes the screen show f.
	Draw(ctx context.Context, f *Frame) error
}

// Glyph is a custom 5x8 character: one byte per pixel row, top row first, the
// low 5 bits of each byte are the pixels, bit 4 leftmost.
type Glyph [8]byte

// GlyphDefiner is implemented by screens that can show custom glyphs. A frame
// cell holding r then shows g; use runes of the Unicode private use area
// (U+E000-U+F8FF) for glyphs that have no Unicode character of their own.
type GlyphDefiner interface {
	DefineGlyph(r rune, g Glyph) error
}

// Frame is a rows x cols grid of cells, one rune per cell. The zero value is
// an empty 0x0 frame. A new frame is filled with spaces.
type Frame struct {
	rows, cols int
	cells      []rune
}

// NewFrame returns a frame of rows x cols spaces. Negative sizes count as 0.
func NewFrame(rows, cols int) *Frame {
	rows, cols = max(rows, 0), max(cols, 0)
	if rows == 0 || cols == 0 {
		rows, cols = 0, 0
	}
	f := &Frame{rows: rows, cols: cols, cells: make([]rune, rows*cols)}
	f.Clear()
	return f
}

// Rows returns the number of rows.
func (f *Frame) Rows() int { return f.rows }

// Cols returns the number of columns.
func (f *Frame) Cols() int { return f.cols }

// Size returns rows and columns.
func (f *Frame) Size() (rows, cols int) { return f.rows, f.cols }

func (f *Frame) in(row, col int) bool {
	return row >= 0 && row < f.rows && col >= 0 && col < f.cols
}

// At returns the rune at row, col, or 0 outside the frame.
func (f *Frame) At(row, col int) rune {
	if !f.in(row, col) {
		return 0
	}
	return f.cells[row*f.cols+col]
}

// Set sets the rune at row, col. It does nothing outside the frame.
func (f *Frame) Set(row, col int, r rune) {
	if f.in(row, col) {
		f.cells[row*f.cols+col] = r
	}
}

// Fill sets every cell to r.
func (f *Frame) Fill(r rune) {
	for i := range f.cells {
		f.cells[i] = r
	}
}

// Clear sets every cell to a space.
func (f *Frame) Clear() { f.Fill(' ') }

// WriteAt writes s from row, col onwards, one rune per cell, without
// wrapping; runes past the end of the row are dropped. It returns the number
// of cells written.
func (f *Frame) WriteAt(row, col int, s string) int {
	if row < 0 || row >= f.rows || col >= f.cols {
		return 0
	}
	n := 0
	for _, r := range s {
		if col >= f.cols {
			break
		}
		if col >= 0 {
			f.cells[row*f.cols+col] = r
			n++
		}
		col++
	}
	return n
}

// SetLine replaces row with s, truncated to the width and padded with spaces.
func (f *Frame) SetLine(row int, s string) {
	if row < 0 || row >= f.rows {
		return
	}
	n := f.WriteAt(row, 0, s)
	for c := n; c < f.cols; c++ {
		f.cells[row*f.cols+c] = ' '
	}
}

// SetLines replaces the whole frame with lines, one per row; missing rows are
// blank.
func (f *Frame) SetLines(lines []string) {
	for r := 0; r < f.rows; r++ {
		if r < len(lines) {
			f.SetLine(r, lines[r])
		} else {
			f.SetLine(r, "")
		}
	}
}

// Row returns the cells of row. The slice aliases the frame: writes to it
// change the frame. It is nil outside the frame.
func (f *Frame) Row(row int) []rune {
	if row < 0 || row >= f.rows {
		return nil
	}
	return f.cells[row*f.cols : (row+1)*f.cols : (row+1)*f.cols]
}

// Line returns row as a string, trailing spaces kept.
func (f *Frame) Line(row int) string { return string(f.Row(row)) }

// Lines returns every row as a string.
func (f *Frame) Lines() []string {
	out := make([]string, f.rows)
	for r := range out {
		out[r] = f.Line(r)
	}
	return out
}

// String returns the rows joined by newlines.
func (f *Frame) String() string { return strings.Join(f.Lines(), "\n") }

// Clone returns a copy of f.
func (f *Frame) Clone() *Frame {
	return &Frame{rows: f.rows, cols: f.cols, cells: append([]rune(nil), f.cells...)}
}

// CopyFrom copies src into f: the overlapping part cell for cell, spaces
// elsewhere.
func (f *Frame) CopyFrom(src *Frame) {
	if src != nil && src.rows == f.rows && src.cols == f.cols {
		copy(f.cells, src.cells)
		return
	}
	f.Clear()
	if src == nil {
		return
	}
	for r := 0; r < min(f.rows, src.rows); r++ {
		copy(f.Row(r), src.Row(r))
	}
}

// Equal reports whether f and g have the same size and cells.
func (f *Frame) Equal(g *Frame) bool {
	if f == nil || g == nil {
		return f == g
	}
	if f.rows != g.rows || f.cols != g.cols {
		return false
	}
	for i, r := range f.cells {
		if g.cells[i] != r {
			return false
		}
	}
	return true
}

// ScrollUp moves every row up by n rows and blanks the rows at the bottom.
func (f *Frame) ScrollUp(n int) {
	if n <= 0 {
		return
	}
	if n >= f.rows {
		f.Clear()
		return
	}
	copy(f.cells, f.cells[n*f.cols:])
	for i := (f.rows - n) * f.cols; i < len(f.cells); i++ {
		f.cells[i] = ' '
	}
}

// Run is a run of cells on one row: Len cells from Row, Col.
type Run struct {
	Row, Col, Len int
}

// Diff returns the runs of cells of next that differ from prev, row by row,
// left to right. Two runs on a row separated by at most maxGap unchanged cells
// are joined into one. If prev is nil or of another size, every row is one
// full-width run.
func Diff(prev, next *Frame, maxGap int) []Run {
	if next == nil {
		return nil
	}
	var old []rune
	if prev != nil && prev.rows == next.rows && prev.cols == next.cols {
		old = prev.cells
	}
	return DiffCells(old, next.cells, next.cols, maxGap)
}

// DiffCells is Diff over row-major cell slices of width cols. If prev does
// not have the length of next, every row is one full-width run.
func DiffCells[T comparable](prev, next []T, cols, maxGap int) []Run {
	if cols <= 0 || len(next) == 0 {
		return nil
	}
	rows := len(next) / cols
	var runs []Run
	if len(prev) != len(next) {
		for r := 0; r < rows; r++ {
			runs = append(runs, Run{Row: r, Col: 0, Len: cols})
		}
		return runs
	}
	maxGap = max(maxGap, 0)
	for r := 0; r < rows; r++ {
		base := r * cols
		start, end := -1, -1 // current run [start, end)
		for c := 0; c < cols; c++ {
			if prev[base+c] == next[base+c] {
				continue
			}
			switch {
			case start < 0:
				start, end = c, c+1
			case c-end <= maxGap:
				end = c + 1
			default:
				runs = append(runs, Run{Row: r, Col: start, Len: end - start})
				start, end = c, c+1
			}
		}
		if start >= 0 {
			runs = append(runs, Run{Row: r, Col: start, Len: end - start})
		}
	}
	return runs
}

// Width returns the number of cells s takes: one per rune.
func Width(s string) int { return utf8.RuneCountInString(s) }
