package hd44780_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"periph.io/x/conn/v3/physic"

	"termlink/display"
	"termlink/display/hd44780"
	"termlink/testrig/lcdemu"
)

var ctx = context.Background()

// rig is the driver on the emulator, sharing a fake clock.
type rig struct {
	t   testing.TB
	clk *lcdemu.Clock
	bus *lcdemu.Bus
	dev *hd44780.Dev
}

func newRig(t testing.TB, rows, cols int, o *hd44780.Opts) *rig {
	t.Helper()
	clk := &lcdemu.Clock{}
	var rom display.ROM
	if o != nil {
		rom = o.ROM
	}
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: rows, Cols: cols, ROM: rom, Timing: true, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var opts hd44780.Opts
	if o != nil {
		opts = *o
	}
	opts.Rows, opts.Cols = rows, cols
	opts.Sleep, opts.Now = clk.Sleep, clk.Now
	opts.Logger = slog.New(slog.DiscardHandler)
	dev, err := hd44780.New(bus, 0x27, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, clk: clk, bus: bus, dev: dev}
}

func (r *rig) draw(lines ...string) *display.Frame {
	r.t.Helper()
	rows, cols := r.dev.Size()
	f := display.NewFrame(rows, cols)
	f.SetLines(lines)
	if err := r.dev.Draw(ctx, f); err != nil {
		r.t.Fatal(err)
	}
	return f
}

func (r *rig) glassIs(f *display.Frame) {
	r.t.Helper()
	if got, want := r.bus.Text(), f.Lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		r.t.Errorf("glass:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func (r *rig) noWarnings() {
	r.t.Helper()
	for _, w := range r.bus.Warnings() {
		r.t.Errorf("emulator warning: %v", w)
	}
}

func TestInitIsClean(t *testing.T) {
	for _, size := range [][2]int{{2, 16}, {4, 20}, {4, 16}, {2, 40}, {1, 16}, {2, 8}} {
		t.Run(fmt.Sprintf("%dx%d", size[1], size[0]), func(t *testing.T) {
			r := newRig(t, size[0], size[1], nil)
			st := r.bus.State()
			if !st.Ready || !st.FourBit || st.TwoLines != (size[0] > 1) || !st.DisplayOn || !st.Backlight ||
				!st.Increment || st.ShiftOnWrite || st.CursorOn || st.BlinkOn || st.PendingNibble {
				t.Errorf("state after init: %+v", st)
			}
			r.glassIs(display.NewFrame(size[0], size[1]))
			r.noWarnings()
			if s := r.dev.Stats(); s.Inits != 1 || s.Errors != 0 || s.Tx != r.bus.Stats().Tx || s.Bytes != r.bus.Stats().WriteBytes {
				t.Errorf("driver stats %+v, emulator %+v", s, r.bus.Stats())
			}
		})
	}
}

func TestTextAtRowsAndCols(t *testing.T) {
	tests := []struct {
		rows, cols int
		lines      []string
	}{
		{2, 16, []string{"Hello, world!", "  second line  x"}},
		{4, 20, []string{"row zero", "row one        right", "row two", "                   3"}},
		{4, 16, []string{"a", "b", "c", "d"}},
		{2, 40, []string{strings.Repeat("x", 40), "y"}},
		{1, 16, []string{"just one line"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%dx%d", tt.cols, tt.rows), func(t *testing.T) {
			r := newRig(t, tt.rows, tt.cols, nil)
			f := r.draw(tt.lines...)
			r.glassIs(f)
			// Single cells at the corners of every row.
			for row := range tt.rows {
				f.Set(row, 0, rune('0'+row))
				f.Set(row, tt.cols-1, rune('A'+row))
			}
			if err := r.dev.Draw(ctx, f); err != nil {
				t.Fatal(err)
			}
			r.glassIs(f)
			r.noWarnings()
		})
	}
}

func TestOnlyChangesAreSent(t *testing.T) {
	r := newRig(t, 4, 20, nil)
	f := r.draw("The quick brown fox", "jumps over", "the lazy dog", "0123456789")
	r.bus.ResetStats()

	// The same frame again: nothing to send.
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 0 {
		t.Fatalf("unchanged frame: %+v", s)
	}

	// One cell: one transaction, address + character = 8 bytes.
	f.Set(1, 5, '!')
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 1 || s.WriteBytes != 8 {
		t.Fatalf("one changed cell: %+v, want 1 Tx of 8 bytes", s)
	}
	// The next cell: the address counter is already there, 4 bytes.
	r.bus.ResetStats()
	f.Set(1, 6, '?')
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 1 || s.WriteBytes != 4 {
		t.Fatalf("next cell: %+v, want 1 Tx of 4 bytes", s)
	}
	// Two cells one apart on a row: joined into one run of 3.
	r.bus.ResetStats()
	f.Set(2, 0, 'T')
	f.Set(2, 2, 'E')
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 1 || s.WriteBytes != 4+3*4 {
		t.Fatalf("gap of one: %+v", s)
	}
	// Far apart: two runs.
	r.bus.ResetStats()
	f.Set(3, 0, 'x')
	f.Set(3, 10, 'y')
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 2 || s.WriteBytes != 2*8 {
		t.Fatalf("two runs: %+v", s)
	}
	// Every cell: rows 0 and 2, then 1 and 3, run on in DDRAM: 2 runs.
	r.bus.ResetStats()
	f.Fill('#')
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if s := r.bus.Stats(); s.Tx != 2 || s.WriteBytes > 2*4+80*4 {
		t.Fatalf("full screen: %+v", s)
	}
	r.glassIs(f)
	r.noWarnings()
}

func TestBacklight(t *testing.T) {
	r := newRig(t, 2, 16, &hd44780.Opts{BacklightOff: true})
	if r.bus.State().Backlight {
		t.Fatal("backlight on with BacklightOff")
	}
	f := r.draw("lit?")
	if err := r.dev.Backlight(255); err != nil {
		t.Fatal(err)
	}
	if !r.bus.State().Backlight || !strings.Contains(r.bus.Render(), "backlight on") {
		t.Error("backlight not on")
	}
	// Later writes keep it on.
	f.SetLine(1, "yes")
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if !r.bus.State().Backlight {
		t.Error("backlight dropped by a write")
	}
	if err := r.dev.Backlight(0); err != nil {
		t.Fatal(err)
	}
	if r.bus.State().Backlight || !strings.Contains(r.bus.Render(), "backlight off") {
		t.Error("backlight not off")
	}
	r.glassIs(f)
	r.noWarnings()
}

func TestRecoveryAfterI2CErrors(t *testing.T) {
	r := newRig(t, 4, 20, nil)
	r.draw("before", "the", "error", "!")

	// One transaction fails after half a nibble reached the port: the retry
	// re-initialises and redraws, Draw succeeds.
	r.bus.InjectErrors(1, 3)
	f := r.draw("after", "one", "glitch", "ok")
	r.glassIs(f)
	if n := r.dev.Stats().Inits; n != 2 {
		t.Errorf("inits = %d, want 2", n)
	}

	// The bus stays down: Draw fails, and the next frame after it comes back
	// is right.
	r.bus.InjectErrors(20, 5)
	f.SetLine(0, "while down")
	if err := r.dev.Draw(ctx, f); err == nil {
		t.Fatal("Draw on a dead bus did not fail")
	} else if !errors.Is(err, lcdemu.ErrInjected) {
		t.Errorf("error %v does not wrap the bus error", err)
	}
	r.bus.InjectErrors(0, 0)
	f.SetLine(3, "back up")
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	r.glassIs(f)
	if st := r.bus.State(); !st.Ready || st.PendingNibble || !st.DisplayOn {
		t.Errorf("state after recovery: %+v", st)
	}
	if s := r.dev.Stats(); s.Errors == 0 {
		t.Errorf("stats: %+v", s)
	}
}

func TestRefreshHealsGlass(t *testing.T) {
	corruptions := []struct {
		name string
		do   func(*lcdemu.Bus)
	}{
		{"poked cell", func(b *lcdemu.Bus) { b.Poke(1, 3, 'X') }},
		{"stray EN pulse", func(b *lcdemu.Bus) { b.Glitch() }},
		{"power cycle", func(b *lcdemu.Bus) { b.PowerCycle() }},
	}
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, 2, 16, &hd44780.Opts{Refresh: time.Minute})
			f := r.draw("steady text", "second row")
			c.do(r.bus)
			r.clk.Sleep(30 * time.Second)
			f.Set(0, 15, '*') // a small change before the refresh is due
			if err := r.dev.Draw(ctx, f); err != nil {
				t.Fatal(err)
			}
			r.clk.Sleep(31 * time.Second)
			if err := r.dev.Draw(ctx, f); err != nil {
				t.Fatal(err)
			}
			r.glassIs(f)
			if n := r.dev.Stats().Inits; n != 2 {
				t.Errorf("inits = %d, want 2", n)
			}
		})
	}
}

func TestResetHeals(t *testing.T) {
	r := newRig(t, 2, 16, &hd44780.Opts{Refresh: -1})
	f := r.draw("abc")
	r.bus.PowerCycle()
	r.clk.Sleep(time.Hour)
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if r.bus.State().DisplayOn {
		t.Fatal("refresh ran though disabled")
	}
	if err := r.dev.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	r.glassIs(f)
}

func TestRunRefreshesIdleDisplay(t *testing.T) {
	bus, err := lcdemu.New(&lcdemu.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := hd44780.New(bus, 0x27, &hd44780.Opts{Refresh: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f := display.NewFrame(2, 16)
	f.SetLine(0, "idle")
	if err := dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- dev.Run(runCtx) }()
	bus.PowerCycle()
	deadline := time.Now().Add(5 * time.Second)
	for bus.Text()[0] != "idle            " {
		if time.Now().After(deadline) {
			t.Fatalf("glass not healed: %q", bus.Text())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v", err)
	}
}

func TestDrawHonoursContext(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	f := display.NewFrame(2, 16)
	f.SetLine(0, "never")
	if err := r.dev.Draw(cctx, f); !errors.Is(err, context.Canceled) {
		t.Fatalf("Draw = %v", err)
	}
	// Nothing is lost: the next Draw shows the frame.
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	r.glassIs(f)
}

func TestLayoutPagesOnGlass(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	pages := display.Layout(r.dev, "Dès que possible — “vraiment” ! Merci beaucoup…", 2, 16)
	if len(pages) != 2 {
		t.Fatalf("pages = %q", pages)
	}
	f := display.NewFrame(2, 16)
	for _, p := range pages {
		f.SetLines(p)
		if err := r.dev.Draw(ctx, f); err != nil {
			t.Fatal(err)
		}
		r.glassIs(f)
	}
	if got := r.bus.Text(); got[0] != "Merci           " || got[1] != "beaucoup...     " {
		t.Errorf("last page = %q", got)
	}
}

func TestNewValidation(t *testing.T) {
	bus, err := lcdemu.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	quiet := func(o hd44780.Opts) *hd44780.Opts {
		o.Sleep = func(time.Duration) {}
		o.Logger = slog.New(slog.DiscardHandler)
		return &o
	}
	tests := []struct {
		name string
		addr uint16
		opts *hd44780.Opts
	}{
		{"address below", 0x1F, nil},
		{"address between", 0x30, nil},
		{"address above", 0x40, nil},
		{"no device there", 0x20, quiet(hd44780.Opts{})},
		{"3 rows", 0x27, quiet(hd44780.Opts{Rows: 3, Cols: 16})},
		{"41 columns", 0x27, quiet(hd44780.Opts{Rows: 2, Cols: 41})},
		{"40x4", 0x27, quiet(hd44780.Opts{Rows: 4, Cols: 40})},
		{"bad ROM", 0x27, quiet(hd44780.Opts{ROM: 7})},
		{"pin used twice", 0x27, quiet(hd44780.Opts{Pins: hd44780.PinMap{RS: 0, RW: 1, EN: 1, BL: 3, D4: 4, D5: 5, D6: 6, D7: 7}})},
		{"pin out of range", 0x27, quiet(hd44780.Opts{Pins: hd44780.PinMap{RS: 8, RW: 1, EN: 2, BL: 3, D4: 4, D5: 5, D6: 6, D7: 7}})},
	}
	for _, tt := range tests {
		if _, err := hd44780.New(bus, tt.addr, tt.opts); err == nil {
			t.Errorf("%s: New did not fail", tt.name)
		}
	}
	if _, err := hd44780.New(nil, 0x27, nil); err == nil {
		t.Error("nil bus accepted")
	}
	// PCF8574A addresses are valid.
	busA, err := lcdemu.New(&lcdemu.Opts{Addr: 0x3F})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hd44780.New(busA, 0x3F, quiet(hd44780.Opts{})); err != nil {
		t.Errorf("0x3F: %v", err)
	}
}

func TestBusTooFastIsCaught(t *testing.T) {
	// At 1 MHz two bytes take 18 µs, less than the 37 µs an instruction
	// needs: the emulator's timing model reports it.
	r := newRig(t, 2, 16, nil)
	if err := r.bus.SetSpeed(physic.MegaHertz); err != nil {
		t.Fatal(err)
	}
	r.bus.ResetWarnings()
	r.draw("fast")
	busy := 0
	for _, w := range r.bus.Warnings() {
		if w.Kind == lcdemu.Busy {
			busy++
		}
	}
	if busy == 0 {
		t.Error("no busy warnings at 1 MHz")
	}
}

func TestConcurrentUse(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := display.NewFrame(2, 16)
			for j := range 20 {
				f.SetLine(i%2, fmt.Sprintf("g%d %d", i, j))
				if err := r.dev.Draw(ctx, f); err != nil {
					t.Error(err)
					return
				}
				if _, err := r.dev.WriteString("."); err != nil {
					t.Error(err)
					return
				}
				_ = r.dev.Stats()
				_ = r.dev.Shows('x')
			}
		}()
	}
	wg.Wait()
	r.glassIs(r.dev.Frame())
	r.noWarnings()
}

func TestCommandErrorReinitialises(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	f := r.draw("still here")
	// The display-off instruction is lost on the wire: the driver
	// re-initialises, which applies the display state and redraws.
	r.bus.InjectErrors(1, 1)
	if err := r.dev.Display(false); err != nil {
		t.Fatal(err)
	}
	if st := r.bus.State(); st.DisplayOn || !st.Ready || st.PendingNibble {
		t.Errorf("state: %+v", st)
	}
	if err := r.dev.Display(true); err != nil {
		t.Fatal(err)
	}
	r.glassIs(f)
	// A failed backlight switch is applied by the next re-initialisation.
	r.bus.InjectErrors(1, 0)
	if err := r.dev.Backlight(0); err == nil {
		t.Fatal("Backlight on a failing bus did not fail")
	}
	if err := r.dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if r.bus.State().Backlight {
		t.Error("backlight on after re-initialisation")
	}
	r.glassIs(f)
}
