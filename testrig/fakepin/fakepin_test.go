package fakepin_test

import (
	"testing"

	"periph.io/x/conn/v3/gpio"

	"termlink/testrig/fakepin"
)

func TestWire(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(w *fakepin.Wire)
		pull  gpio.Pull
		edge  gpio.Edge
		// IN after OUT goes high, then low; edges seen.
		high, low gpio.Level
		edges     int
	}{
		{"wired, both edges", func(*fakepin.Wire) {}, gpio.PullDown, gpio.BothEdges, gpio.High, gpio.Low, 2},
		{"wired, rising only", func(*fakepin.Wire) {}, gpio.PullDown, gpio.RisingEdge, gpio.High, gpio.Low, 1},
		{"wired, no edge asked", func(*fakepin.Wire) {}, gpio.PullDown, gpio.NoEdge, gpio.High, gpio.Low, 0},
		{"cut, pull-up", (*fakepin.Wire).Cut, gpio.PullUp, gpio.BothEdges, gpio.High, gpio.High, 0},
		{"cut, pull-down", (*fakepin.Wire).Cut, gpio.PullDown, gpio.BothEdges, gpio.Low, gpio.Low, 0},
		{"tied high", func(w *fakepin.Wire) { w.Tie(gpio.High) }, gpio.PullDown, gpio.BothEdges, gpio.High, gpio.High, 0},
		{"no edge detection", (*fakepin.Wire).NoEdges, gpio.PullDown, gpio.BothEdges, gpio.High, gpio.Low, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := fakepin.NewWire("OUT", "IN")
			tt.setup(w)
			out, in := w.Out(), w.In()
			if err := in.In(tt.pull, tt.edge); err != nil {
				t.Fatal(err)
			}
			edges := 0
			for _, step := range []struct{ drive, want gpio.Level }{{gpio.High, tt.high}, {gpio.Low, tt.low}} {
				if err := out.Out(step.drive); err != nil {
					t.Fatal(err)
				}
				if got := in.Read(); got != step.want {
					t.Errorf("OUT %s: IN reads %s, want %s", step.drive, got, step.want)
				}
				if w.Driven() != step.drive {
					t.Errorf("Driven = %s, want %s", w.Driven(), step.drive)
				}
				for in.WaitForEdge(0) {
					edges++
				}
			}
			if edges != tt.edges {
				t.Errorf("%d edges, want %d", edges, tt.edges)
			}
		})
	}
}

// In drops the edges queued before it, as the kernel drivers do.
func TestWireInDropsOldEdges(t *testing.T) {
	w := fakepin.NewWire("OUT", "IN")
	if err := w.In().In(gpio.Float, gpio.BothEdges); err != nil {
		t.Fatal(err)
	}
	_ = w.Out().Out(gpio.High)
	if err := w.In().In(gpio.PullNoChange, gpio.BothEdges); err != nil {
		t.Fatal(err)
	}
	if w.In().WaitForEdge(0) {
		t.Error("an edge from before In was reported")
	}
	if p := w.In().Pull(); p != gpio.Float {
		t.Errorf("Pull = %s after PullNoChange, want Float", p)
	}
}

func TestMatrix(t *testing.T) {
	m := fakepin.NewMatrix(2, 3, "K")
	rows, cols := m.Rows(), m.Cols()
	if rows[1].String() != "KROW1" || cols[2].Name() != "KCOL2" {
		t.Errorf("names %s %s", rows[1], cols[2])
	}
	for c, p := range cols {
		if err := p.In(gpio.PullUp, gpio.FallingEdge); err != nil {
			t.Fatal(err)
		}
		if pull, edge := m.ColConfig(c); pull != gpio.PullUp || edge != gpio.FallingEdge {
			t.Errorf("ColConfig(%d) = %s %s", c, pull, edge)
		}
	}
	read := func() (s string) {
		for _, p := range cols {
			s += map[gpio.Level]string{gpio.Low: "L", gpio.High: "H"}[p.Read()]
		}
		return s
	}
	_ = rows[0].Out(gpio.Low)
	if got := read(); got != "HHH" {
		t.Errorf("nothing pressed: %s", got)
	}
	m.Press(0, 1)
	if got := read(); got != "HLH" {
		t.Errorf("key (0,1) with row 0 low: %s", got)
	}
	if !cols[1].WaitForEdge(0) || cols[0].WaitForEdge(0) {
		t.Error("the falling edge went to the wrong column")
	}
	// Ghosting: (0,1), (1,1) and (1,2) pressed join column 2 to row 0.
	m.Press(1, 1)
	m.Press(1, 2)
	if got := read(); got != "HLL" {
		t.Errorf("ghost through row 1: %s", got)
	}
	m.Release(0, 1)
	if got := read(); got != "HHH" {
		t.Errorf("after release: %s", got)
	}
	m.Short(0, true)
	if got := read(); got != "LHH" {
		t.Errorf("column 0 shorted: %s", got)
	}
	if m.Reads() != 15 {
		t.Errorf("Reads = %d, want 15", m.Reads())
	}
	m.FailRow(1)
	if err := rows[1].Out(gpio.Low); err == nil {
		t.Error("a failed row's Out succeeded")
	}
	if m.RowLevel(0) != gpio.Low || m.RowLevel(1) != gpio.High {
		t.Errorf("row levels %s %s", m.RowLevel(0), m.RowLevel(1))
	}
	m.NoEdges()
	m.Short(2, true)
	if cols[2].WaitForEdge(0) || m.Waits() != 3 {
		t.Errorf("an edge without edge detection, or Waits = %d", m.Waits())
	}
}

func TestPort(t *testing.T) {
	var got []byte
	p := fakepin.NewPort(func(v byte) error { got = append(got, v); return nil })
	rs, d7 := p.Pin(0, "RS"), p.Pin(7, "D7")
	_ = rs.Out(gpio.High)
	_ = d7.Out(gpio.High)
	_ = rs.Out(gpio.Low)
	if string(got) != "\x01\x81\x80" {
		t.Errorf("port bytes % x", got)
	}
	if d7.Number() != 7 || d7.Function() != "Out" || d7.PWM(0, 0) == nil {
		t.Errorf("pin %s: %d %s", d7, d7.Number(), d7.Function())
	}
}
