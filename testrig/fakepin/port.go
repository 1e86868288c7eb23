package fakepin

import (
	"sync"

	"periph.io/x/conn/v3/gpio"
)

// Port is eight output pins that make one byte, like the port of an I/O
// expander: every Out hands the port's new byte to the write function given
// to NewPort (an emulated bus, for example).
type Port struct {
	mu    sync.Mutex
	v     byte
	write func(byte) error
}

// NewPort returns a port, all lines low, that calls write after each Out.
func NewPort(write func(byte) error) *Port { return &Port{write: write} }

// Pin returns the output on bit (0-7) of the port, named name.
func (p *Port) Pin(bit uint8, name string) gpio.PinOut {
	return &portPin{output: output{named{name, int(bit)}}, p: p, mask: 1 << bit}
}

type portPin struct {
	output
	p    *Port
	mask byte
}

func (b *portPin) Out(l gpio.Level) error {
	p := b.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if l {
		p.v |= b.mask
	} else {
		p.v &^= b.mask
	}
	return p.write(p.v)
}
