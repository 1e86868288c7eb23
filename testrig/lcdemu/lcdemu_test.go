package lcdemu

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"periph.io/x/conn/v3/physic"

	"termlink/display"
)

// host drives the emulator by hand, with the default pin map and the
// backlight on.
type host struct {
	t    *testing.T
	b    *Bus
	clk  *Clock
	addr uint16
}

func newHost(t *testing.T, o *Opts) *host {
	t.Helper()
	if o == nil {
		o = &Opts{}
	}
	if o.Clock == nil && o.Now == nil {
		o.Clock = &Clock{}
	}
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	addr := o.Addr
	if addr == 0 {
		addr = 0x27
	}
	return &host{t: t, b: b, clk: o.Clock, addr: addr}
}

func (h *host) sleep(d time.Duration) {
	if h.clk != nil {
		h.clk.Sleep(d)
	}
}

func (h *host) tx(bs ...byte) {
	h.t.Helper()
	if err := h.b.Tx(h.addr, bs, nil); err != nil {
		h.t.Fatal(err)
	}
}

// pulse returns the two port bytes that clock nibble n with RS.
func pulse(rs bool, n byte) []byte {
	v := n<<4 | 0x08
	if rs {
		v |= 0x01
	}
	return []byte{v | 0x04, v}
}

func (h *host) nibble(rs bool, n byte) { h.t.Helper(); h.tx(pulse(rs, n)...) }

func (h *host) cmd(c byte) {
	h.t.Helper()
	h.tx(append(pulse(false, c>>4), pulse(false, c&0x0F)...)...)
	h.sleep(50 * time.Microsecond)
}

func (h *host) data(s string) {
	h.t.Helper()
	var w []byte
	for i := 0; i < len(s); i++ {
		w = append(w, pulse(true, s[i]>>4)...)
		w = append(w, pulse(true, s[i]&0x0F)...)
	}
	h.tx(w...)
}

// init runs the datasheet's 4-bit initialisation with its waits.
func (h *host) init() {
	h.t.Helper()
	h.tx(0x08)
	h.sleep(50 * time.Millisecond)
	for _, n := range []byte{3, 3, 3, 2} {
		h.nibble(false, n)
		h.sleep(5 * time.Millisecond)
	}
	h.cmd(0x28)
	h.cmd(0x08)
	h.cmd(0x01)
	h.sleep(2 * time.Millisecond)
	h.cmd(0x06)
	h.cmd(0x0C)
}

func (h *host) noWarnings() {
	h.t.Helper()
	for _, w := range h.b.Warnings() {
		h.t.Errorf("unexpected warning: %v", w)
	}
}

func (h *host) wantWarning(k Kind) {
	h.t.Helper()
	for _, w := range h.b.Warnings() {
		if w.Kind == k {
			return
		}
	}
	h.t.Errorf("no %v warning in %v", k, h.b.Warnings())
}

func TestInitAndText(t *testing.T) {
	h := newHost(t, &Opts{Timing: true})
	if h.b.State().Ready {
		t.Fatal("ready at power-on")
	}
	h.init()
	st := h.b.State()
	if !st.Ready || !st.FourBit || !st.TwoLines || !st.DisplayOn || !st.Increment || !st.Backlight {
		t.Fatalf("after init: %+v", st)
	}
	h.data("Hi")
	h.cmd(0x80 | 0x40)
	h.data("there")
	want := []string{"Hi              ", "there           "}
	if got := h.b.Text(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Text = %q, want %q", got, want)
	}
	h.noWarnings()
	if r := h.b.Render(); !strings.Contains(r, "│Hi              │") || !strings.Contains(r, "backlight on, display on") {
		t.Errorf("Render =\n%s", r)
	}
}

func TestDataBeforeInit(t *testing.T) {
	h := newHost(t, nil)
	h.tx(0x08)
	h.nibble(true, 0x4) // a data write in 8-bit mode
	h.wantWarning(DataBeforeInit)
	h.b.ResetWarnings()
	h.nibble(false, 0x0) // 0x0F: display control, in 8-bit mode
	h.wantWarning(CommandBeforeInit)
	h.b.ResetWarnings()
	h.nibble(false, 0x2) // straight to 4-bit without the resets
	h.wantWarning(ShortInit)
}

func TestNibbleSync(t *testing.T) {
	h := newHost(t, nil)
	h.init()
	h.nibble(false, 0x8) // a lone high nibble of an instruction
	if !h.b.State().PendingNibble {
		t.Fatal("no pending nibble")
	}
	h.data("A")
	h.wantWarning(NibbleSync)
}

func TestGlitchDesyncs(t *testing.T) {
	h := newHost(t, nil)
	h.init()
	h.b.Glitch()
	if !h.b.State().PendingNibble {
		t.Fatal("Glitch did not leave a pending nibble")
	}
	// The 0x3 0x3 0x3 0x2 sequence resynchronises.
	for _, n := range []byte{3, 3, 3, 2} {
		h.nibble(false, n)
		h.sleep(5 * time.Millisecond)
	}
	h.cmd(0x28)
	h.cmd(0x80)
	h.data("ok")
	if got := h.b.Text()[0]; !strings.HasPrefix(got, "ok") {
		t.Errorf("after resync row 0 = %q", got)
	}
}

func Test20x4Layout(t *testing.T) {
	h := newHost(t, &Opts{Rows: 4, Cols: 20})
	h.init()
	// 80 characters from address 0: 0x00-0x27 then 0x40-0x67.
	var s string
	for _, c := range "ACBD" { // rows 0, 2, 1, 3 in address order
		s += strings.Repeat(string(c), 20)
	}
	h.data(s)
	want := []string{strings.Repeat("A", 20), strings.Repeat("B", 20), strings.Repeat("C", 20), strings.Repeat("D", 20)}
	if got := h.b.Text(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Text = %q", got)
	}
	if ac := h.b.State().AC; ac != 0x00 {
		t.Errorf("AC after 80 writes = %#02x, want 0x00 (wrapped)", ac)
	}
	for i, base := range []byte{0x00, 0x40, 0x14, 0x54} {
		h.cmd(0x80 | base + 19)
		h.data(string(rune('0' + i)))
	}
	for i, row := range h.b.Text() {
		if row[19] != byte('0'+i) {
			t.Errorf("row %d = %q, want %c at col 19", i, row, '0'+i)
		}
	}
	h.noWarnings()
}

func TestAddressWarnings(t *testing.T) {
	h := newHost(t, nil)
	h.init()
	h.cmd(0x80 | 0x10) // exists, but a 16x2 glass does not show it
	h.data("x")
	h.wantWarning(OutsideWindow)
	h.b.ResetWarnings()
	h.cmd(0x80 | 0x30) // does not exist in 2-line mode
	h.wantWarning(BadAddress)
}

func TestDisplayShift(t *testing.T) {
	h := newHost(t, nil)
	h.init()
	h.data("abc")
	h.cmd(0x18) // shift the display left
	if got := h.b.Text()[0]; !strings.HasPrefix(got, "bc ") {
		t.Errorf("shifted row = %q", got)
	}
	h.cmd(0x02) // home undoes the shift
	if got := h.b.Text()[0]; !strings.HasPrefix(got, "abc") {
		t.Errorf("row after home = %q", got)
	}
}

func TestCGRAMMarkersAndROM(t *testing.T) {
	h := newHost(t, &Opts{ROM: display.A02})
	h.init()
	h.cmd(0x40 | 2<<3)
	pattern := "\x1f\x11\x11\x11\x11\x11\x1f\x00"
	h.data(pattern)
	h.cmd(0x80)
	h.data("\x02\x5c\x7e\xe9")
	if got := []rune(h.b.Text()[0])[:4]; string(got) != `②\~é` {
		t.Errorf("row = %q", string(got))
	}
	if g := h.b.CGRAM(2); string(g[:]) != pattern {
		t.Errorf("CGRAM(2) = %x", g)
	}
	if c := h.b.Codes()[0][0]; c != 2 {
		t.Errorf("code = %#x", c)
	}
}

func TestReadBusyFlagAndAddress(t *testing.T) {
	h := newHost(t, nil)
	h.init()
	h.cmd(0x80 | 0x45)
	// R/W high, RS low, data lines high so the controller can pull them.
	read := func() byte {
		var hi, lo [1]byte
		h.tx(0xF8 | 0x02)
		if err := h.b.Tx(0x27, []byte{0xF8 | 0x02 | 0x04}, hi[:]); err != nil {
			t.Fatal(err)
		}
		h.tx(0xF8 | 0x02)
		if err := h.b.Tx(0x27, []byte{0xF8 | 0x02 | 0x04}, lo[:]); err != nil {
			t.Fatal(err)
		}
		h.tx(0xF8 | 0x02)
		return hi[0]&0xF0 | lo[0]>>4
	}
	if v := read(); v != 0x45 {
		t.Errorf("busy flag and address = %#02x, want 0x45", v)
	}
	h.noWarnings()
}

func TestBusyTiming(t *testing.T) {
	h := newHost(t, &Opts{Timing: true})
	h.init()
	h.noWarnings()
	// Clear takes 1.52 ms; writing right after is too early.
	h.tx(append(pulse(false, 0), pulse(false, 1)...)...)
	h.data("x")
	h.wantWarning(Busy)

	// Too soon after power-on.
	h2 := newHost(t, &Opts{Timing: true})
	h2.tx(0x08) // EN low: the port powers up with every line high
	h2.nibble(false, 3)
	h2.wantWarning(Busy)
}

func TestBusSpeedWarning(t *testing.T) {
	h := newHost(t, nil)
	if err := h.b.SetSpeed(400 * physic.KiloHertz); err != nil {
		t.Fatal(err)
	}
	h.wantWarning(BusSpeed)
	if err := h.b.SetSpeed(0); err == nil {
		t.Error("SetSpeed(0) did not fail")
	}
}

func TestSetupWarning(t *testing.T) {
	h := newHost(t, nil)
	h.init()
	h.tx(0x8C, 0x98) // EN falls while D4 and D7 change
	h.wantWarning(Setup)
}

func TestNACKInjectAndClose(t *testing.T) {
	h := newHost(t, &Opts{Addr: 0x3F})
	if err := h.b.Tx(0x27, []byte{0}, nil); err == nil {
		t.Fatal("Tx at the wrong address did not fail")
	}
	h.b.InjectErrors(2, 1)
	for range 2 {
		if err := h.b.Tx(0x3F, []byte{0x0C, 0x08}, nil); !errors.Is(err, ErrInjected) {
			t.Fatalf("Tx = %v, want ErrInjected", err)
		}
	}
	h.tx(0x08)
	st := h.b.Stats()
	if st.NACK != 1 || st.Injected != 2 || st.Tx != 3 || st.WriteBytes != 3 || st.Bytes() != 3 {
		t.Errorf("Stats = %+v", st)
	}
	h.b.ResetStats()
	if h.b.Stats() != (Stats{}) {
		t.Error("ResetStats")
	}
	if !strings.Contains(h.b.String(), "0x3f") {
		t.Errorf("String = %q", h.b.String())
	}
	if err := h.b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.b.Tx(0x3F, []byte{0}, nil); err == nil {
		t.Error("Tx after Close did not fail")
	}
}

func TestTraceFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, &Opts{Trace: f})
	h.init()
	_ = h.b.Tx(0x20, []byte{1, 2}, nil) // NACK, traced too
	h.b.SetTrace(nil)
	h.tx(0x08) // not traced
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err = os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z addr=0x[0-9a-f]{2} w=[0-9a-f]* r=[0-9a-f]* (ok|err=\S+)$`)
	n := 0
	sc := bufio.NewScanner(f)
	var last string
	for sc.Scan() {
		n++
		last = sc.Text()
		if !line.MatchString(last) {
			t.Errorf("trace line %q", last)
		}
	}
	if st := h.b.Stats(); n != st.Tx {
		t.Errorf("%d trace lines, want %d (Tx) ", n, st.Tx)
	}
	if !strings.Contains(last, "addr=0x20 w=0102") || !strings.Contains(last, "err=") {
		t.Errorf("last line %q", last)
	}
}

func TestPowerCycle(t *testing.T) {
	h := newHost(t, nil)
	h.init()
	h.data("abc")
	h.b.PowerCycle()
	st := h.b.State()
	if st.Ready || st.DisplayOn || st.Port != 0xFF {
		t.Errorf("after power cycle: %+v", st)
	}
	if got := h.b.Text()[0]; strings.TrimSpace(got) != "" {
		t.Errorf("glass after power cycle = %q", got)
	}
	h.b.Poke(0, 0, 'Z') // DDRAM still writable behind everyone's back
	if h.b.Codes()[0][0] != 'Z' {
		t.Error("Poke")
	}
}

func TestOneLineMode(t *testing.T) {
	h := newHost(t, &Opts{Rows: 1, Cols: 16})
	h.tx(0x08)
	h.sleep(50 * time.Millisecond)
	for _, n := range []byte{3, 3, 3, 2} {
		h.nibble(false, n)
		h.sleep(5 * time.Millisecond)
	}
	h.cmd(0x20) // 1 line
	h.cmd(0x0C)
	h.cmd(0x01)
	h.sleep(2 * time.Millisecond)
	h.data("one line")
	if got := h.b.Text()[0]; got != "one line        " {
		t.Errorf("row = %q", got)
	}
	h.noWarnings()
}

func TestOptsValidation(t *testing.T) {
	for _, o := range []Opts{
		{Rows: 3, Cols: 16},
		{Rows: 4, Cols: 40},
		{Rows: 2, Cols: 41},
		{Addr: 0x80},
		{Pins: PinMap{RS: 0, RW: 0, EN: 2, BL: 3, D4: 4, D5: 5, D6: 6, D7: 7}},
		{Pins: PinMap{RS: 8, RW: 1, EN: 2, BL: 3, D4: 4, D5: 5, D6: 6, D7: 7}},
	} {
		if _, err := New(&o); err == nil {
			t.Errorf("New(%+v) did not fail", o)
		}
	}
}

func TestCustomPinMap(t *testing.T) {
	// A backpack wired D4-D7 on P0-P3 and RS, RW, EN, BL on P4-P7.
	pins := PinMap{RS: 4, RW: 5, EN: 6, BL: 7, D4: 0, D5: 1, D6: 2, D7: 3}
	b, err := New(&Opts{Pins: pins})
	if err != nil {
		t.Fatal(err)
	}
	p := func(rs bool, n byte) []byte {
		v := n | 0x80
		if rs {
			v |= 0x10
		}
		return []byte{v | 0x40, v}
	}
	var w []byte
	for _, n := range []byte{3, 3, 3, 2} {
		w = append(w, p(false, n)...)
	}
	for _, c := range []byte{0x28, 0x0C, 0x01} {
		w = append(w, p(false, c>>4)...)
		w = append(w, p(false, c&0xF)...)
	}
	w = append(w, p(true, 'Q'>>4)...)
	w = append(w, p(true, 'Q'&0xF)...)
	if err := b.Tx(0x27, w, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.Text()[0]; got[0] != 'Q' || !b.State().Backlight {
		t.Errorf("row = %q, state %+v", got, b.State())
	}
}

func TestConcurrentUse(t *testing.T) {
	h := newHost(t, nil)
	h.init()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				c := byte('A' + i)
				w := append(append(pulse(false, 0x8), pulse(false, byte(i))...), append(pulse(true, c>>4), pulse(true, c&0xF)...)...)
				if err := h.b.Tx(0x27, w, nil); err != nil {
					t.Error(err)
					return
				}
				_ = h.b.Text()
				_ = h.b.Stats()
				_ = h.b.Warnings()
				if j%10 == 0 {
					_ = h.b.Render()
				}
			}
		}()
	}
	wg.Wait()
	if got := h.b.Text()[0][:4]; got != "ABCD" {
		t.Errorf("row = %q", got)
	}
}

func TestClock(t *testing.T) {
	var c Clock
	t0 := c.Now()
	c.Sleep(time.Second)
	c.Sleep(-time.Second)
	if got := c.Now().Sub(t0); got != time.Second {
		t.Errorf("clock advanced %v", got)
	}
	// A transaction advances the shared clock by its wire time: 3 bytes at
	// 100 kHz is 270 µs.
	b, err := New(&Opts{Clock: &c})
	if err != nil {
		t.Fatal(err)
	}
	before := c.Now()
	if err := b.Tx(0x27, []byte{1, 2}, nil); err != nil {
		t.Fatal(err)
	}
	if got := c.Now().Sub(before); got != 270*time.Microsecond {
		t.Errorf("Tx took %v of fake time", got)
	}
}

func TestWarningCap(t *testing.T) {
	h := newHost(t, &Opts{MaxWarnings: 2})
	h.tx(0x08)
	for range 5 {
		h.nibble(true, 1) // data before init
	}
	ws := h.b.Warnings()
	if len(ws) != 3 || !strings.Contains(ws[2].Msg, "3 more") {
		t.Errorf("Warnings = %v", ws)
	}
	if ws[0].String() == "" || Kind(99).String() != "Kind(99)" {
		t.Error("String")
	}
}
