package console

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// vt is a minimal VT100 emulator: enough of CUP, EL, ED, DECSTBM, SGR,
// DECSC/DECRC, IND and DSR 6 to check what the Console draws, including
// deferred auto-wrap so that overlong lines show up as bugs.
type vt struct {
	mu      sync.Mutex
	w, h    int
	cells   [][]cell
	cx, cy  int
	top     int
	bot     int
	attr    uint8
	wrap    bool
	saved   [3]int
	state   int
	params  []byte
	pend    []byte
	respond func([]byte)
	changed chan struct{}
	bytes   int
}

type cell struct {
	r    rune
	attr uint8
}

const (
	attrBold uint8 = 1 << iota
	attrDim
	attrReverse
)

func newVT(w, h int) *vt {
	v := &vt{w: w, h: h, changed: make(chan struct{}, 1)}
	v.reset()
	return v
}

func (v *vt) reset() {
	v.cells = make([][]cell, v.h)
	for i := range v.cells {
		v.cells[i] = make([]cell, v.w)
		for j := range v.cells[i] {
			v.cells[i][j] = cell{r: ' '}
		}
	}
	v.cx, v.cy, v.top, v.bot, v.attr, v.wrap = 0, 0, 0, v.h-1, 0, false
}

// pump feeds everything read from r into v until r fails.
func (v *vt) pump(r io.Reader) {
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			v.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (v *vt) Write(p []byte) (int, error) {
	v.mu.Lock()
	v.bytes += len(p)
	data := append(v.pend, p...)
	v.pend = nil
	for len(data) > 0 {
		b := data[0]
		if v.state == 0 && b >= 0x80 {
			if !utf8.FullRune(data) {
				v.pend = append([]byte(nil), data...)
				break
			}
			r, size := utf8.DecodeRune(data)
			v.put(r)
			data = data[size:]
			continue
		}
		v.byte(b)
		data = data[1:]
	}
	v.mu.Unlock()
	select {
	case v.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (v *vt) byte(b byte) {
	switch v.state {
	case 1: // ESC
		v.state = 0
		switch b {
		case '[':
			v.state = 2
			v.params = v.params[:0]
		case '7':
			v.saved = [3]int{v.cx, v.cy, int(v.attr)}
		case '8':
			v.cx, v.cy, v.attr = v.saved[0], v.saved[1], uint8(v.saved[2])
			v.wrap = false
		case 'D':
			v.index()
		}
		return
	case 2: // CSI
		if b >= 0x40 && b <= 0x7e {
			v.state = 0
			v.csi(b)
		} else {
			v.params = append(v.params, b)
		}
		return
	}
	switch {
	case b == 0x1b:
		v.state = 1
	case b == '\r':
		v.cx, v.wrap = 0, false
	case b == '\n':
		v.index()
		v.wrap = false
	case b == '\b':
		if v.cx > 0 {
			v.cx--
		}
		v.wrap = false
	case b < 0x20 || b == 0x7f:
	default:
		v.put(rune(b))
	}
}

func (v *vt) index() {
	if v.cy == v.bot {
		copy(v.cells[v.top:v.bot], v.cells[v.top+1:v.bot+1])
		row := make([]cell, v.w)
		for i := range row {
			row[i] = cell{r: ' '}
		}
		v.cells[v.bot] = row
		return
	}
	if v.cy < v.h-1 {
		v.cy++
	}
}

func (v *vt) put(r rune) {
	rw := runeWidth(r)
	if rw == 0 {
		return
	}
	if v.wrap || v.cx+rw > v.w {
		v.cx = 0
		v.index()
		v.wrap = false
	}
	v.cells[v.cy][v.cx] = cell{r: r, attr: v.attr}
	if rw == 2 {
		v.cells[v.cy][v.cx+1] = cell{r: 0, attr: v.attr}
	}
	v.cx += rw
	if v.cx >= v.w {
		v.cx = v.w - 1
		v.wrap = true
	}
}

func (v *vt) nums(def int) []int {
	var out []int
	for _, f := range strings.Split(string(v.params), ";") {
		n := 0
		if _, err := fmt.Sscanf(f, "%d", &n); err != nil || n == 0 {
			n = def
		}
		out = append(out, n)
	}
	return out
}

func (v *vt) csi(final byte) {
	v.wrap = false
	switch final {
	case 'H', 'f':
		p := v.nums(1)
		row, col := p[0], 1
		if len(p) > 1 {
			col = p[1]
		}
		v.cy = min(max(row, 1), v.h) - 1
		v.cx = min(max(col, 1), v.w) - 1
	case 'K':
		p := v.nums(0)
		from, to := v.cx, v.w
		switch p[0] {
		case 1:
			from, to = 0, v.cx+1
		case 2:
			from, to = 0, v.w
		}
		for i := from; i < to; i++ {
			v.cells[v.cy][i] = cell{r: ' '}
		}
	case 'J':
		if p := v.nums(0); p[0] == 2 {
			for y := range v.cells {
				for x := range v.cells[y] {
					v.cells[y][x] = cell{r: ' '}
				}
			}
		}
	case 'r':
		p := v.nums(0)
		top, bot := 1, v.h
		if len(p) == 2 && p[0] > 0 && p[1] > 0 {
			top, bot = p[0], min(p[1], v.h)
		}
		if top < bot {
			v.top, v.bot = top-1, bot-1
		}
		v.cx, v.cy = 0, 0
	case 'm':
		for _, n := range v.nums(0) {
			switch n {
			case 0:
				v.attr = 0
			case 1:
				v.attr |= attrBold
			case 2:
				v.attr |= attrDim
			case 7:
				v.attr |= attrReverse
			}
		}
	case 'n':
		if p := v.nums(0); p[0] == 6 && v.respond != nil {
			v.respond(fmt.Appendf(nil, "\x1b[%d;%dR", v.cy+1, v.cx+1))
		}
	case 'A':
		v.cy = max(v.cy-v.nums(1)[0], 0)
	case 'B':
		v.cy = min(v.cy+v.nums(1)[0], v.h-1)
	case 'C':
		v.cx = min(v.cx+v.nums(1)[0], v.w-1)
	case 'D':
		v.cx = max(v.cx-v.nums(1)[0], 0)
	}
}

// row returns screen row y (1-based), trailing blanks trimmed.
func (v *vt) row(y int) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rowLocked(y - 1)
}

func (v *vt) rowLocked(y int) string {
	var b strings.Builder
	for _, c := range v.cells[y] {
		if c.r != 0 {
			b.WriteRune(c.r)
		}
	}
	return strings.TrimRight(b.String(), " ")
}

func (v *vt) screen() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var rows []string
	for y := range v.cells {
		rows = append(rows, fmt.Sprintf("%2d|%s", y+1, v.rowLocked(y)))
	}
	return strings.Join(rows, "\n")
}

// attrAt returns the attributes of the cell at (row, col), 1-based.
func (v *vt) attrAt(row, col int) uint8 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cells[row-1][col-1].attr
}

func (v *vt) cursor() (row, col int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cy + 1, v.cx + 1
}

// find returns the 1-based row holding s, or 0.
func (v *vt) find(s string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	for y := range v.cells {
		if strings.Contains(v.rowLocked(y), s) {
			return y + 1
		}
	}
	return 0
}

// waitFor polls cond until it holds or 5s pass.
func (v *vt) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for !cond() {
		select {
		case <-v.changed:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s; screen:\n%s", what, v.screen())
		}
	}
}
