// Package vt is a small VT100/xterm screen model: it takes what a program
// writes to a terminal and keeps the text the screen would show.
//
// It covers what shells (bash, sh, busybox), line editors (readline) and
// the common full-screen tools (less, vi, top) use: printable UTF-8 with
// wide characters, CR/LF/BS/TAB, cursor movement (CUU/CUD/CUF/CUB, CUP,
// CHA, VPA, CNL/CPL), erase in line and display, insert/delete characters
// and lines, scroll regions and scrolling (IND, RI, SU, SD), save/restore
// cursor, autowrap with the pending-wrap column, insert mode, the alternate
// screen (modes 47, 1047, 1049), tab stops, and answers to the device
// status and attribute queries (DSR 5/6, DA) a program may send. Colours
// and other attributes are parsed and dropped: the model keeps text only.
// OSC, DCS, APC, PM and SOS strings are consumed and ignored, and so is
// every sequence it does not know, so nothing unknown reaches the screen.
//
// References: the VT100 User Guide (https://vt100.net/docs/vt100-ug/) and
// xterm's ctlseqs (https://invisible-island.net/xterm/ctlseqs/ctlseqs.html).
// Combining characters are dropped.
package vt

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Cell values besides a rune.
const (
	blank = 0  // an empty cell, shown as a space
	wide  = -1 // the right half of a wide character
)

// parser states
const (
	sGround = iota
	sEscape
	sEscInter // ESC followed by intermediate bytes
	sCSI
	sOSC      // OSC string, ended by BEL or ST
	sString   // DCS, SOS, PM, APC strings, ended by ST
	sStrEsc   // ESC seen inside a string: ST if '\' follows
	maxParams = 16
	maxParam  = 9999
)

type cursor struct {
	x, y        int
	wrapPending bool
	origin      bool
}

// Screen is the model of one terminal screen. The zero value is not
// usable; call New. A Screen is not safe for concurrent use.
type Screen struct {
	cols, rows int
	main, alt  [][]rune
	grid       [][]rune // main or alt
	altActive  bool

	cur         cursor
	saved       cursor // DECSC / SCOSC
	savedMain   cursor // mode 1049
	top, bottom int    // scroll region, inclusive
	autowrap    bool
	insert      bool
	tabs        []bool
	last        rune // last printed character, for REP

	// LFNewline makes LF (and VT, FF) also return the carriage, as the
	// "new line mode" (LNM) does. Useful for serial consoles that end
	// lines with a bare "\n".
	LFNewline bool

	// parser
	state   int
	params  []int
	param   int
	hasP    bool
	private byte
	inter   byte
	utf     [utf8.UTFMax]byte
	utfN    int
	replies []byte
}

// New returns a blank screen of cols columns and rows rows, cursor at
// the top left. Sizes below 1 are taken as 1.
func New(cols, rows int) *Screen {
	cols = max(cols, 1)
	rows = max(rows, 1)
	s := &Screen{cols: cols, rows: rows}
	s.main = newGrid(cols, rows)
	s.alt = newGrid(cols, rows)
	s.reset()
	return s
}

func newGrid(cols, rows int) [][]rune {
	g := make([][]rune, rows)
	for i := range g {
		g[i] = make([]rune, cols)
	}
	return g
}

func (s *Screen) reset() {
	s.grid = s.main
	s.altActive = false
	for _, g := range [][][]rune{s.main, s.alt} {
		for _, line := range g {
			clear(line)
		}
	}
	s.cur = cursor{}
	s.saved = cursor{}
	s.savedMain = cursor{}
	s.top, s.bottom = 0, s.rows-1
	s.autowrap = true
	s.insert = false
	s.LFNewline = false
	s.tabs = make([]bool, s.cols)
	for i := 8; i < s.cols; i += 8 {
		s.tabs[i] = true
	}
	s.last = 0
	s.state = sGround
	s.utfN = 0
}

// Size returns the screen's columns and rows.
func (s *Screen) Size() (cols, rows int) { return s.cols, s.rows }

// Cursor returns the cursor's column and row, both from 0.
func (s *Screen) Cursor() (x, y int) { return s.cur.x, s.cur.y }

// AltScreen reports whether the alternate screen is shown (a full-screen
// program such as vi or less is running).
func (s *Screen) AltScreen() bool { return s.altActive }

// Replies returns and forgets the answers to queries the program sent
// (cursor position, device attributes), to be written back to it as a
// terminal would.
func (s *Screen) Replies() []byte {
	r := s.replies
	s.replies = nil
	return r
}

// Lines returns the rows of the screen, trailing spaces removed.
func (s *Screen) Lines() []string {
	out := make([]string, s.rows)
	var b strings.Builder
	for y, line := range s.grid {
		b.Reset()
		for _, r := range line {
			switch r {
			case wide:
			case blank:
				b.WriteByte(' ')
			default:
				b.WriteRune(r)
			}
		}
		out[y] = strings.TrimRight(b.String(), " ")
	}
	return out
}

// String returns the screen as text: its rows, trailing spaces removed,
// joined by "\n", without the empty rows at the bottom.
func (s *Screen) String() string {
	lines := s.Lines()
	n := len(lines)
	for n > 0 && lines[n-1] == "" {
		n--
	}
	return strings.Join(lines[:n], "\n")
}

// Write feeds what the program wrote to the terminal. It never fails.
func (s *Screen) Write(p []byte) (int, error) {
	for _, b := range p {
		s.byte(b)
	}
	return len(p), nil
}

// WriteString is Write for a string.
func (s *Screen) WriteString(p string) (int, error) {
	for i := 0; i < len(p); i++ {
		s.byte(p[i])
	}
	return len(p), nil
}

func (s *Screen) byte(b byte) {
	// An unfinished UTF-8 sequence ends at any byte that cannot continue it.
	if s.utfN > 0 {
		if b&0xC0 == 0x80 && s.state == sGround {
			s.utf[s.utfN] = b
			s.utfN++
			if utf8.FullRune(s.utf[:s.utfN]) {
				r, _ := utf8.DecodeRune(s.utf[:s.utfN])
				s.utfN = 0
				s.print(r)
			}
			return
		}
		s.utfN = 0
		s.print(utf8.RuneError)
	}
	switch s.state {
	case sOSC:
		switch b {
		case 0x07:
			s.state = sGround
		case 0x1b:
			s.state = sStrEsc
		case 0x18, 0x1a:
			s.state = sGround
		}
		return
	case sString:
		switch b {
		case 0x1b:
			s.state = sStrEsc
		case 0x18, 0x1a:
			s.state = sGround
		}
		return
	case sStrEsc:
		if b == '\\' {
			s.state = sGround
			return
		}
		// Not ST: the string ended; the ESC starts a new sequence.
		s.state = sEscape
		s.escape(b)
		return
	}
	if b < 0x20 || b == 0x7f {
		s.control(b)
		return
	}
	switch s.state {
	case sGround:
		if b < 0x80 {
			s.print(rune(b))
			return
		}
		s.utf[0] = b
		s.utfN = 1
		if utf8.FullRune(s.utf[:1]) { // a byte that cannot start a sequence
			s.utfN = 0
			s.print(utf8.RuneError)
		}
	case sEscape:
		s.escape(b)
	case sEscInter:
		if b >= 0x20 && b <= 0x2f {
			return
		}
		if s.inter == '#' && b == '8' {
			s.alignment()
		}
		s.state = sGround
	case sCSI:
		s.csiByte(b)
	}
}

func (s *Screen) control(b byte) {
	switch b {
	case 0x1b:
		s.state = sEscape
		s.inter = 0
		return
	case 0x18, 0x1a: // CAN, SUB abort a sequence
		s.state = sGround
		return
	case 0x08:
		if s.cur.x > 0 {
			s.cur.x--
		}
		s.cur.wrapPending = false
	case 0x09:
		s.tab(1)
	case 0x0a, 0x0b, 0x0c:
		s.index()
		if s.LFNewline {
			s.cur.x = 0
		}
	case 0x0d:
		s.cur.x = 0
		s.cur.wrapPending = false
	}
	// Other controls (NUL, BEL, SO, SI, DEL...) do nothing; controls inside
	// an escape or control sequence are executed and the sequence goes on.
}

func (s *Screen) escape(b byte) {
	s.state = sGround
	switch b {
	case '[':
		s.state = sCSI
		s.params = s.params[:0]
		s.param, s.hasP = 0, false
		s.private, s.inter = 0, 0
	case ']':
		s.state = sOSC
	case 'P', 'X', '^', '_':
		s.state = sString
	case '7':
		s.saved = s.cur
	case '8':
		s.restore(s.saved)
	case 'D':
		s.index()
	case 'E':
		s.index()
		s.cur.x = 0
	case 'M':
		s.reverseIndex()
	case 'H':
		s.tabs[s.cur.x] = true
	case 'c':
		s.reset()
	default:
		if b >= 0x20 && b <= 0x2f {
			s.inter = b
			s.state = sEscInter
		}
		// '=', '>', '\\' and the rest: nothing to do.
	}
}

func (s *Screen) csiByte(b byte) {
	switch {
	case b >= '0' && b <= '9':
		if s.param < maxParam*10 {
			s.param = s.param*10 + int(b-'0')
		}
		s.hasP = true
	case b == ';' || b == ':':
		s.pushParam()
	case b >= '<' && b <= '?':
		if len(s.params) == 0 && !s.hasP && s.private == 0 {
			s.private = b
		}
	case b >= 0x20 && b <= 0x2f:
		s.inter = b
	case b >= 0x40 && b <= 0x7e:
		s.pushParam()
		s.state = sGround
		s.csi(b)
	default:
		s.state = sGround
	}
}

func (s *Screen) pushParam() {
	if len(s.params) < maxParams {
		s.params = append(s.params, min(s.param, maxParam))
	}
	s.param, s.hasP = 0, false
}

// arg returns parameter i, or def when it is absent or 0.
func (s *Screen) arg(i, def int) int {
	if i < len(s.params) && s.params[i] > 0 {
		return s.params[i]
	}
	return def
}

func (s *Screen) csi(final byte) {
	if s.inter != 0 {
		if s.inter == '!' && final == 'p' { // DECSTR soft reset
			s.autowrap, s.insert, s.cur.origin = true, false, false
			s.top, s.bottom = 0, s.rows-1
		}
		return
	}
	if s.private != 0 && s.private != '?' {
		if s.private == '>' && final == 'c' {
			s.replies = append(s.replies, "\x1b[>0;10;1c"...)
		}
		return
	}
	if s.private == '?' {
		switch final {
		case 'h':
			s.modes(true)
		case 'l':
			s.modes(false)
		}
		return
	}
	n := s.arg(0, 1)
	switch final {
	case '@':
		s.insertChars(n)
	case 'A':
		s.up(n)
	case 'B', 'e':
		s.down(n)
	case 'C', 'a':
		s.moveTo(s.cur.x+n, s.cur.y)
	case 'D':
		s.moveTo(s.cur.x-n, s.cur.y)
	case 'E':
		s.down(n)
		s.cur.x = 0
	case 'F':
		s.up(n)
		s.cur.x = 0
	case 'G', '`':
		s.moveTo(n-1, s.cur.y)
	case 'H', 'f':
		row := s.arg(0, 1) - 1
		if s.cur.origin {
			row += s.top
		}
		s.moveTo(s.arg(1, 1)-1, row)
		if s.cur.origin {
			s.cur.y = min(max(s.cur.y, s.top), s.bottom)
		}
	case 'I':
		s.tab(n)
	case 'J':
		s.eraseDisplay(s.arg(0, 0))
	case 'K':
		s.eraseLine(s.arg(0, 0))
	case 'L':
		s.insertLines(n)
	case 'M':
		s.deleteLines(n)
	case 'P':
		s.deleteChars(n)
	case 'S':
		s.scrollUp(s.top, s.bottom, n)
	case 'T':
		if len(s.params) <= 1 {
			s.scrollDown(s.top, s.bottom, n)
		}
	case 'X':
		s.cur.wrapPending = false
		for x := s.cur.x; x < s.cur.x+n && x < s.cols; x++ {
			s.setCell(x, s.cur.y, blank)
		}
	case 'Z':
		s.backTab(n)
	case 'b':
		if s.last != 0 {
			for range min(n, s.cols*s.rows) {
				s.print(s.last)
			}
		}
	case 'c':
		if s.arg(0, 0) == 0 {
			s.replies = append(s.replies, "\x1b[?1;2c"...)
		}
	case 'd':
		row := n - 1
		if s.cur.origin {
			row += s.top
		}
		s.moveTo(s.cur.x, row)
	case 'g':
		switch s.arg(0, 0) {
		case 0:
			s.tabs[s.cur.x] = false
		case 3:
			clear(s.tabs)
		}
	case 'h', 'l':
		on := final == 'h'
		for _, p := range s.params {
			switch p {
			case 4:
				s.insert = on
			case 20:
				s.LFNewline = on
			}
		}
	case 'n':
		switch s.arg(0, 0) {
		case 5:
			s.replies = append(s.replies, "\x1b[0n"...)
		case 6:
			row := s.cur.y + 1
			if s.cur.origin {
				row -= s.top
			}
			s.replies = append(s.replies, "\x1b["+strconv.Itoa(row)+";"+strconv.Itoa(s.cur.x+1)+"R"...)
		}
	case 'r':
		top, bottom := s.arg(0, 1)-1, s.arg(1, s.rows)-1
		bottom = min(bottom, s.rows-1)
		if top < bottom {
			s.top, s.bottom = top, bottom
			s.home()
		}
	case 's':
		if len(s.params) <= 1 && s.arg(0, 0) == 0 {
			s.saved = s.cur
		}
	case 'u':
		s.restore(s.saved)
	}
	// 'm' (SGR), 't' (window ops), 'q' and the rest: nothing to keep.
}

func (s *Screen) modes(on bool) {
	for _, p := range s.params {
		switch p {
		case 6:
			s.cur.origin = on
			s.home()
		case 7:
			s.autowrap = on
			if !on {
				s.cur.wrapPending = false
			}
		case 47, 1047:
			s.switchScreen(on, false)
		case 1049:
			s.switchScreen(on, true)
		}
	}
}

func (s *Screen) switchScreen(alt, saveCursor bool) {
	if alt == s.altActive {
		return
	}
	if alt {
		if saveCursor {
			s.savedMain = s.cur
		}
		s.grid = s.alt
		for _, line := range s.alt {
			clear(line)
		}
		s.altActive = true
		return
	}
	s.grid = s.main
	s.altActive = false
	if saveCursor {
		s.restore(s.savedMain)
	}
}

func (s *Screen) restore(c cursor) {
	s.cur = c
	s.cur.x = min(max(s.cur.x, 0), s.cols-1)
	s.cur.y = min(max(s.cur.y, 0), s.rows-1)
}

func (s *Screen) home() {
	s.cur.x, s.cur.wrapPending = 0, false
	if s.cur.origin {
		s.cur.y = s.top
	} else {
		s.cur.y = 0
	}
}

func (s *Screen) moveTo(x, y int) {
	s.cur.x = min(max(x, 0), s.cols-1)
	s.cur.y = min(max(y, 0), s.rows-1)
	s.cur.wrapPending = false
}

// up and down stop at the scroll region's edge when the cursor is inside it.
func (s *Screen) up(n int) {
	limit := 0
	if s.cur.y >= s.top {
		limit = s.top
	}
	s.cur.y = max(s.cur.y-n, limit)
	s.cur.wrapPending = false
}

func (s *Screen) down(n int) {
	limit := s.rows - 1
	if s.cur.y <= s.bottom {
		limit = s.bottom
	}
	s.cur.y = min(s.cur.y+n, limit)
	s.cur.wrapPending = false
}

func (s *Screen) index() {
	s.cur.wrapPending = false
	switch {
	case s.cur.y == s.bottom:
		s.scrollUp(s.top, s.bottom, 1)
	case s.cur.y < s.rows-1:
		s.cur.y++
	}
}

func (s *Screen) reverseIndex() {
	s.cur.wrapPending = false
	switch {
	case s.cur.y == s.top:
		s.scrollDown(s.top, s.bottom, 1)
	case s.cur.y > 0:
		s.cur.y--
	}
}

func (s *Screen) tab(n int) {
	s.cur.wrapPending = false
	for ; n > 0 && s.cur.x < s.cols-1; n-- {
		s.cur.x++
		for s.cur.x < s.cols-1 && !s.tabs[s.cur.x] {
			s.cur.x++
		}
	}
}

func (s *Screen) backTab(n int) {
	s.cur.wrapPending = false
	for ; n > 0 && s.cur.x > 0; n-- {
		s.cur.x--
		for s.cur.x > 0 && !s.tabs[s.cur.x] {
			s.cur.x--
		}
	}
}

// scrollUp moves rows top+n..bottom up by n, blanking the rows freed.
func (s *Screen) scrollUp(top, bottom, n int) {
	n = min(n, bottom-top+1)
	g := s.grid
	for i := 0; i < n; i++ {
		line := g[top]
		copy(g[top:bottom], g[top+1:bottom+1])
		clear(line)
		g[bottom] = line
	}
}

func (s *Screen) scrollDown(top, bottom, n int) {
	n = min(n, bottom-top+1)
	g := s.grid
	for i := 0; i < n; i++ {
		line := g[bottom]
		copy(g[top+1:bottom+1], g[top:bottom])
		clear(line)
		g[top] = line
	}
}

func (s *Screen) insertLines(n int) {
	if s.cur.y < s.top || s.cur.y > s.bottom {
		return
	}
	s.scrollDown(s.cur.y, s.bottom, n)
	s.cur.x, s.cur.wrapPending = 0, false
}

func (s *Screen) deleteLines(n int) {
	if s.cur.y < s.top || s.cur.y > s.bottom {
		return
	}
	s.scrollUp(s.cur.y, s.bottom, n)
	s.cur.x, s.cur.wrapPending = 0, false
}

func (s *Screen) insertChars(n int) {
	s.cur.wrapPending = false
	line := s.grid[s.cur.y]
	x := s.cur.x
	s.splitWide(x, s.cur.y)
	n = min(n, s.cols-x)
	copy(line[x+n:], line[x:s.cols-n])
	for i := x; i < x+n; i++ {
		line[i] = blank
	}
	s.fixEdge(s.cur.y)
}

func (s *Screen) deleteChars(n int) {
	s.cur.wrapPending = false
	line := s.grid[s.cur.y]
	x := s.cur.x
	s.splitWide(x, s.cur.y)
	n = min(n, s.cols-x)
	if x+n < s.cols {
		s.splitWide(x+n, s.cur.y)
	}
	copy(line[x:], line[x+n:])
	for i := s.cols - n; i < s.cols; i++ {
		line[i] = blank
	}
	if line[x] == wide {
		line[x] = blank
	}
}

// splitWide blanks a wide character that cell (x, y) cuts in half.
func (s *Screen) splitWide(x, y int) {
	line := s.grid[y]
	if line[x] == wide && x > 0 {
		line[x-1] = blank
		line[x] = blank
	}
}

// fixEdge blanks a wide character shifted into the last column.
func (s *Screen) fixEdge(y int) {
	line := s.grid[y]
	if last := line[s.cols-1]; last != blank && last != wide && runeWidth(last) == 2 {
		line[s.cols-1] = blank
	}
}

func (s *Screen) eraseLine(mode int) {
	s.cur.wrapPending = false
	y := s.cur.y
	from, to := 0, s.cols
	switch mode {
	case 0:
		from = s.cur.x
	case 1:
		to = s.cur.x + 1
	case 2:
	default:
		return
	}
	for x := from; x < to; x++ {
		s.setCell(x, y, blank)
	}
}

func (s *Screen) eraseDisplay(mode int) {
	s.cur.wrapPending = false
	switch mode {
	case 0:
		s.eraseLine(0)
		for y := s.cur.y + 1; y < s.rows; y++ {
			clear(s.grid[y])
		}
	case 1:
		s.eraseLine(1)
		for y := 0; y < s.cur.y; y++ {
			clear(s.grid[y])
		}
	case 2, 3:
		for _, line := range s.grid {
			clear(line)
		}
	}
}

func (s *Screen) alignment() { // DECALN
	for _, line := range s.grid {
		for x := range line {
			line[x] = 'E'
		}
	}
	s.top, s.bottom = 0, s.rows-1
	s.cur = cursor{}
}

// setCell writes r at (x, y), blanking any wide character it overlaps.
func (s *Screen) setCell(x, y int, r rune) {
	line := s.grid[y]
	switch {
	case line[x] == wide && x > 0:
		line[x-1] = blank
	case line[x] != blank && x+1 < s.cols && line[x+1] == wide:
		line[x+1] = blank
	}
	line[x] = r
}

func (s *Screen) print(r rune) {
	w := runeWidth(r)
	if w == 0 {
		return
	}
	if w > s.cols {
		w = 1
	}
	if s.cur.wrapPending && s.autowrap {
		s.cur.x = 0
		s.index()
	}
	s.cur.wrapPending = false
	if s.cur.x+w > s.cols {
		if s.autowrap {
			s.setCell(s.cur.x, s.cur.y, blank)
			s.cur.x = 0
			s.index()
		} else {
			s.cur.x = s.cols - w
		}
	}
	if s.insert {
		s.insertChars(w)
	}
	s.setCell(s.cur.x, s.cur.y, r)
	if w == 2 {
		s.setCell(s.cur.x+1, s.cur.y, blank)
		s.grid[s.cur.y][s.cur.x+1] = wide
	}
	s.last = r
	s.cur.x += w
	if s.cur.x >= s.cols {
		s.cur.x = s.cols - 1
		s.cur.wrapPending = s.autowrap
	}
}

// runeWidth is the number of columns r takes: 0 for combining marks and
// other zero-width characters, 2 for East Asian wide and fullwidth
// characters and most emoji, else 1.
func runeWidth(r rune) int {
	switch {
	case r < 0x300:
		return 1
	case r <= 0x36f, // combining diacritical marks
		r >= 0x1ab0 && r <= 0x1aff, r >= 0x1dc0 && r <= 0x1dff,
		r >= 0x200b && r <= 0x200f, r >= 0x20d0 && r <= 0x20ff,
		r >= 0xfe00 && r <= 0xfe0f, r >= 0xfe20 && r <= 0xfe2f,
		r == 0xfeff:
		return 0
	case r >= 0x1100 && r <= 0x115f, r >= 0x2e80 && r <= 0x303e,
		r >= 0x3041 && r <= 0x33ff, r >= 0x3400 && r <= 0x4dbf,
		r >= 0x4e00 && r <= 0x9fff, r >= 0xa000 && r <= 0xa4cf,
		r >= 0xac00 && r <= 0xd7a3, r >= 0xf900 && r <= 0xfaff,
		r >= 0xfe30 && r <= 0xfe4f, r >= 0xff00 && r <= 0xff60,
		r >= 0xffe0 && r <= 0xffe6, r >= 0x1f300 && r <= 0x1f64f,
		r >= 0x1f900 && r <= 0x1f9ff, r >= 0x20000 && r <= 0x3fffd:
		return 2
	}
	return 1
}
