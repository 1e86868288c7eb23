package fakepin

import (
	"sync"
	"time"

	"periph.io/x/conn/v3/gpio"
)

// Wire is an output pin and an input pin joined by a wire. The wire can be
// cut (the input then follows its own pull resistor), the input tied to a
// rail (a short), and its edge detection taken away.
type Wire struct {
	mu      sync.Mutex
	cut     bool
	tied    *gpio.Level
	noEdges bool
	out     gpio.Level // what OUT drives
	in      gpio.Level // what IN reads
	pull    gpio.Pull
	edge    gpio.Edge
	edges   chan struct{}
	o       *WireOut
	i       *WireIn
}

// NewWire returns a wire from an output named outName to an input named
// inName; both start low.
func NewWire(outName, inName string) *Wire {
	w := &Wire{edges: make(chan struct{}, 64)}
	w.o = &WireOut{output: output{named{outName, -1}}, w: w}
	w.i = &WireIn{named: named{inName, -1}, w: w}
	return w
}

// Out is the output end.
func (w *Wire) Out() *WireOut { return w.o }

// In is the input end.
func (w *Wire) In() *WireIn { return w.i }

// Cut removes the wire: IN reads high with a pull-up, low otherwise.
func (w *Wire) Cut() { w.set(func() { w.cut = true }) }

// Tie shorts IN to the rail at level l, whatever OUT drives.
func (w *Wire) Tie(l gpio.Level) { w.set(func() { w.tied = &l }) }

// NoEdges takes IN's edge detection away: WaitForEdge returns false at
// once.
func (w *Wire) NoEdges() { w.set(func() { w.noEdges = true }) }

// Driven returns the level OUT drives.
func (w *Wire) Driven() gpio.Level {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out
}

func (w *Wire) set(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f()
	w.update()
}

// update recomputes IN and queues an edge if it changed. w.mu is held.
func (w *Wire) update() {
	l := gpio.Low
	switch {
	case w.tied != nil:
		l = *w.tied
	case !w.cut:
		l = w.out
	case w.pull == gpio.PullUp:
		l = gpio.High
	}
	if l == w.in {
		return
	}
	w.in = l
	if !w.noEdges && wants(w.edge, l) {
		sendEdge(w.edges)
	}
}

// WireOut is a Wire's output end.
type WireOut struct {
	output
	w *Wire
}

// Out drives the wire.
func (p *WireOut) Out(l gpio.Level) error {
	p.w.set(func() { p.w.out = l })
	return nil
}

// WireIn is a Wire's input end.
type WireIn struct {
	named
	w *Wire
}

func (p *WireIn) Function() string       { return "In" }
func (p *WireIn) DefaultPull() gpio.Pull { return gpio.Float }

func (p *WireIn) Pull() gpio.Pull {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	return p.w.pull
}

// In sets the pull resistor and the edges to report, and drops the edges
// queued before.
func (p *WireIn) In(pull gpio.Pull, edge gpio.Edge) error {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if pull != gpio.PullNoChange {
		w.pull = pull
	}
	w.edge = edge
	w.update()
	drain(w.edges)
	return nil
}

func (p *WireIn) Read() gpio.Level {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	return p.w.in
}

func (p *WireIn) WaitForEdge(timeout time.Duration) bool {
	p.w.mu.Lock()
	none := p.w.noEdges
	p.w.mu.Unlock()
	if none {
		return false
	}
	return waitEdge(p.w.edges, timeout)
}

var (
	_ gpio.PinOut = (*WireOut)(nil)
	_ gpio.PinIn  = (*WireIn)(nil)
)
