package sim

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/physic"
)

// NewWire returns an output pin and an input pin joined by a wire: the
// input reads what the output drives and reports its edges.
func NewWire(outName, inName string) (gpio.PinOut, gpio.PinIn) {
	w := &wire{edges: make(chan struct{}, 64)}
	return &wireOut{w: w, name: outName}, &wireIn{w: w, name: inName}
}

type wire struct {
	mu    sync.Mutex
	level gpio.Level
	edge  gpio.Edge
	edges chan struct{}
}

type wireOut struct {
	w    *wire
	name string
}

func (p *wireOut) String() string                        { return p.name }
func (p *wireOut) Name() string                          { return p.name }
func (p *wireOut) Number() int                           { return -1 }
func (p *wireOut) Function() string                      { return "Out" }
func (p *wireOut) Halt() error                           { return nil }
func (p *wireOut) PWM(gpio.Duty, physic.Frequency) error { return errors.New("sim: no PWM") }
func (p *wireOut) Out(l gpio.Level) error {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if l == w.level {
		return nil
	}
	w.level = l
	if w.edge == gpio.BothEdges || (l && w.edge == gpio.RisingEdge) || (!l && w.edge == gpio.FallingEdge) {
		select {
		case w.edges <- struct{}{}:
		default:
		}
	}
	return nil
}

type wireIn struct {
	w    *wire
	name string
	pull gpio.Pull
}

func (p *wireIn) String() string         { return p.name }
func (p *wireIn) Name() string           { return p.name }
func (p *wireIn) Number() int            { return -1 }
func (p *wireIn) Function() string       { return "In" }
func (p *wireIn) Halt() error            { return nil }
func (p *wireIn) DefaultPull() gpio.Pull { return gpio.Float }
func (p *wireIn) Pull() gpio.Pull        { return p.pull }
func (p *wireIn) In(pull gpio.Pull, edge gpio.Edge) error {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	if pull != gpio.PullNoChange {
		p.pull = pull
	}
	p.w.edge = edge
	for {
		select {
		case <-p.w.edges:
			continue
		default:
			return nil
		}
	}
}

func (p *wireIn) Read() gpio.Level {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	return p.w.level
}

func (p *wireIn) WaitForEdge(timeout time.Duration) bool { return waitEdge(p.w.edges, timeout) }

func waitEdge(edges <-chan struct{}, timeout time.Duration) bool {
	switch {
	case timeout < 0:
		<-edges
		return true
	case timeout == 0:
		select {
		case <-edges:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-edges:
		return true
	case <-t.C:
		return false
	}
}

// Matrix is a diode-less key matrix on fake pins: rows are outputs,
// columns inputs with pull-ups; a column reads low while a pressed key
// joins it to a row driven low, and reports that falling edge.
type Matrix struct {
	mu      sync.Mutex
	rowLvl  []gpio.Level
	colLvl  []gpio.Level
	pressed map[[2]int]bool
	edges   []chan struct{}
}

// NewMatrix returns a rows x cols matrix with no key pressed.
func NewMatrix(rows, cols int) *Matrix {
	m := &Matrix{rowLvl: make([]gpio.Level, rows), colLvl: make([]gpio.Level, cols), pressed: map[[2]int]bool{}}
	for i := range rows {
		m.rowLvl[i] = gpio.High
	}
	for i := range cols {
		m.colLvl[i] = gpio.High
		m.edges = append(m.edges, make(chan struct{}, 16))
	}
	return m
}

// update recomputes the columns; m.mu is held.
func (m *Matrix) update() {
	for c := range m.colLvl {
		l := gpio.High
		for r := range m.rowLvl {
			if m.pressed[[2]int{r, c}] && m.rowLvl[r] == gpio.Low {
				l = gpio.Low
			}
		}
		if l != m.colLvl[c] && l == gpio.Low {
			select {
			case m.edges[c] <- struct{}{}:
			default:
			}
		}
		m.colLvl[c] = l
	}
}

// Press closes the key at row r, column c (0-based).
func (m *Matrix) Press(r, c int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pressed[[2]int{r, c}] = true
	m.update()
}

// Release opens the key at row r, column c.
func (m *Matrix) Release(r, c int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pressed, [2]int{r, c})
	m.update()
}

// Rows returns the row pins, for input.New.
func (m *Matrix) Rows() []gpio.PinOut {
	var out []gpio.PinOut
	for i := range m.rowLvl {
		out = append(out, &matrixRow{m, i})
	}
	return out
}

// Cols returns the column pins, for input.New.
func (m *Matrix) Cols() []gpio.PinIn {
	var out []gpio.PinIn
	for i := range m.colLvl {
		out = append(out, &matrixCol{m, i})
	}
	return out
}

type matrixRow struct {
	m *Matrix
	i int
}

func (p *matrixRow) String() string                        { return fmt.Sprintf("SIM_ROW%d", p.i) }
func (p *matrixRow) Name() string                          { return p.String() }
func (p *matrixRow) Number() int                           { return -1 }
func (p *matrixRow) Function() string                      { return "Out" }
func (p *matrixRow) Halt() error                           { return nil }
func (p *matrixRow) PWM(gpio.Duty, physic.Frequency) error { return errors.New("sim: no PWM") }
func (p *matrixRow) Out(l gpio.Level) error {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	p.m.rowLvl[p.i] = l
	p.m.update()
	return nil
}

type matrixCol struct {
	m *Matrix
	i int
}

func (p *matrixCol) String() string                   { return fmt.Sprintf("SIM_COL%d", p.i) }
func (p *matrixCol) Name() string                     { return p.String() }
func (p *matrixCol) Number() int                      { return -1 }
func (p *matrixCol) Function() string                 { return "In" }
func (p *matrixCol) Halt() error                      { return nil }
func (p *matrixCol) Pull() gpio.Pull                  { return gpio.PullUp }
func (p *matrixCol) DefaultPull() gpio.Pull           { return gpio.PullUp }
func (p *matrixCol) In(gpio.Pull, gpio.Edge) error    { return nil }
func (p *matrixCol) WaitForEdge(d time.Duration) bool { return waitEdge(p.m.edges[p.i], d) }
func (p *matrixCol) Read() gpio.Level {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	return p.m.colLvl[p.i]
}
