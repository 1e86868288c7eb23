package checks

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"termlink/internal/testwait"
	"testing"
	"time"

	"termlink/device/input"
	"termlink/testrig/fakepin"
)

// scriptSource plays events, then waits for the end (or fails with err).
type scriptSource struct {
	evs []input.Event
	err error // returned by Run once the events are played
	ch  chan input.Event
	// delivered is closed once the reader has taken every event.
	delivered chan struct{}
}

func newScript(evs []input.Event, err error) *scriptSource {
	return &scriptSource{evs: evs, err: err, ch: make(chan input.Event), delivered: make(chan struct{})}
}

func (s *scriptSource) Events() <-chan input.Event { return s.ch }

func (s *scriptSource) Run(ctx context.Context) error {
	defer close(s.ch)
	for _, ev := range s.evs {
		select {
		case s.ch <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	close(s.delivered) // the reader took every event (s.ch is unbuffered)
	if s.err != nil {
		return s.err
	}
	<-ctx.Done()
	return ctx.Err()
}

// presses returns a KeyDown and a KeyUp for each key of keys.
func presses(km input.Keymap, keys string) []input.Event {
	var evs []input.Event
	for _, key := range keys {
		for r, row := range km {
			for c, k := range row {
				if k == key {
					evs = append(evs, input.Event{Kind: input.KeyDown, Key: k, Row: r, Col: c},
						input.Event{Kind: input.KeyUp, Key: k, Row: r, Col: c})
				}
			}
		}
	}
	return evs
}

func TestKeypadTestScripted(t *testing.T) {
	km := input.Keymap4x4()
	all := "123A456B789C*0#D"
	stuck5 := input.Event{Kind: input.Stuck, Key: '5', Row: 1, Col: 1, Detail: "key 5 held for 5s"}
	badCol := input.Event{Kind: input.Stuck, Row: -1, Col: 2, Detail: "column 2 reads low with no row driven"}
	ghost := input.Event{Kind: input.Ghost, Row: -1, Col: -1, Detail: "keys 1, 2 and 5 down: 6 reads down too"}
	tests := []struct {
		name    string
		evs     []input.Event
		err     error
		pass    bool
		summary string
		seen    float64
	}{
		{"every key", presses(km, all), nil, true, "all 16 keys seen (16 presses), no stuck keys, no ghosting", 16},
		{"twice is fine", append(presses(km, "1111"), presses(km, all)...), nil, true, "all 16 keys seen (20 presses)", 16},
		{"stuck key", append(append(presses(km, "1234"), stuck5), presses(km, all)...), nil, false,
			"key 5 (row 2, column 2) is stuck", 16},
		{"faulty column", append([]input.Event{badCol}, presses(km, all)...), nil, false,
			"column 3 (GPIO22) reads low with no row driven: a short to ground or a missing pull-up", 16},
		{"ghosting", append(append(presses(km, "12"), ghost), presses(km, all)...), nil, false,
			"ghosting: keys 1, 2 and 5 down: 6 reads down too (press one key at a time", 16},
		{"dead row", presses(km, "123A456B*0#D"), nil, false,
			"timed out after 300ms with 4 of 16 keys never seen: 789C: no key of row 3 (GPIO6) answered: check that wire and its pin", 12},
		{"dead column", presses(km, "123456789*0#"), nil, false,
			"4 of 16 keys never seen: ABCD: no key of column 4 (GPIO23) answered", 12},
		{"nothing", nil, nil, false, "16 of 16 keys never seen: 123A456B789C*0#D: no key at all: check the keypad's connector", 0},
		{"scanner fails", presses(km, "12"), errors.New("input: keypad row 0 (GPIO5): drive low: busy"), false,
			"the keypad scanner failed: input: keypad row 0 (GPIO5): drive low: busy", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var live strings.Builder
			res := KeypadTest(context.Background(), newScript(tt.evs, tt.err), KeypadOptions{
				Keymap: km, Timeout: 300 * time.Millisecond, Live: &live,
				RowPins: []string{"GPIO5", "GPIO13", "GPIO6", "GPIO19"}, ColPins: []string{"GPIO17", "GPIO27", "GPIO22", "GPIO23"},
			})
			var b strings.Builder
			res.WriteText(&b)
			t.Logf("\n%s", b.String())
			if res.Pass != tt.pass || !strings.Contains(res.Summary, tt.summary) {
				t.Fatalf("pass %v summary %q; want %v and %q", res.Pass, res.Summary, tt.pass, tt.summary)
			}
			if n, _ := res.Metric("keys_seen"); n != tt.seen {
				t.Errorf("keys_seen %v, want %v", n, tt.seen)
			}
			if !strings.Contains(live.String(), "keypad 4x4: press each key once") {
				t.Errorf("no live table: %q", live.String())
			}
		})
	}
}

func TestKeypadTableRedraw(t *testing.T) {
	km := input.Keymap3x4()
	var live strings.Builder
	res := KeypadTest(context.Background(), newScript(presses(km, "123456789*0#"), nil), KeypadOptions{Keymap: km, Live: &live, ANSI: true, Timeout: time.Second})
	if !res.Pass {
		t.Fatalf("%s", res.Summary)
	}
	out := live.String()
	// The first table is 6 lines; later ones (with the "last:" line) start
	// by moving up over the previous one.
	if !strings.HasPrefix(out, "\r\x1b[2Kkeypad 3x4: press each key once") || !strings.Contains(out, "\x1b[6A") || !strings.Contains(out, "\x1b[7A") || !strings.Contains(out, "\r\x1b[2K  [1] [2] [3]") {
		t.Errorf("live output does not redraw in place: %q", out[len(out)-300:])
	}
	if !strings.Contains(res.Details[0], " [1] [2] [3]\n  [4] [5] [6]") {
		t.Errorf("final table:\n%s", res.Details[0])
	}
}

func TestKeypadTestInterrupted(t *testing.T) {
	km := input.Keymap3x4()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Interrupted once the three presses were taken, not after 50 ms of
	// the wall clock (armv6 under qemu at load 33 took only one by then:
	// stress run 26).
	src := newScript(presses(km, "123"), nil)
	go func() {
		<-src.delivered
		cancel()
	}()
	res := KeypadTest(ctx, src, KeypadOptions{Keymap: km, Timeout: 10 * time.Second})
	if res.Pass || !strings.HasPrefix(res.Summary, "interrupted with 9 of 12 keys never seen: 456789*0#") {
		t.Fatalf("pass %v summary %q", res.Pass, res.Summary)
	}
}

// The real scanner (device/input.Keypad) on the simulated matrix: a
// person presses every key once, one of them held until it is reported
// stuck.
func TestKeypadTestRealScanner(t *testing.T) {
	for _, tt := range []struct {
		name  string
		hold  rune
		pass  bool
		match string
		// stuckAfter is the scanner's bound: far above what a loaded
		// machine makes of the person's 25 ms presses (a press held 170
		// ms read as stuck against 150 ms, beside stress-ng), far below
		// the held key's 4 s.
		stuckAfter time.Duration
	}{
		{"every key", 0, true, "all 12 keys seen", time.Hour},
		{"stuck key", '5', false, "key 5 (row 2, column 2) is stuck", 1500 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			km := input.Keymap3x4()
			m := fakepin.NewMatrix(4, 3, "SIM_")
			kp, err := input.New(m.Rows(), m.Cols(), input.Opts{
				Keymap:       km,
				Timing:       input.Timing{Debounce: 5 * time.Millisecond, RepeatDelay: -1, StuckAfter: tt.stuckAfter},
				ScanInterval: time.Millisecond, StuckPoll: 20 * time.Millisecond, EdgeTimeout: 50 * time.Millisecond,
				Logger: slog.New(slog.DiscardHandler),
			})
			if err != nil {
				t.Fatal(err)
			}
			// A person presses every key, round after round until the
			// test ends (a press the scanner missed on a loaded machine
			// is made again).
			stop, person := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(person)
				wait := func(d time.Duration) bool {
					select {
					case <-stop:
						return false
					case <-time.After(d):
						return true
					}
				}
				wait(20 * time.Millisecond)
				for {
					for r, row := range km {
						for c, key := range row {
							m.Press(r, c)
							hold := 25 * time.Millisecond
							if key == tt.hold {
								hold = 4 * time.Second
							}
							ok := wait(hold)
							m.Release(r, c)
							if !ok || !wait(25*time.Millisecond) {
								return
							}
						}
					}
				}
			}()
			res := KeypadTest(context.Background(), kp, KeypadOptions{Keymap: km, Timeout: testwait.Deadline})
			close(stop)
			<-person
			var b strings.Builder
			res.WriteText(&b)
			t.Logf("\n%s", b.String())
			if res.Pass != tt.pass || !strings.Contains(res.Summary, tt.match) {
				t.Fatalf("pass %v summary %q; want %v and %q", res.Pass, res.Summary, tt.pass, tt.match)
			}
		})
	}
}
