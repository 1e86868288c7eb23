package checks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"termlink/device/input"
)

// KeySource is a keypad scanner: Run scans until ctx ends and Events
// delivers what it sees, closed when Run returns. *input.Keypad (matrix
// scanning over periph GPIO) is one; tests use scripted sources.
type KeySource interface {
	Run(ctx context.Context) error
	Events() <-chan input.Event
}

// KeypadOptions configure KeypadTest.
type KeypadOptions struct {
	// Keymap labels the keys to press (required).
	Keymap input.Keymap
	// Timeout ends the test when not every key was pressed; 0 means 2
	// minutes.
	Timeout time.Duration
	// Live, when set, receives the table of keys, redrawn after every
	// event; ANSI redraws it in place (a terminal), otherwise each
	// redraw is appended.
	Live io.Writer
	ANSI bool
	// RowPins and ColPins name the pins, for hints about a dead row or
	// column.
	RowPins, ColPins []string
}

// KeypadTest asks a person to press every key once and shows a table of
// the keys seen so far. It ends when every key was seen, at the timeout or
// when ctx ends (Ctrl-C), and fails on keys never seen (with a hint when a
// whole row or column is missing), stuck keys, a column that reads low by
// itself, and ghosting.
func KeypadTest(ctx context.Context, src KeySource, o KeypadOptions) Result {
	r := newResult("keypad-test")
	rows, cols := o.Keymap.Size()
	if rows == 0 {
		r.Fail("keypad-test needs a keymap")
		return *r
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	k := &keypadState{km: o.Keymap, seen: map[rune]int{}, stuck: map[rune]bool{}, o: o}
	tctx, cancel := context.WithTimeoutCause(ctx, o.Timeout, errKeypadTimeout)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- src.Run(tctx) }()
	start := time.Now()
	k.draw()

	events := src.Events()
	var scanErr error
	ended := ""
loop:
	for {
		select {
		case ev, ok := <-events:
			if !ok { // Run returned
				err := <-runErr
				runErr = nil
				if tctx.Err() != nil {
					ended = endReason(tctx, o.Timeout)
					break loop
				}
				if err == nil {
					err = errors.New("it stopped by itself")
				}
				scanErr, ended = err, "stopped"
				break loop
			}
			if k.handle(ev) {
				k.draw()
			}
			if k.allSeen() {
				ended = "all keys seen"
				break loop
			}
		case <-tctx.Done():
			ended = endReason(tctx, o.Timeout)
			break loop
		}
	}
	cancel()
	if runErr != nil {
		select {
		case err := <-runErr:
			if scanErr == nil && err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				scanErr = err
			}
		case <-time.After(2 * time.Second):
			r.Detailf("the scanner did not stop within 2s")
		}
	}

	total := rows * cols
	r.Details = append(r.Details, k.table())
	r.Set("keys", float64(total))
	r.Set("keys_seen", float64(len(k.seen)))
	r.Set("presses", float64(k.presses))
	r.Set("stuck", float64(len(k.stuck)+len(k.faultCols)))
	r.Set("ghosts", float64(len(k.ghosts)))
	r.Set("seconds", round3(time.Since(start).Seconds()))

	for _, ev := range k.stuckEvents {
		if ev.Row < 0 {
			r.Fail("column %d%s reads low with no row driven: a short to ground or a missing pull-up", ev.Col+1, pinName(o.ColPins, ev.Col))
		} else {
			r.Fail("key %c (row %d, column %d) is stuck: held down for longer than it should be (a shorted switch, or something pressing on it)", ev.Key, ev.Row+1, ev.Col+1)
		}
		if ev.Detail != "" {
			r.Detailf("%s", ev.Detail)
		}
	}
	for _, ev := range k.ghosts {
		r.Fail("ghosting: %s (press one key at a time; if you did, a row and a column wire touch)", ev.Detail)
	}
	if scanErr != nil {
		r.Fail("the keypad scanner failed: %v", scanErr)
	}
	if missing := k.missing(); len(missing) > 0 {
		r.Fail("%s with %d of %d keys never seen: %s%s", ended, len(missing), total, string(missing), k.lineHint())
	}
	if r.Pass {
		r.Summary = fmt.Sprintf("all %d keys seen (%d presses), no stuck keys, no ghosting", total, k.presses)
	}
	return *r
}

var errKeypadTimeout = errors.New("keypad test timed out")

func endReason(ctx context.Context, timeout time.Duration) string {
	if errors.Is(context.Cause(ctx), errKeypadTimeout) {
		return fmt.Sprintf("timed out after %v", timeout)
	}
	return "interrupted"
}

func pinName(pins []string, i int) string {
	if i >= 0 && i < len(pins) && pins[i] != "" {
		return " (" + pins[i] + ")"
	}
	return ""
}

type keypadState struct {
	km          input.Keymap
	o           KeypadOptions
	seen        map[rune]int
	stuck       map[rune]bool
	faultCols   []int
	stuckEvents []input.Event
	ghosts      []input.Event
	presses     int
	drawn       int // lines of the last live table
	last        string
}

// handle records ev and reports whether the table changed.
func (k *keypadState) handle(ev input.Event) bool {
	switch ev.Kind {
	case input.KeyDown:
		k.presses++
		k.seen[ev.Key]++
		k.last = fmt.Sprintf("last: %c (row %d, column %d)", ev.Key, ev.Row+1, ev.Col+1)
	case input.Stuck:
		if ev.Row < 0 {
			if slices.Contains(k.faultCols, ev.Col) {
				return false
			}
			k.faultCols = append(k.faultCols, ev.Col)
		} else {
			if k.stuck[ev.Key] {
				return false
			}
			k.stuck[ev.Key] = true
		}
		k.stuckEvents = append(k.stuckEvents, ev)
		k.last = "STUCK: " + ev.Detail
	case input.Ghost:
		k.ghosts = append(k.ghosts, ev)
		k.last = "GHOST: " + ev.Detail
	default:
		return false
	}
	return true
}

func (k *keypadState) allSeen() bool {
	rows, cols := k.km.Size()
	return len(k.seen) == rows*cols
}

func (k *keypadState) missing() []rune {
	var out []rune
	for _, row := range k.km {
		for _, key := range row {
			if k.seen[key] == 0 {
				out = append(out, key)
			}
		}
	}
	return out
}

// lineHint names a row or column none of whose keys were seen while others
// were: its wire (or its pin) is the likely fault.
func (k *keypadState) lineHint() string {
	if len(k.seen) == 0 {
		return ": no key at all: check the keypad's connector and the pin numbers in the board profile"
	}
	rows, cols := k.km.Size()
	var hints []string
	for r := range rows {
		dead := true
		for c := range cols {
			dead = dead && k.seen[k.km[r][c]] == 0
		}
		if dead {
			hints = append(hints, fmt.Sprintf("row %d%s", r+1, pinName(k.o.RowPins, r)))
		}
	}
	for c := range cols {
		dead := true
		for r := range rows {
			dead = dead && k.seen[k.km[r][c]] == 0
		}
		if dead {
			hints = append(hints, fmt.Sprintf("column %d%s", c+1, pinName(k.o.ColPins, c)))
		}
	}
	if len(hints) == 0 {
		return ""
	}
	return ": no key of " + strings.Join(hints, ", ") + " answered: check that wire and its pin"
}

// table renders the keypad: [5] seen, !5! stuck, plain not yet pressed.
func (k *keypadState) table() string {
	var b strings.Builder
	rows, cols := k.km.Size()
	fmt.Fprintf(&b, "keypad %dx%d: press each key once ([x] seen, !x! stuck)", cols, rows)
	for _, row := range k.km {
		b.WriteString("\n ")
		for _, key := range row {
			switch {
			case k.stuck[key]:
				fmt.Fprintf(&b, " !%c!", key)
			case k.seen[key] > 0:
				fmt.Fprintf(&b, " [%c]", key)
			default:
				fmt.Fprintf(&b, "  %c ", key)
			}
		}
	}
	fmt.Fprintf(&b, "\nseen %d of %d", len(k.seen), rows*cols)
	if m := k.missing(); len(m) > 0 {
		fmt.Fprintf(&b, "; still to press: %s", strings.Join(strings.Split(string(m), ""), " "))
	}
	if k.last != "" {
		b.WriteString("\n" + k.last)
	}
	return b.String()
}

// draw writes the table to Live, over the previous one with ANSI.
func (k *keypadState) draw() {
	if k.o.Live == nil {
		return
	}
	var b bytes.Buffer
	if k.o.ANSI && k.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", k.drawn)
	}
	lines := strings.Split(k.table(), "\n")
	for _, l := range lines {
		if k.o.ANSI {
			b.WriteString("\r\x1b[2K")
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if !k.o.ANSI {
		b.WriteByte('\n')
	}
	k.drawn = len(lines)
	k.o.Live.Write(b.Bytes())
}
