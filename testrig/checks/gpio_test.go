package checks

import (
	"context"
	"strings"
	"testing"
	"time"

	"periph.io/x/conn/v3/gpio"

	"termlink/testrig/fakepin"
)

func TestGPIOLoopback(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(w *fakepin.Wire)
		pass    bool
		summary string
		edges   float64
	}{
		{"wired", func(w *fakepin.Wire) {}, true, "IN followed all 50 changes of OUT with an edge each", 50},
		{"no wire", func(w *fakepin.Wire) { w.Cut() }, false,
			"IN GPIO27 only follows its own pull resistor, not OUT GPIO17: is OUT wired to IN? (missing wire, or the wrong pins)", 0},
		{"shorted to ground", func(w *fakepin.Wire) { w.Tie(gpio.Low) }, false, "IN GPIO27 stays low whatever OUT GPIO17 does: shorted to ground", 0},
		{"shorted to 3.3V", func(w *fakepin.Wire) { w.Tie(gpio.High) }, false, "IN GPIO27 stays high whatever OUT GPIO17 does", 0},
		{"no edge detection", func(w *fakepin.Wire) { w.NoEdges() }, false,
			"IN follows OUT but reported no edges: edge detection does not work on GPIO27", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := fakepin.NewWire("GPIO17", "GPIO27")
			tt.setup(w)
			res := GPIOLoopback(context.Background(), w.Out(), w.In(), GPIOOptions{Toggles: 50, Timeout: 20 * time.Millisecond})
			var b strings.Builder
			res.WriteText(&b)
			t.Logf("\n%s", b.String())
			if res.Pass != tt.pass || !strings.Contains(res.Summary, tt.summary) {
				t.Fatalf("pass %v summary %q; want %v and %q", res.Pass, res.Summary, tt.pass, tt.summary)
			}
			if e, _ := res.Metric("edges_seen"); e != tt.edges {
				t.Errorf("edges_seen %v, want %v", e, tt.edges)
			}
			if tt.pass {
				p50, ok50 := res.Metric("latency_p50_us")
				p99, ok99 := res.Metric("latency_p99_us")
				if !ok50 || !ok99 || p50 <= 0 || p99 < p50 {
					t.Errorf("latency p50 %v p99 %v", p50, p99)
				}
			}
			if w.Driven() != gpio.Low {
				t.Errorf("OUT left high")
			}
		})
	}
}

// A wire that breaks in the middle of the toggling: the changes stop
// arriving.
func TestGPIOLoopbackWireBreaks(t *testing.T) {
	w := fakepin.NewWire("GPIO17", "GPIO27")
	breaker := &breakingIn{WireIn: w.In(), w: w, after: 10}
	res := GPIOLoopback(context.Background(), w.Out(), breaker, GPIOOptions{Toggles: 20, Timeout: 5 * time.Millisecond})
	// Once IN is held low, the changes to high never arrive.
	if res.Pass || !strings.Contains(res.Summary, "of 20 changes of OUT within 5ms: a loose wire") {
		t.Fatalf("pass %v summary %q", res.Pass, res.Summary)
	}
	if f, _ := res.Metric("followed"); f < 10 || f >= 20 {
		t.Errorf("followed %v", f)
	}
}

// breakingIn disconnects the wire after a number of edge waits.
type breakingIn struct {
	*fakepin.WireIn
	w     *fakepin.Wire
	after int
}

func (p *breakingIn) WaitForEdge(timeout time.Duration) bool {
	if p.after == 0 {
		p.w.Cut()
		p.w.Tie(gpio.Low) // held low, whatever OUT does
		for p.WireIn.WaitForEdge(0) {
		}
	}
	p.after--
	return p.WireIn.WaitForEdge(timeout)
}
