package fakepin

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"periph.io/x/conn/v3/gpio"
)

// Matrix is a diode-less membrane key matrix: rows are outputs, columns
// inputs with pull-ups. A column reads low when a chain of closed contacts
// joins it to a row driven low (so several keys pressed at once ghost, as
// on the real part), and reports that falling edge when asked for edges.
// Contacts can chatter, a column can be shorted to ground, a row can fail.
type Matrix struct {
	mu      sync.Mutex
	rows    []*matrixRow
	cols    []*matrixCol
	pressed map[[2]int]bool
	bounce  map[[2]int]int // scans left during which the contact chatters
	open    map[[2]int]bool
	shorted map[int]bool
	reads   atomic.Int64
	waits   atomic.Int64
	noEdges bool // columns without edge detection (WaitForEdge returns false at once)
	rowErr  int  // row whose Out fails; -1 for none
}

// NewMatrix returns a rows x cols matrix with no key pressed; its pins are
// named prefix+"ROW0"... and prefix+"COL0"...
func NewMatrix(rows, cols int, prefix string) *Matrix {
	m := &Matrix{pressed: map[[2]int]bool{}, bounce: map[[2]int]int{}, open: map[[2]int]bool{},
		shorted: map[int]bool{}, rowErr: -1}
	for i := range rows {
		m.rows = append(m.rows, &matrixRow{output: output{named{fmt.Sprintf("%sROW%d", prefix, i), i}}, m: m, i: i, l: gpio.High})
	}
	for i := range cols {
		m.cols = append(m.cols, &matrixCol{named: named{fmt.Sprintf("%sCOL%d", prefix, i), 100 + i}, m: m, i: i,
			edges: make(chan struct{}, 64), last: gpio.High})
	}
	return m
}

// Rows returns the row pins, for input.New.
func (m *Matrix) Rows() []gpio.PinOut {
	out := make([]gpio.PinOut, len(m.rows))
	for i, r := range m.rows {
		out[i] = r
	}
	return out
}

// Cols returns the column pins, for input.New.
func (m *Matrix) Cols() []gpio.PinIn {
	out := make([]gpio.PinIn, len(m.cols))
	for i, c := range m.cols {
		out[i] = c
	}
	return out
}

// Press closes the key at row r, column c (0-based).
func (m *Matrix) Press(r, c int) { m.set(func() { m.pressed[[2]int{r, c}] = true }) }

// Release opens the key at row r, column c.
func (m *Matrix) Release(r, c int) { m.set(func() { delete(m.pressed, [2]int{r, c}) }) }

// Chatter makes key (r, c) read alternately closed and open for its next n
// scans (while pressed), like a bouncing contact.
func (m *Matrix) Chatter(r, c, n int) { m.set(func() { m.bounce[[2]int{r, c}] = n }) }

// Short ties column c to ground (on) or frees it (off).
func (m *Matrix) Short(c int, on bool) { m.set(func() { m.shorted[c] = on }) }

// NoEdges takes the columns' edge detection away: WaitForEdge returns false
// at once.
func (m *Matrix) NoEdges() { m.set(func() { m.noEdges = true }) }

// FailRow makes every Out on row r fail.
func (m *Matrix) FailRow(r int) { m.set(func() { m.rowErr = r }) }

// Reads is the number of column reads so far.
func (m *Matrix) Reads() int64 { return m.reads.Load() }

// Waits is the number of WaitForEdge calls so far.
func (m *Matrix) Waits() int64 { return m.waits.Load() }

// RowLevel returns the level row r is driven to.
func (m *Matrix) RowLevel(r int) gpio.Level {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rows[r].l
}

// ColConfig returns the pull and the edges column c was configured with.
func (m *Matrix) ColConfig(c int) (gpio.Pull, gpio.Edge) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cols[c].pull, m.cols[c].edge
}

func (m *Matrix) set(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
	m.changed()
}

// contact reports whether key (r, c) conducts now. m.mu is held.
func (m *Matrix) contact(k [2]int) bool {
	return m.pressed[k] && !m.open[k]
}

// level computes column c's level. m.mu is held.
func (m *Matrix) level(c int) gpio.Level {
	if m.shorted[c] {
		return gpio.Low
	}
	// Walk the graph of rows and columns joined by closed contacts.
	seenR := map[int]bool{}
	seenC := map[int]bool{c: true}
	queue := []int{c}
	for len(queue) > 0 {
		col := queue[0]
		queue = queue[1:]
		for r := range m.rows {
			if seenR[r] || !m.contact([2]int{r, col}) {
				continue
			}
			if m.rows[r].l == gpio.Low {
				return gpio.Low
			}
			seenR[r] = true
			for c2 := range m.cols {
				if !seenC[c2] && m.contact([2]int{r, c2}) {
					seenC[c2] = true
					queue = append(queue, c2)
				}
			}
		}
	}
	return gpio.High // pull-up
}

// changed queues edges for columns whose level fell. m.mu is held.
func (m *Matrix) changed() {
	for c, col := range m.cols {
		l := m.level(c)
		if l != col.last {
			col.last = l
			if l == gpio.Low && col.edge != gpio.NoEdge {
				sendEdge(col.edges)
			}
		}
	}
}

type matrixRow struct {
	output
	m *Matrix
	i int
	l gpio.Level
}

func (p *matrixRow) Out(l gpio.Level) error {
	m := p.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rowErr == p.i {
		return errors.New("fake: line busy")
	}
	p.l = l
	m.changed()
	return nil
}

type matrixCol struct {
	named
	m     *Matrix
	i     int
	edges chan struct{}
	pull  gpio.Pull
	edge  gpio.Edge
	last  gpio.Level
}

func (p *matrixCol) Function() string       { return "In" }
func (p *matrixCol) DefaultPull() gpio.Pull { return gpio.PullUp }

func (p *matrixCol) Pull() gpio.Pull {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	return p.pull
}

func (p *matrixCol) In(pull gpio.Pull, edge gpio.Edge) error {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	p.pull, p.edge = pull, edge
	return nil
}

func (p *matrixCol) Read() gpio.Level {
	m := p.m
	m.reads.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.level(p.i)
	// A chattering key flips each time it is scanned: read with its row
	// the only one driven low.
	low := -1
	for r, row := range m.rows {
		if row.l == gpio.Low {
			if low >= 0 {
				return l
			}
			low = r
		}
	}
	if k := [2]int{low, p.i}; low >= 0 && m.bounce[k] > 0 {
		m.open[k] = !m.open[k]
		if m.bounce[k]--; m.bounce[k] == 0 {
			delete(m.open, k)
		}
		m.changed()
	}
	return l
}

func (p *matrixCol) WaitForEdge(timeout time.Duration) bool {
	p.m.waits.Add(1)
	p.m.mu.Lock()
	none := p.m.noEdges
	p.m.mu.Unlock()
	if none {
		return false
	}
	return waitEdge(p.edges, timeout)
}

var (
	_ gpio.PinOut = (*matrixRow)(nil)
	_ gpio.PinIn  = (*matrixCol)(nil)
)
