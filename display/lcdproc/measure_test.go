package lcdproc_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"termlink/display"
	"termlink/display/lcdproc"
	"termlink/testrig/lcdd"
)

// TestMeasureLCDd prints the figures of the lcdproc backend against the
// real LCDd: bytes on the socket per changed character, and the time of a
// full 20x4 redraw (until LCDd has processed it: a noop answered behind
// it; and until the curses window shows it). A measurement, not a test:
// TERMLINK_MEASURE=1 runs it.
func TestMeasureLCDd(t *testing.T) {
	if os.Getenv("TERMLINK_MEASURE") != "1" {
		t.Skip("measurement, not a test: set TERMLINK_MEASURE=1 to run it")
	}
	s := startLCDd(t, lcdd.Options{Rows: 4, Cols: 20})
	dev := runDev(t, s, lcdproc.Opts{})
	ctx := ctx30(t)
	f := display.NewFrame(4, 20)
	f.SetLines([]string{"The quick brown fox", "jumps over the lazy", "dog. 0123456789 abc", "status line      ok"})
	if err := dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	// One changed character at a time.
	const n = 200
	b0 := dev.Stats().BytesOut
	for i := range n {
		f.Set(1, i%20, rune('a'+i%26))
		if err := dev.Draw(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	one := float64(dev.Stats().BytesOut-b0-int64(len("noop\n"))) / n
	// A whole screen changed: 80 characters.
	b0 = dev.Stats().BytesOut
	var redraw []time.Duration
	for i := range 50 {
		for r := range 4 {
			f.SetLine(r, strings.Repeat(string(rune('A'+(i+r)%26)), 20))
		}
		start := time.Now()
		if err := dev.Draw(ctx, f); err != nil {
			t.Fatal(err)
		}
		if err := dev.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		redraw = append(redraw, time.Since(start))
	}
	full := float64(dev.Stats().BytesOut-b0-50*int64(len("noop\n"))) / (50 * 80)
	var visible []time.Duration
	for i := range 10 {
		for r := range 4 {
			f.SetLine(r, fmt.Sprintf("%02d row %d %s", i, r, strings.Repeat("#", 10)))
		}
		want := f.Lines()
		start := time.Now()
		if err := dev.Draw(ctx, f); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WaitScreen(ctx, "the frame", screenIs(want...)); err != nil {
			t.Fatal(err)
		}
		visible = append(visible, time.Since(start))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("bytes on the socket per changed character: %.1f (one cell at a time), %.2f (whole 20x4 screen)", one, full)
	t.Logf("full 20x4 redraw until LCDd processed it (noop answered): median %v (n=50, min %v, max %v)",
		median(redraw), slices.Min(redraw), slices.Max(redraw))
	t.Logf("full 20x4 redraw until the curses window shows it: median %v (n=10; LCDd draws at 8 frames/s)", median(visible))
	t.Logf("loadavg %s", strings.TrimSpace(string(load)))
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
