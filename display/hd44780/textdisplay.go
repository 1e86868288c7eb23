// periph's display.TextDisplay: a cursor-addressed text API on top of the
// same frame.

package hd44780

import (
	"context"
	"fmt"

	pdisplay "periph.io/x/conn/v3/display"

	"termlink/display"
)

// Rows implements display.TextDisplay.
func (d *Dev) Rows() int { return d.rows }

// Cols implements display.TextDisplay.
func (d *Dev) Cols() int { return d.cols }

// MinRow implements display.TextDisplay: rows count from 0.
func (d *Dev) MinRow() int { return 0 }

// MinCol implements display.TextDisplay: columns count from 0.
func (d *Dev) MinCol() int { return 0 }

// AutoScroll implements display.TextDisplay: when on, text written past the
// last cell scrolls the display up a row; when off it continues at the top
// left.
func (d *Dev) AutoScroll(enabled bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.autoScroll = enabled
	return nil
}

// Clear implements display.TextDisplay: it blanks the frame and moves the
// cursor home.
func (d *Dev) Clear() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.frame.Clear()
	d.row, d.col = 0, 0
	return d.sync(context.Background())
}

// Home implements display.TextDisplay.
func (d *Dev) Home() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.row, d.col = 0, 0
	return d.sync(context.Background())
}

// Cursor implements display.TextDisplay: CursorOff, CursorUnderline, and
// CursorBlock or CursorBlink (the HD44780's blinking block).
func (d *Dev) Cursor(modes ...pdisplay.CursorMode) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cursor, blink := d.cursorOn, d.blinkOn
	for _, m := range modes {
		switch m {
		case pdisplay.CursorOff:
			cursor, blink = false, false
		case pdisplay.CursorUnderline:
			cursor = true
		case pdisplay.CursorBlock, pdisplay.CursorBlink:
			blink = true
		default:
			return fmt.Errorf("hd44780: cursor mode %d: %w", m, pdisplay.ErrInvalidCommand)
		}
	}
	d.cursorOn, d.blinkOn = cursor, blink
	if err := d.control(); err != nil {
		return err
	}
	return d.sync(context.Background())
}

// Display implements display.TextDisplay: it turns the glass on or off,
// keeping its contents.
func (d *Dev) Display(on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.displayOn = on
	return d.control()
}

// Move implements display.TextDisplay. Forward and Backward wrap across rows,
// Up and Down wrap around the display.
func (d *Dev) Move(dir pdisplay.CursorDirection) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	col := min(d.col, d.cols-1)
	switch dir {
	case pdisplay.Forward:
		col++
		if col == d.cols {
			col, d.row = 0, (d.row+1)%d.rows
		}
	case pdisplay.Backward:
		col--
		if col < 0 {
			col, d.row = d.cols-1, (d.row+d.rows-1)%d.rows
		}
	case pdisplay.Up:
		d.row = (d.row + d.rows - 1) % d.rows
	case pdisplay.Down:
		d.row = (d.row + 1) % d.rows
	default:
		return fmt.Errorf("hd44780: move direction %d: %w", dir, pdisplay.ErrInvalidCommand)
	}
	d.col = col
	return d.syncCursor()
}

// MoveTo implements display.TextDisplay; row and col count from 0.
func (d *Dev) MoveTo(row, col int) error {
	if row < 0 || row >= d.rows || col < 0 || col >= d.cols {
		return fmt.Errorf("hd44780: MoveTo(%d, %d) outside the %dx%d display: %w", row, col, d.cols, d.rows, pdisplay.ErrInvalidCommand)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.row, d.col = row, col
	return d.syncCursor()
}

func (d *Dev) syncCursor() error {
	if !d.cursorOn && !d.blinkOn {
		return nil
	}
	return d.sync(context.Background())
}

// Write implements display.TextDisplay and io.Writer: p is UTF-8 text, folded
// to what the display shows (see display.Fold), written from the cursor on;
// '\n' starts the next row. It returns len(p) once the text is in the frame,
// with the error of the bus, if any; the text reaches the glass on the next
// successful write.
func (d *Dev) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range display.Fold(devCharset{d}, string(p)) {
		if r == '\n' {
			d.newline()
			continue
		}
		if d.col >= d.cols {
			d.newline()
		}
		d.frame.Set(d.row, d.col, r)
		d.col++
	}
	return len(p), d.sync(context.Background())
}

// WriteString implements display.TextDisplay.
func (d *Dev) WriteString(s string) (int, error) { return d.Write([]byte(s)) }

func (d *Dev) newline() {
	d.col = 0
	d.row++
	if d.row < d.rows {
		return
	}
	if d.autoScroll {
		d.frame.ScrollUp(1)
		d.row = d.rows - 1
	} else {
		d.row = 0
	}
}
