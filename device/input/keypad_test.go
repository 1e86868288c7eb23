package input

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"periph.io/x/conn/v3/gpio"

	"termlink/internal/testwait"
	"termlink/testrig/fakepin"
)

type keypadRig struct {
	t      *testing.T
	m      *fakepin.Matrix
	k      *Keypad
	cancel context.CancelFunc
	done   chan error
}

// fastOpts scans every millisecond with a 10ms debounce and no repeat.
func fastOpts(km Keymap) Opts {
	return Opts{
		Keymap:       km,
		Timing:       Timing{Debounce: 10 * ms, RepeatDelay: -1, StuckAfter: -1},
		ScanInterval: ms,
		StuckPoll:    50 * ms,
		Settle:       -1,
		EdgeTimeout:  50 * ms,
		Logger:       slog.New(slog.DiscardHandler),
	}
}

func startKeypad(t *testing.T, m *fakepin.Matrix, o Opts) *keypadRig {
	t.Helper()
	k, err := New(m.Rows(), m.Cols(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rig := &keypadRig{t: t, m: m, k: k, cancel: cancel, done: make(chan error, 1)}
	go func() { rig.done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rig.done:
		case <-time.After(testwait.Deadline):
			t.Error("Run did not stop")
		}
	})
	// Wait until Run has configured the pins.
	waitFor(t, "pins configured", func() bool {
		_, edge := m.ColConfig(len(m.Cols()) - 1)
		return edge == gpio.FallingEdge && m.RowLevel(len(m.Rows())-1) == gpio.Low
	})
	return rig
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, what, cond)
}

func (r *keypadRig) next() Event {
	r.t.Helper()
	select {
	case ev, ok := <-r.k.Events():
		if !ok {
			r.t.Fatal("events closed")
		}
		return ev
	case <-time.After(testwait.Deadline):
		r.t.Fatal("no keypad event")
	}
	return Event{}
}

func (r *keypadRig) expect(want string) []Event {
	r.t.Helper()
	var evs []Event
	for len(kinds(evs)) < len(want) {
		evs = append(evs, r.next())
	}
	if got := kinds(evs); got != want {
		r.t.Fatalf("events %q, want %q (%v)", got, want, evs)
	}
	return evs
}

func (r *keypadRig) quiet(d time.Duration) {
	r.t.Helper()
	select {
	case ev := <-r.k.Events():
		r.t.Fatalf("unexpected event %v", ev)
	case <-time.After(d):
	}
}

func TestKeypadDecodesEveryKey(t *testing.T) {
	for _, tt := range []struct {
		name string
		km   Keymap
	}{{"4x4", Keymap4x4()}, {"3x4", Keymap3x4()}} {
		t.Run(tt.name, func(t *testing.T) {
			nr, nc := tt.km.Size()
			m := fakepin.NewMatrix(nr, nc, "")
			rig := startKeypad(t, m, fastOpts(tt.km))
			for r := range nr {
				for c := range nc {
					m.Press(r, c)
					ev := rig.next()
					if ev.Kind != KeyDown || ev.Key != tt.km[r][c] || ev.Row != r || ev.Col != c {
						t.Fatalf("press (%d,%d): %+v, want KeyDown %q", r, c, ev, tt.km[r][c])
					}
					m.Release(r, c)
					if ev := rig.next(); ev.Kind != KeyUp || ev.Key != tt.km[r][c] {
						t.Fatalf("release (%d,%d): %+v", r, c, ev)
					}
				}
			}
			for c, col := range m.Cols() {
				if pull, edge := m.ColConfig(c); pull != gpio.PullUp || edge != gpio.FallingEdge {
					t.Errorf("%s configured %s %s, want PullUp FallingEdge", col, pull, edge)
				}
			}
		})
	}
}

// Idle, the keypad sleeps in WaitForEdge: no column reads at all.
func TestKeypadIdleDoesNotPoll(t *testing.T) { synctest.Test(t, testKeypadIdleDoesNotPoll) }

func testKeypadIdleDoesNotPoll(t *testing.T) {
	m := fakepin.NewMatrix(4, 4, "")
	rig := startKeypad(t, m, fastOpts(Keymap4x4()))
	m.Press(0, 0)
	rig.expect("+1")
	m.Release(0, 0)
	rig.expect("-1")
	time.Sleep(20 * ms) // let the scanner go idle
	reads, waits := m.Reads(), m.Waits()
	time.Sleep(300 * ms)
	if n := m.Reads() - reads; n != 0 {
		t.Errorf("%d column reads while idle for 300ms", n)
	}
	// Four watchers with a 50ms edge timeout: about 24 waits, not thousands.
	if n := m.Waits() - waits; n > 60 {
		t.Errorf("%d WaitForEdge calls in 300ms", n)
	}
	for i, r := range m.Rows() {
		if l := m.RowLevel(i); l != gpio.Low {
			t.Errorf("%s is %s while idle, want Low", r, l)
		}
	}
	// And it still wakes up.
	m.Press(2, 1)
	rig.expect("+8")
}

func TestKeypadDebouncesBouncingContact(t *testing.T) {
	synctest.Test(t, testKeypadDebouncesBouncingContact)
}

func testKeypadDebouncesBouncingContact(t *testing.T) {
	m := fakepin.NewMatrix(4, 4, "")
	rig := startKeypad(t, m, fastOpts(Keymap4x4()))
	m.Chatter(1, 1, 9)
	m.Press(1, 1)
	rig.expect("+5")
	rig.quiet(50 * ms)
	// Bouncing again while held (a wobbly finger), then released.
	m.Chatter(1, 1, 8)
	rig.quiet(50 * ms)
	m.Release(1, 1)
	rig.expect("-5")
	rig.quiet(50 * ms)
}

func TestKeypadAutoRepeat(t *testing.T) { synctest.Test(t, testKeypadAutoRepeat) }

func testKeypadAutoRepeat(t *testing.T) {
	m := fakepin.NewMatrix(4, 4, "")
	o := fastOpts(Keymap4x4())
	o.RepeatDelay, o.RepeatInterval = 60*ms, 20*ms
	rig := startKeypad(t, m, o)
	m.Press(3, 3)
	first := rig.expect("+D")[0]
	evs := rig.expect("rDrDrD")
	if d := evs[0].Time.Sub(first.Time); d < 60*ms {
		t.Errorf("first repeat after %v, want >= 60ms", d)
	}
	m.Release(3, 3)
	for ev := rig.next(); ev.Kind != KeyUp; ev = rig.next() {
		if ev.Kind != KeyRepeat {
			t.Fatalf("unexpected %v", ev)
		}
	}
}

// The tests that press keys run in synctest bubbles: the test's own
// steps take no time, so what they assert of the keypad's timing (the
// debounce, the repeat, StuckAfter, which of two changes a scan sees
// first) does not depend on how fast the machine is. Under qemu at load
// 40 it did: a key held 168 ms by the slow test was rightly reported
// stuck (TestKeypadStuckKey), and a release and a press debounced in
// the other order (TestKeypadGhosting: "+4-2").
func TestKeypadStuckKey(t *testing.T) { synctest.Test(t, testKeypadStuckKey) }

func testKeypadStuckKey(t *testing.T) {
	m := fakepin.NewMatrix(4, 4, "")
	o := fastOpts(Keymap4x4())
	o.StuckAfter = 100 * ms
	rig := startKeypad(t, m, o)
	m.Press(3, 0)
	rig.expect("+*")
	ev := rig.next()
	if ev.Kind != Stuck || ev.Key != '*' {
		t.Fatalf("event %v, want Stuck '*'", ev)
	}
	// With only a stuck key down, scanning slows to StuckPoll (50ms).
	time.Sleep(20 * ms)
	reads := m.Reads()
	time.Sleep(300 * ms)
	if n := m.Reads() - reads; n > 8*4*4 {
		t.Errorf("%d column reads in 300ms with a stuck key; want slow polling", n)
	}
	// Other keys still work, and the stuck key's release is seen.
	m.Press(0, 1)
	rig.expect("+2")
	m.Release(0, 1)
	rig.expect("-2")
	m.Release(3, 0)
	if ev := rig.expect("-*")[0]; !strings.Contains(ev.Detail, "released after") {
		t.Errorf("release detail %q", ev.Detail)
	}
}

func TestKeypadShortedColumn(t *testing.T) { synctest.Test(t, testKeypadShortedColumn) }

func testKeypadShortedColumn(t *testing.T) {
	m := fakepin.NewMatrix(4, 4, "")
	m.Short(2, true)
	rig := startKeypad(t, m, fastOpts(Keymap4x4()))
	ev := rig.next()
	if ev.Kind != Stuck || ev.Row != -1 || ev.Col != 2 || !strings.Contains(ev.Detail, "COL2") {
		t.Fatalf("event %+v, want Stuck on column 2", ev)
	}
	// No phantom presses of the whole column, and the rest still works.
	m.Press(1, 0)
	rig.expect("+4")
	m.Release(1, 0)
	rig.expect("-4")
	rig.quiet(100 * ms)
	// Short removed: column 2 works again.
	m.Short(2, false)
	time.Sleep(100 * ms)
	m.Press(0, 2)
	rig.expect("+3")
}

func TestKeypadGhosting(t *testing.T) { synctest.Test(t, testKeypadGhosting) }

func testKeypadGhosting(t *testing.T) {
	m := fakepin.NewMatrix(4, 4, "")
	rig := startKeypad(t, m, fastOpts(Keymap4x4()))
	m.Press(0, 0)
	rig.expect("+1")
	m.Press(0, 1)
	rig.expect("+2")
	// A third key makes a rectangle: 5 reads down too (no diodes).
	m.Press(1, 0)
	ev := rig.next()
	if ev.Kind != Ghost {
		t.Fatalf("event %v, want Ghost", ev)
	}
	rig.quiet(60 * ms) // neither 4 nor the phantom 5 is reported
	// Between two scans: one scan then sees both the release of 2 and
	// 4 no longer hidden by the rectangle (a release during a scan made
	// the order "+4-2" now and then under qemu).
	synctest.Wait()
	m.Release(0, 1)
	evs := rig.expect("-2+4")
	_ = evs
	m.Release(0, 0)
	m.Release(1, 0)
	rig.expect("-1-4")
}

func TestKeypadWithoutEdgeDetection(t *testing.T) { synctest.Test(t, testKeypadWithoutEdgeDetection) }

func testKeypadWithoutEdgeDetection(t *testing.T) {
	m := fakepin.NewMatrix(4, 4, "")
	m.NoEdges()
	rig := startKeypad(t, m, fastOpts(Keymap4x4()))
	m.Press(2, 2)
	rig.expect("+9")
	m.Release(2, 2)
	rig.expect("-9")
}

func TestKeypadStops(t *testing.T) {
	m := fakepin.NewMatrix(4, 4, "")
	k, err := New(m.Rows(), m.Cols(), fastOpts(Keymap4x4()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	m.Press(0, 0) // stop while scanning
	<-k.Events()
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(testwait.Deadline):
		t.Fatal("Run did not stop")
	}
	for range k.Events() {
	}
	if err := k.Run(context.Background()); err == nil {
		t.Fatal("second Run succeeded")
	}
	if s := k.String(); s != "keypad 4x4 (123A/456B/789C/*0#D)" {
		t.Errorf("String() = %q", s)
	}
}

func TestKeypadPinError(t *testing.T) {
	m := fakepin.NewMatrix(4, 4, "")
	m.FailRow(2)
	k, err := New(m.Rows(), m.Cols(), fastOpts(Keymap4x4()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = k.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "row 2 (ROW2)") || !strings.Contains(err.Error(), "line busy") {
		t.Fatalf("Run = %v, want the row named", err)
	}
}

func TestNewKeypadErrors(t *testing.T) {
	m := fakepin.NewMatrix(4, 4, "")
	for _, tt := range []struct {
		name string
		rows []gpio.PinOut
		cols []gpio.PinIn
		km   Keymap
		want string
	}{
		{"no keymap", m.Rows(), m.Cols(), nil, "needs a keymap"},
		{"3x4 keymap on 4x4 pins", m.Rows(), m.Cols(), Keymap3x4(), "is 4x3 but 4 row and 4 column pins"},
		{"nil pin", []gpio.PinOut{m.Rows()[0], nil, m.Rows()[2], m.Rows()[3]}, m.Cols(), Keymap4x4(), "row pin 1 is nil"},
		{"nil col", m.Rows(), []gpio.PinIn{m.Cols()[0], m.Cols()[1], m.Cols()[2], nil}, Keymap4x4(), "column pin 3 is nil"},
	} {
		_, err := New(tt.rows, tt.cols, Opts{Keymap: tt.km})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}
