package fakepin

import (
	"errors"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/physic"
)

// named is what every fake pin answers about itself.
type named struct {
	name   string
	number int
}

func (p *named) String() string { return p.name }
func (p *named) Name() string   { return p.name }
func (p *named) Number() int    { return p.number }
func (p *named) Halt() error    { return nil }

// output is the part of gpio.PinOut every fake output shares.
type output struct{ named }

func (p *output) Function() string { return "Out" }
func (p *output) PWM(gpio.Duty, physic.Frequency) error {
	return errors.New("fakepin: no PWM")
}

// sendEdge queues an edge without blocking: a full queue drops it, like a
// kernel whose edge queue overflowed.
func sendEdge(edges chan<- struct{}) {
	select {
	case edges <- struct{}{}:
	default:
	}
}

// wants reports whether a change to l is an edge the input asked for.
func wants(e gpio.Edge, l gpio.Level) bool {
	return e == gpio.BothEdges || (bool(l) && e == gpio.RisingEdge) || (!bool(l) && e == gpio.FallingEdge)
}

// drain drops the edges queued before, as In does on the kernel drivers.
func drain(edges <-chan struct{}) {
	for {
		select {
		case <-edges:
		default:
			return
		}
	}
}

// waitEdge is gpio.PinIn.WaitForEdge on a queue of edges: a negative
// timeout waits for ever, 0 only takes an edge already queued.
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
