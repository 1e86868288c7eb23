package console

import (
	"strconv"
	"strings"
)

// The console speaks plain VT100: CUP (ESC [ r ; c H), EL (ESC [ K), ED
// (ESC [ 2 J), DECSTBM (ESC [ t ; b r), SGR 0/1/2/7, DECSC/DECRC (ESC 7/8)
// and the cursor position report (ESC [ 6 n). Nothing is ever written in
// the last column, so terminals that wrap eagerly (no deferred wrap) draw
// the same screen as those that don't.
//
// Screen layout, rows counted from 1 on an H-row terminal:
//
//	1 .. H-2  conversation, newest line at the bottom (scroll region)
//	H-1       status line, reverse video
//	H         input line: prompt, text, cursor

const (
	sgrReset   = "\x1b[0m"
	sgrBold    = "\x1b[1m"
	sgrDim     = "\x1b[2m"
	sgrReverse = "\x1b[7m"
	el         = "\x1b[K"
)

func cup(b []byte, row, col int) []byte {
	b = append(b, "\x1b["...)
	b = strconv.AppendInt(b, int64(row), 10)
	b = append(b, ';')
	b = strconv.AppendInt(b, int64(col), 10)
	return append(b, 'H')
}

// dims returns the layout size: width, height, conversation rows, and the
// usable width (the last column is never written).
func (c *Console) dims() (w, h, conv, uw int) {
	w, h = max(c.w, minWidth), max(c.h, minHeight)
	return w, h, h - 2, w - 1
}

func (c *Console) useRegion() bool {
	_, _, conv, _ := c.dims()
	return !c.o.NoScrollRegion && conv >= 2
}

// appendFull draws the whole screen. c.mu is held.
func (c *Console) appendFull(b []byte) []byte {
	_, _, conv, _ := c.dims()
	b = append(b, sgrReset...)
	if c.useRegion() {
		b = append(b, "\x1b[1;"...)
		b = strconv.AppendInt(b, int64(conv), 10)
		b = append(b, 'r')
	} else {
		b = append(b, "\x1b[r"...)
	}
	b = append(b, "\x1b[H\x1b[2J"...)
	b = c.appendConversation(b)
	b = c.appendStatus(b)
	return c.appendInput(b)
}

// appendConversation repaints the conversation area. c.mu is held.
func (c *Console) appendConversation(b []byte) []byte {
	_, _, conv, _ := c.dims()
	lines := c.tail(conv)
	first := conv - len(lines) + 1
	for row := 1; row <= conv; row++ {
		b = cup(b, row, 1)
		b = append(b, el...)
		if row >= first {
			b = appendStyled(b, lines[row-first])
		}
	}
	return b
}

// appendLines adds new conversation lines at the bottom, scrolling the
// region up. c.mu is held; c.msgs already holds the message.
func (c *Console) appendLines(b []byte, lines []line) []byte {
	_, _, conv, _ := c.dims()
	if !c.useRegion() || len(lines) >= conv {
		return c.appendConversation(b)
	}
	for _, l := range lines {
		b = cup(b, conv, 1)
		b = append(b, '\n') // at the bottom margin: scroll the region
		b = cup(b, conv, 1)
		b = appendStyled(b, l)
	}
	return b
}

// appendChanged redraws the newest message, which was laid out as old and
// is now new: only its lines that changed, then the new ones scrolled in
// at the bottom. When it shrank, or does not fit the conversation rows,
// or there is no scroll region, the conversation is repainted. c.mu is
// held; c.msgs already holds the new text.
func (c *Console) appendChanged(b []byte, old, new []line) []byte {
	_, _, conv, _ := c.dims()
	if !c.useRegion() || len(new) < len(old) || len(new) >= conv {
		return c.appendConversation(b)
	}
	top := conv - len(old) + 1 // the row of old's first line
	for i, l := range old {
		switch n := new[i]; {
		case n == l:
		case n.style == l.style && strings.HasPrefix(n.text, l.text):
			// The line grew: write only what is new at its end.
			b = cup(b, top+i, stringWidth(l.text)+1)
			b = appendStyled(b, line{text: n.text[len(l.text):], style: n.style})
		default:
			b = cup(b, top+i, 1)
			b = append(b, el...)
			b = appendStyled(b, n)
		}
	}
	return c.appendLines(b, new[len(old):])
}

func appendStyled(b []byte, l line) []byte {
	switch l.style {
	case styleBold:
		b = append(b, sgrBold...)
	case styleDim:
		b = append(b, sgrDim...)
	}
	b = append(b, l.text...)
	if l.style != stylePlain {
		b = append(b, sgrReset...)
	}
	return b
}

// tail returns the last n display lines of the conversation. c.mu is held.
func (c *Console) tail(n int) []line {
	var out []line
	for i := len(c.msgs) - 1; i >= 0 && len(out) < n; i-- {
		out = append(c.wrapMessage(c.msgs[i]), out...)
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// wrapMessage lays a message out in display lines. c.mu is held.
func (c *Console) wrapMessage(m message) []line {
	_, _, _, uw := c.dims()
	prefix, st := c.o.AssistantPrefix, stylePlain
	switch m.role {
	case RoleUser:
		prefix, st = c.o.UserPrefix, styleBold
	case RoleSystem:
		prefix, st = c.o.SystemPrefix, styleDim
	}
	prefix = truncate(prefix, uw/2)
	pw := stringWidth(prefix)
	indent := strings.Repeat(" ", pw)
	parts := wrap(m.text, uw-pw)
	out := make([]line, len(parts))
	for i, p := range parts {
		if i == 0 {
			out[i] = line{text: prefix + p, style: st}
		} else {
			out[i] = line{text: indent + p, style: st}
		}
	}
	return out
}

// appendStatus redraws the status line. c.mu is held.
func (c *Console) appendStatus(b []byte) []byte {
	_, h, _, uw := c.dims()
	b = cup(b, h-1, 1)
	b = append(b, sgrReset...)
	b = append(b, el...)
	b = append(b, sgrReverse...)
	b = append(b, statusText(c.status, c.activity, uw)...)
	return append(b, sgrReset...)
}

// statusText lays out left and right parts in exactly width columns.
func statusText(left, right string, width int) string {
	right = truncate(right, width)
	rw := stringWidth(right)
	if right != "" && rw+1 > width {
		return right + strings.Repeat(" ", width-rw)
	}
	lmax := width
	if right != "" {
		lmax = width - rw - 1
	}
	left = truncate(left, lmax)
	pad := width - stringWidth(left) - rw
	return left + strings.Repeat(" ", pad) + right
}

// appendInput redraws the input line and parks the cursor. c.mu is held.
func (c *Console) appendInput(b []byte) []byte {
	_, h, _, uw := c.dims()
	col := c.inputCursorCol()
	prompt := truncate(c.o.Prompt, uw/2)
	avail := max(uw-stringWidth(prompt), 1)
	b = cup(b, h, 1)
	b = append(b, el...)
	b = append(b, prompt...)
	w := 0
	for _, r := range c.ed.buf[c.hoff:] {
		rw := runeWidth(r)
		if w+rw > avail {
			break
		}
		w += rw
		b = append(b, string(r)...)
	}
	c.lastCol = col
	return cup(b, h, col)
}

// park moves the cursor back to its place on the input line. c.mu is held.
func (c *Console) park(b []byte) []byte {
	_, h, _, _ := c.dims()
	return cup(b, h, c.lastCol)
}

// inputCursorCol scrolls the input line horizontally so the cursor is
// visible and returns the cursor's column. c.mu is held.
func (c *Console) inputCursorCol() int {
	_, _, _, uw := c.dims()
	pw := stringWidth(truncate(c.o.Prompt, uw/2))
	avail := max(uw-pw, 1)
	buf, cur := c.ed.buf, c.ed.cur
	c.hoff = min(c.hoff, cur)
	for c.hoff > 0 && runesWidth(buf[c.hoff-1:]) < avail {
		c.hoff--
	}
	for runesWidth(buf[c.hoff:cur]) >= avail {
		c.hoff++
	}
	return pw + runesWidth(buf[c.hoff:cur]) + 1
}
