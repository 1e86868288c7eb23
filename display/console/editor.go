package console

import "unicode"

// editor is the input line: a rune buffer, a cursor and a history. It is a
// pure state machine; the Console renders it.
type editor struct {
	buf     []rune
	cur     int // cursor, 0..len(buf)
	max     int // longest line in runes
	hist    []string
	histMax int
	hidx    int    // index into hist while browsing; len(hist) when editing a new line
	draft   []rune // the line being edited before browsing started
}

func newEditor(maxRunes, histMax int) *editor {
	return &editor{max: maxRunes, histMax: histMax}
}

// insert adds r at the cursor. Control characters are refused.
func (e *editor) insert(r rune) bool {
	if r < 0x20 || (r >= 0x7f && r < 0xa0) || len(e.buf) >= e.max {
		return false
	}
	e.buf = append(e.buf, 0)
	copy(e.buf[e.cur+1:], e.buf[e.cur:])
	e.buf[e.cur] = r
	e.cur++
	return true
}

func (e *editor) backspace() bool {
	if e.cur == 0 {
		return false
	}
	e.buf = append(e.buf[:e.cur-1], e.buf[e.cur:]...)
	e.cur--
	return true
}

func (e *editor) deleteForward() bool {
	if e.cur >= len(e.buf) {
		return false
	}
	e.buf = append(e.buf[:e.cur], e.buf[e.cur+1:]...)
	return true
}

func (e *editor) left() bool {
	if e.cur == 0 {
		return false
	}
	e.cur--
	return true
}

func (e *editor) right() bool {
	if e.cur >= len(e.buf) {
		return false
	}
	e.cur++
	return true
}

func (e *editor) home() bool {
	moved := e.cur != 0
	e.cur = 0
	return moved
}

func (e *editor) end() bool {
	moved := e.cur != len(e.buf)
	e.cur = len(e.buf)
	return moved
}

// killLine removes everything before the cursor (readline's Ctrl-U); with
// the cursor at the end, as usual, that is the whole line.
func (e *editor) killLine() bool {
	if e.cur == 0 {
		return false
	}
	e.buf = append(e.buf[:0], e.buf[e.cur:]...)
	e.cur = 0
	return true
}

// killToEnd removes everything from the cursor on (Ctrl-K).
func (e *editor) killToEnd() bool {
	if e.cur >= len(e.buf) {
		return false
	}
	e.buf = e.buf[:e.cur]
	return true
}

// killWord removes the word before the cursor and the blanks after it
// (Ctrl-W, unix-word-rubout).
func (e *editor) killWord() bool {
	i := e.cur
	for i > 0 && unicode.IsSpace(e.buf[i-1]) {
		i--
	}
	for i > 0 && !unicode.IsSpace(e.buf[i-1]) {
		i--
	}
	if i == e.cur {
		return false
	}
	e.buf = append(e.buf[:i], e.buf[e.cur:]...)
	e.cur = i
	return true
}

// up shows the previous history entry.
func (e *editor) up() bool {
	if e.hidx == 0 {
		return false
	}
	if e.hidx == len(e.hist) {
		e.draft = append(e.draft[:0], e.buf...)
	}
	e.hidx--
	e.set([]rune(e.hist[e.hidx]))
	return true
}

// down shows the next history entry, or the draft after the newest.
func (e *editor) down() bool {
	if e.hidx >= len(e.hist) {
		return false
	}
	e.hidx++
	if e.hidx == len(e.hist) {
		e.set(e.draft)
	} else {
		e.set([]rune(e.hist[e.hidx]))
	}
	return true
}

// choose steps the option number in the line by dir (-1 up, +1 down)
// among 1..n, wrapping: a line that is not one of them starts at 1 going
// down, at n going up. The history is left as it is.
func (e *editor) choose(dir, n int) bool {
	if n < 1 || n > 9 {
		return false
	}
	cur := 0
	if len(e.buf) == 1 && e.buf[0] >= '1' && int(e.buf[0]-'0') <= n {
		cur = int(e.buf[0] - '0')
	}
	switch {
	case cur == 0 && dir < 0:
		cur = n
	case cur == 0:
		cur = 1
	default:
		cur = (cur-1+dir+n)%n + 1
	}
	e.set([]rune{rune('0' + cur)})
	return true
}

func (e *editor) set(r []rune) {
	e.buf = append(e.buf[:0], r...)
	e.cur = len(e.buf)
}

// submit returns the line, records it in the history (unless blank or equal
// to the newest entry) and clears the editor.
func (e *editor) submit() string {
	s := string(e.buf)
	e.buf = e.buf[:0]
	e.cur = 0
	e.draft = e.draft[:0]
	if !isBlank(s) && (len(e.hist) == 0 || e.hist[len(e.hist)-1] != s) {
		e.hist = append(e.hist, s)
		if len(e.hist) > e.histMax {
			e.hist = append(e.hist[:0], e.hist[len(e.hist)-e.histMax:]...)
		}
	}
	e.hidx = len(e.hist)
	return s
}

func isBlank(s string) bool {
	for _, r := range s {
		if !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}
