package input

import (
	"strings"
	"testing"
	"time"
)

// fakeClock drives a Matrix: each step advances time and feeds a scan.
type fakeClock struct {
	t   *testing.T
	m   *Matrix
	now time.Time
	evs []Event
}

func newFake(t *testing.T, tm Timing) *fakeClock {
	return &fakeClock{t: t, m: NewMatrix(Keymap4x4(), tm), now: time.Unix(1000, 0)}
}

// scan builds a scan with the given keys down.
func scan(keys string) [][]bool {
	km := Keymap4x4()
	out := make([][]bool, 4)
	for r := range out {
		out[r] = make([]bool, 4)
		for c := range out[r] {
			out[r][c] = strings.ContainsRune(keys, km[r][c])
		}
	}
	return out
}

// hold feeds the same scan every step for d.
func (f *fakeClock) hold(keys string, d, step time.Duration) {
	for end := f.now.Add(d); f.now.Before(end); {
		f.evs = append(f.evs, f.m.Update(f.now, scan(keys))...)
		f.now = f.now.Add(step)
	}
}

func (f *fakeClock) take() []Event {
	evs := f.evs
	f.evs = nil
	return evs
}

func kinds(evs []Event) string {
	var b strings.Builder
	for _, e := range evs {
		switch e.Kind {
		case KeyDown:
			b.WriteString("+" + string(e.Key))
		case KeyUp:
			b.WriteString("-" + string(e.Key))
		case KeyRepeat:
			b.WriteString("r" + string(e.Key))
		case Ghost:
			b.WriteString("G")
		case Stuck:
			b.WriteString("S" + string(e.Key))
		}
	}
	return b.String()
}

const ms = time.Millisecond

func TestMatrixDebounce(t *testing.T) {
	f := newFake(t, Timing{RepeatDelay: -1})
	start := f.now
	// Contact bounce: 1 ms on, 1 ms off, for 8 ms, then closed.
	for i := range 8 {
		if i%2 == 0 {
			f.hold("5", ms, ms)
		} else {
			f.hold("", ms, ms)
		}
	}
	f.hold("5", 50*ms, ms)
	evs := f.take()
	if got := kinds(evs); got != "+5" {
		t.Fatalf("bouncing press gave %q, want one +5", got)
	}
	// Closed for good at 8ms; believed 20ms later.
	if d := evs[0].Time.Sub(start); d != 28*ms {
		t.Errorf("KeyDown after %v, want 28ms", d)
	}
	if evs[0].Row != 1 || evs[0].Col != 1 {
		t.Errorf("row/col %d/%d", evs[0].Row, evs[0].Col)
	}
	// Bouncing release.
	for i := range 6 {
		if i%2 == 0 {
			f.hold("", ms, ms)
		} else {
			f.hold("5", ms, ms)
		}
	}
	f.hold("", 50*ms, ms)
	if got := kinds(f.take()); got != "-5" {
		t.Fatalf("bouncing release gave %q, want one -5", got)
	}
	if f.m.Active() {
		t.Fatal("Active() after release")
	}
}

func TestMatrixGlitchIgnored(t *testing.T) {
	f := newFake(t, Timing{})
	f.hold("5", 19*ms, ms) // shorter than the debounce time
	f.hold("", 100*ms, ms)
	if evs := f.take(); len(evs) != 0 {
		t.Fatalf("glitch gave %v", evs)
	}
	f = newFake(t, Timing{Debounce: 5 * ms})
	f.hold("5", 6*ms, ms)
	if got := kinds(f.take()); got != "+5" {
		t.Fatalf("5ms debounce: %q", got)
	}
}

func TestMatrixRepeat(t *testing.T) {
	f := newFake(t, Timing{})
	start := f.now
	f.hold("8", 1000*ms, ms)
	f.hold("", 100*ms, ms)
	evs := f.take()
	if got := kinds(evs); got != "+8r8r8r8r8r8r8r8r8-8" {
		t.Fatalf("held 1s: %q", got)
	}
	// KeyDown at 20ms; repeats 500ms later, then every 1/15 s (rounded up
	// to the 1ms step of this clock).
	want := []time.Duration{520, 587, 654, 720, 787, 854, 920, 987}
	for i, w := range want {
		if got := evs[i+1].Time.Sub(start); got != w*ms {
			t.Errorf("repeat %d at %v, want %v", i, got, w*ms)
		}
	}
}

func TestMatrixRepeatFollowsNewestKey(t *testing.T) {
	f := newFake(t, Timing{RepeatDelay: 100 * ms, RepeatInterval: 50 * ms})
	f.hold("1", 50*ms, ms)
	f.hold("12", 200*ms, ms) // 2 pressed while 1 held: 2 repeats
	f.hold("1", 300*ms, ms)  // 2 released: no repeat resumes for 1
	got := kinds(f.take())
	if got != "+1+2r2r2-2" {
		t.Fatalf("%q", got)
	}
	f2 := newFake(t, Timing{RepeatDelay: -1})
	f2.hold("1", 2*time.Second, 10*ms)
	if got := kinds(f2.take()); got != "+1" {
		t.Fatalf("repeat disabled: %q", got)
	}
}

func TestMatrixLateUpdateDoesNotBurst(t *testing.T) {
	f := newFake(t, Timing{})
	f.hold("3", 30*ms, ms)
	f.take()
	// The scanner stalls for 2 s, then comes back.
	f.now = f.now.Add(2 * time.Second)
	f.hold("3", 10*ms, ms)
	if got := kinds(f.take()); got != "r3" {
		t.Fatalf("after a stall: %q, want one repeat", got)
	}
}

func TestMatrixStuck(t *testing.T) {
	f := newFake(t, Timing{StuckAfter: 2 * time.Second, RepeatDelay: 500 * ms, RepeatInterval: 500 * ms})
	f.hold("#", 5*time.Second, 10*ms)
	evs := f.take()
	if got := kinds(evs); got != "+#r#r#r#S#" {
		t.Fatalf("held 5s: %q", got)
	}
	st := evs[len(evs)-1]
	if !strings.Contains(st.Detail, "stuck") || st.Row != 3 || st.Col != 2 {
		t.Errorf("stuck event %+v", st)
	}
	if !f.m.OnlyStuck() || !f.m.Active() {
		t.Errorf("OnlyStuck %v Active %v", f.m.OnlyStuck(), f.m.Active())
	}
	f.hold("#5", 100*ms, 10*ms)
	if f.m.OnlyStuck() {
		t.Error("OnlyStuck with a fresh key down")
	}
	f.hold("", 100*ms, 10*ms)
	evs = f.take()
	if got := kinds(evs); got != "+5-5-#" { // same scan: row order
		t.Fatalf("release: %q", got)
	}
	if !strings.Contains(evs[2].Detail, "released after") {
		t.Errorf("release of a stuck key: %+v", evs[2])
	}
}

func TestMatrixGhosting(t *testing.T) {
	f := newFake(t, Timing{RepeatDelay: -1})
	f.hold("12", 50*ms, ms)
	if got := kinds(f.take()); got != "+1+2" {
		t.Fatalf("%q", got)
	}
	// 4 pressed too: on a diode-less matrix 5 reads down as well.
	f.hold("1245", 100*ms, ms)
	evs := f.take()
	if got := kinds(evs); got != "G" {
		t.Fatalf("rectangle gave %q, want a Ghost event only", got)
	}
	if !strings.Contains(evs[0].Detail, "1245") {
		t.Errorf("detail %q", evs[0].Detail)
	}
	// 2 released: the rectangle is gone, 4 is believed.
	f.hold("14", 50*ms, ms)
	if got := kinds(f.take()); got != "-2+4" {
		t.Fatalf("after the ghost cleared: %q", got)
	}
	// A second rectangle reports again.
	f.hold("1245", 50*ms, ms)
	if got := kinds(f.take()); got != "G" {
		t.Fatalf("second rectangle %q", got)
	}
}

func TestMatrixNext(t *testing.T) {
	f := newFake(t, Timing{StuckAfter: -1})
	if _, ok := f.m.Next(); ok || f.m.Active() {
		t.Fatal("idle matrix has a deadline or is active")
	}
	t0 := f.now
	f.m.Update(t0, scan("0"))
	if next, ok := f.m.Next(); !ok || next != t0.Add(20*ms) {
		t.Fatalf("Next = %v, %v; want debounce deadline", next, ok)
	}
	if !f.m.Active() {
		t.Fatal("not active while debouncing a press")
	}
	f.m.Update(t0.Add(20*ms), scan("0"))
	if next, ok := f.m.Next(); !ok || next != t0.Add(520*ms) {
		t.Fatalf("Next = %v; want the repeat deadline", next)
	}
	if d := f.m.Down(); string(d) != "0" {
		t.Fatalf("Down() = %q", string(d))
	}
	if tm := f.m.Timing(); tm.Debounce != 20*ms || tm.RepeatInterval != time.Second/15 {
		t.Fatalf("Timing() = %+v", tm)
	}
}

func TestParseKeymap(t *testing.T) {
	km, err := ParseKeymap([]string{"123", "456", "789", "*0#"})
	if err != nil {
		t.Fatal(err)
	}
	if r, c := km.Size(); r != 4 || c != 3 || km.String() != "123/456/789/*0#" || !km.Has('#') || km.Has('A') {
		t.Fatalf("keymap %v", km)
	}
	for _, tt := range []struct {
		rows []string
		want string
	}{
		{nil, "no rows"},
		{[]string{""}, "no columns"},
		{[]string{"123", "45"}, "row 1 has 2 keys"},
		{[]string{"121"}, `key '1' is at row 0 column 0 and row 0 column 2`},
		{[]string{"1 2"}, "not a printable label"},
		{[]string{"1\xff"}, "not UTF-8"},
	} {
		_, err := ParseKeymap(tt.rows)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseKeymap(%q) = %v, want %q", tt.rows, err, tt.want)
		}
	}
}

func TestEventString(t *testing.T) {
	if s := (Event{Kind: KeyDown, Key: '5'}).String(); s != "KeyDown '5'" {
		t.Error(s)
	}
	if s := (Event{Kind: Ghost, Detail: "x"}).String(); s != "Ghost: x" {
		t.Error(s)
	}
	if s := Kind(99).String(); s != "Kind(99)" {
		t.Error(s)
	}
}
