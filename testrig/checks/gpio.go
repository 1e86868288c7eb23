package checks

import (
	"context"
	"fmt"
	"time"

	"periph.io/x/conn/v3/gpio"
)

// GPIOOptions configure GPIOLoopback.
type GPIOOptions struct {
	// Toggles is the number of level changes timed; 0 means 200.
	Toggles int
	// Timeout is how long one change may take to arrive; 0 means 50ms.
	Timeout time.Duration
}

// GPIOLoopback tests two GPIO pins wired together: out drives, in reads.
// First it tells a wire from no wire with in's pull resistors (pulled up
// while out drives low, pulled down while out drives high: a connected
// input follows out, an open one follows its pull), then it toggles out
// and times each change until in reports the edge: edges seen, and
// latency p50/p99.
func GPIOLoopback(ctx context.Context, out gpio.PinOut, in gpio.PinIn, o GPIOOptions) Result {
	r := newResult("gpio-loopback")
	if o.Toggles <= 0 {
		o.Toggles = 200
	}
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if out == nil || in == nil {
		r.Fail("gpio-loopback needs an output and an input pin")
		return *r
	}
	r.Detailf("OUT %s -> IN %s", out, in)

	// Static: does IN follow OUT against its own pull resistor?
	lowRead, err := staticRead(out, in, gpio.Low, gpio.PullUp, o.Timeout)
	if err != nil {
		r.Fail("%v", err)
		return *r
	}
	highRead, err := staticRead(out, in, gpio.High, gpio.PullDown, o.Timeout)
	if err != nil {
		r.Fail("%v", err)
		return *r
	}
	r.Detailf("OUT low, IN pulled up: IN reads %s; OUT high, IN pulled down: IN reads %s", lowRead, highRead)
	switch {
	case lowRead == gpio.High && highRead == gpio.Low:
		r.Fail("IN %s only follows its own pull resistor, not OUT %s: is OUT wired to IN? (missing wire, or the wrong pins)", in, out)
	case lowRead == gpio.Low && highRead == gpio.Low:
		r.Fail("IN %s stays low whatever OUT %s does: shorted to ground, or OUT cannot drive high", in, out)
	case lowRead == gpio.High && highRead == gpio.High:
		r.Fail("IN %s stays high whatever OUT %s does: shorted to 3.3V, or OUT cannot drive low", in, out)
	}
	if !r.Pass {
		_ = out.Out(gpio.Low)
		return *r
	}

	// Dynamic: toggle and time each edge.
	if err := in.In(gpio.PullDown, gpio.BothEdges); err != nil {
		r.Fail("setting IN %s as an input with edge detection: %v", in, err)
		return *r
	}
	for i := 0; i < 8 && in.WaitForEdge(0); i++ { // stale edges from the static part
	}
	level := in.Read()
	var lat []time.Duration
	edges, followed, missed := 0, 0, 0
	for i := 0; i < o.Toggles && ctx.Err() == nil; i++ {
		level = !level
		start := time.Now()
		if err := out.Out(level); err != nil {
			r.Fail("driving OUT %s %s: %v", out, level, err)
			return *r
		}
		edge := in.WaitForEdge(o.Timeout)
		got := in.Read()
		if !edge {
			// No edge reported: poll for the level, to tell a pin without
			// edge detection from a change that never came.
			for got != level && time.Since(start) < o.Timeout {
				time.Sleep(50 * time.Microsecond)
				got = in.Read()
			}
		}
		d := time.Since(start)
		if edge {
			edges++
		}
		if got == level {
			followed++
			lat = append(lat, d)
		} else {
			missed++
		}
	}
	_ = out.Out(gpio.Low)
	if ctx.Err() != nil {
		r.Fail("interrupted: %v", context.Cause(ctx))
	}
	toggles := followed + missed
	r.Set("toggles", float64(toggles))
	r.Set("followed", float64(followed))
	r.Set("edges_seen", float64(edges))
	if len(lat) > 0 {
		p50, p99 := percentile(lat, 50), percentile(lat, 99)
		r.Set("latency_p50_us", round3(us(p50)))
		r.Set("latency_p99_us", round3(us(p99)))
		r.Set("latency_max_us", round3(us(lat[len(lat)-1])))
		r.Detailf("latency from Out() to IN reporting the change: p50 %v, p99 %v, max %v", p50, p99, lat[len(lat)-1])
	}
	switch {
	case !r.Pass:
	case followed == 0:
		r.Fail("IN %s never followed OUT %s: is OUT wired to IN?", in, out)
	case missed > 0:
		r.Fail("IN missed %d of %d changes of OUT within %v: a loose wire or a slow pin?", missed, toggles, o.Timeout)
	case edges == 0:
		r.Fail("IN follows OUT but reported no edges: edge detection does not work on %s (the keypad needs it)", in)
	case edges < toggles:
		r.Fail("IN follows OUT but reported only %d of %d edges: edge detection is unreliable on %s", edges, toggles, in)
	default:
		r.Summary = fmt.Sprintf("IN followed all %d changes of OUT with an edge each; latency p50 %v, p99 %v",
			toggles, percentile(lat, 50), percentile(lat, 99))
	}
	return *r
}

// staticRead drives out to level with in pulled the other way and reads in
// once it settles (or after timeout).
func staticRead(out gpio.PinOut, in gpio.PinIn, level gpio.Level, pull gpio.Pull, timeout time.Duration) (gpio.Level, error) {
	if err := in.In(pull, gpio.NoEdge); err != nil {
		return false, fmt.Errorf("setting IN %s as an input with %s: %w", in, pull, err)
	}
	if err := out.Out(level); err != nil {
		return false, fmt.Errorf("driving OUT %s %s: %w", out, level, err)
	}
	deadline := time.Now().Add(min(timeout, 5*time.Millisecond))
	got := in.Read()
	for got != level && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond)
		got = in.Read()
	}
	return got, nil
}
