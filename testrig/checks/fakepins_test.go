package checks

import (
	"errors"
	"sync"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/conn/v3/pin"
)

// Fake GPIO pins for the GPIO and keypad checks. (periph's gpiotest needs
// github.com/jonboulle/clockwork, which is not in go.mod.) Edges are
// delivered through a channel that WaitForEdge reads, as gpiotest does.

// fakeNet is an output pin and an input pin, wired together or not.
type fakeNet struct {
	mu        sync.Mutex
	connected bool        // a wire from OUT to IN
	tied      *gpio.Level // IN shorted to a rail
	noEdges   bool        // IN has no edge detection: WaitForEdge returns false at once
	outLevel  gpio.Level
	pull      gpio.Pull
	edge      gpio.Edge
	inLevel   gpio.Level
	edges     chan struct{}
}

func newFakeNet(connected bool) (*fakeNet, *fakeOut, *fakeIn) {
	n := &fakeNet{connected: connected, edges: make(chan struct{}, 64)}
	return n, &fakeOut{n: n}, &fakeIn{n: n}
}

// update recomputes IN and sends an edge if it changed. n.mu is held.
func (n *fakeNet) update() {
	l := gpio.Low
	switch {
	case n.tied != nil:
		l = *n.tied
	case n.connected:
		l = n.outLevel
	case n.pull == gpio.PullUp:
		l = gpio.High
	}
	if l == n.inLevel {
		return
	}
	n.inLevel = l
	if n.noEdges {
		return
	}
	if n.edge == gpio.BothEdges || (l && n.edge == gpio.RisingEdge) || (!l && n.edge == gpio.FallingEdge) {
		select {
		case n.edges <- struct{}{}:
		default:
		}
	}
}

type fakeOut struct{ n *fakeNet }

func (p *fakeOut) String() string                        { return "GPIO17" }
func (p *fakeOut) Name() string                          { return "GPIO17" }
func (p *fakeOut) Number() int                           { return 17 }
func (p *fakeOut) Function() string                      { return "Out" }
func (p *fakeOut) Halt() error                           { return nil }
func (p *fakeOut) PWM(gpio.Duty, physic.Frequency) error { return errors.New("fake: no PWM") }
func (p *fakeOut) Out(l gpio.Level) error {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	p.n.outLevel = l
	p.n.update()
	return nil
}

type fakeIn struct{ n *fakeNet }

func (p *fakeIn) String() string         { return "GPIO27" }
func (p *fakeIn) Name() string           { return "GPIO27" }
func (p *fakeIn) Number() int            { return 27 }
func (p *fakeIn) Function() string       { return "In" }
func (p *fakeIn) Halt() error            { return nil }
func (p *fakeIn) DefaultPull() gpio.Pull { return gpio.PullDown }
func (p *fakeIn) Pull() gpio.Pull {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	return p.n.pull
}

func (p *fakeIn) In(pull gpio.Pull, edge gpio.Edge) error {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	if pull != gpio.PullNoChange {
		p.n.pull = pull
	}
	p.n.edge = edge
	p.n.update()
	// Like the kernel drivers, In tries to drop edges accumulated before.
	for {
		select {
		case <-p.n.edges:
			continue
		default:
		}
		return nil
	}
}

func (p *fakeIn) Read() gpio.Level {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	return p.n.inLevel
}

func (p *fakeIn) WaitForEdge(timeout time.Duration) bool {
	return waitEdge(p.n.edges, timeout, func() bool {
		p.n.mu.Lock()
		defer p.n.mu.Unlock()
		return p.n.noEdges
	}())
}

func waitEdge(edges <-chan struct{}, timeout time.Duration, none bool) bool {
	if none {
		return false
	}
	if timeout < 0 {
		<-edges
		return true
	}
	if timeout == 0 {
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

var (
	_ gpio.PinOut = (*fakeOut)(nil)
	_ gpio.PinIn  = (*fakeIn)(nil)
	_ pin.Pin     = (*fakeIn)(nil)
)
