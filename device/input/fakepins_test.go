package input

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/conn/v3/pin"
)

// The fakes below follow periph's gpiotest.Pin (edges are faked through a
// channel that WaitForEdge reads), but the pins are wired together: a
// column reads low when a chain of pressed keys connects it to a row driven
// low, exactly like a diode-less membrane keypad, so scanning, bouncing
// contacts, ghosting and shorts can be simulated. (gpiotest itself cannot
// be imported here: it needs github.com/jonboulle/clockwork, which is not
// in go.mod.)

type fakeMatrix struct {
	mu      sync.Mutex
	rows    []*fakeRow
	cols    []*fakeCol
	pressed map[[2]int]bool
	bounce  map[[2]int]int // scans left during which the contact chatters
	open    map[[2]int]bool
	shorted map[int]bool
	reads   atomic.Int64
	waits   atomic.Int64
	noEdges bool // columns without edge detection (WaitForEdge returns false at once)
	rowErr  int  // row whose Out fails; -1 for none
}

func newFakeMatrix(nrows, ncols int) *fakeMatrix {
	m := &fakeMatrix{pressed: map[[2]int]bool{}, bounce: map[[2]int]int{}, open: map[[2]int]bool{},
		shorted: map[int]bool{}, rowErr: -1}
	for i := range nrows {
		m.rows = append(m.rows, &fakeRow{m: m, i: i, l: gpio.High})
	}
	for i := range ncols {
		m.cols = append(m.cols, &fakeCol{m: m, i: i, edges: make(chan gpio.Level, 64), last: gpio.High})
	}
	return m
}

func (m *fakeMatrix) outs() []gpio.PinOut {
	var out []gpio.PinOut
	for _, r := range m.rows {
		out = append(out, r)
	}
	return out
}

func (m *fakeMatrix) ins() []gpio.PinIn {
	var out []gpio.PinIn
	for _, c := range m.cols {
		out = append(out, c)
	}
	return out
}

// contact reports whether key (r, c) conducts now. m.mu is held.
func (m *fakeMatrix) contact(k [2]int) bool {
	return m.pressed[k] && !m.open[k]
}

// level computes column c's level. m.mu is held.
func (m *fakeMatrix) level(c int) gpio.Level {
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

// changed sends edges for columns whose level changed. m.mu is held.
func (m *fakeMatrix) changed() {
	for c, col := range m.cols {
		l := m.level(c)
		if l != col.last {
			col.last = l
			if l == gpio.Low && col.edge != gpio.NoEdge {
				select {
				case col.edges <- l:
				default:
				}
			}
		}
	}
}

func (m *fakeMatrix) set(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
	m.changed()
}

func (m *fakeMatrix) press(r, c int)   { m.set(func() { m.pressed[[2]int{r, c}] = true }) }
func (m *fakeMatrix) release(r, c int) { m.set(func() { delete(m.pressed, [2]int{r, c}) }) }

// chatter makes key (r, c) read alternately closed and open for its next
// n scans (while pressed), like a bouncing contact.
func (m *fakeMatrix) chatter(r, c, n int) { m.set(func() { m.bounce[[2]int{r, c}] = n }) }

func (m *fakeMatrix) short(c int, on bool) { m.set(func() { m.shorted[c] = on }) }

type fakeRow struct {
	m *fakeMatrix
	i int
	l gpio.Level
}

func (p *fakeRow) String() string             { return fmt.Sprintf("ROW%d", p.i) }
func (p *fakeRow) Halt() error                { return nil }
func (p *fakeRow) Name() string               { return p.String() }
func (p *fakeRow) Number() int                { return p.i }
func (p *fakeRow) Function() string           { return "Out" }
func (p *fakeRow) Func() pin.Func             { return gpio.OUT }
func (p *fakeRow) SupportedFuncs() []pin.Func { return []pin.Func{gpio.OUT} }
func (p *fakeRow) SetFunc(pin.Func) error     { return errors.New("fake: not supported") }
func (p *fakeRow) PWM(gpio.Duty, physic.Frequency) error {
	return errors.New("fake: no PWM")
}

func (p *fakeRow) Out(l gpio.Level) error {
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

type fakeCol struct {
	m     *fakeMatrix
	i     int
	edges chan gpio.Level
	pull  gpio.Pull
	edge  gpio.Edge
	last  gpio.Level
}

func (p *fakeCol) String() string   { return fmt.Sprintf("COL%d", p.i) }
func (p *fakeCol) Halt() error      { return nil }
func (p *fakeCol) Name() string     { return p.String() }
func (p *fakeCol) Number() int      { return 100 + p.i }
func (p *fakeCol) Function() string { return "In" }
func (p *fakeCol) Pull() gpio.Pull  { return p.pull }
func (p *fakeCol) DefaultPull() gpio.Pull {
	return gpio.PullUp
}

func (p *fakeCol) In(pull gpio.Pull, edge gpio.Edge) error {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	p.pull, p.edge = pull, edge
	return nil
}

func (p *fakeCol) Read() gpio.Level {
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

func (p *fakeCol) WaitForEdge(timeout time.Duration) bool {
	p.m.waits.Add(1)
	if p.m.noEdges {
		return false
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.edges:
		return true
	case <-t.C:
		return false
	}
}

var (
	_ gpio.PinOut = &fakeRow{}
	_ gpio.PinIn  = &fakeCol{}
)
