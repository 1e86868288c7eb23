package input

import (
	"fmt"
	"strconv"
	"termlink/internal/keymap"
	"time"
)

// Keymap gives the label of each key of a matrix keypad (the grammar is
// termlink/internal/keymap's, shared with board profiles).
type Keymap = keymap.Keymap

// Keymap4x4 is the usual 16-key membrane keypad.
func Keymap4x4() Keymap { return keymap.Keymap4x4() }

// Keymap3x4 is the usual 12-key telephone keypad (4 rows, 3 columns).
func Keymap3x4() Keymap { return keymap.Keymap3x4() }

// ParseKeymap builds a Keymap from one string per row: ["123A", "456B",
// "789C", "*0#D"] (keymap.Parse).
func ParseKeymap(rows []string) (Keymap, error) {
	km, err := keymap.Parse(rows)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	return km, nil
}

// Kind is the kind of a keypad Event.
type Kind uint8

// Event kinds.
const (
	KeyDown   Kind = iota + 1 // a key was pressed (debounced)
	KeyUp                     // a key was released (debounced)
	KeyRepeat                 // a held key auto-repeats
	Ghost                     // three or more keys form a rectangle: which are really down is ambiguous; new presses are ignored until it clears
	Stuck                     // a key held too long (Row, Col set), or a column reading low with no row driven (Row -1): hardware fault
)

func (k Kind) String() string {
	switch k {
	case KeyDown:
		return "KeyDown"
	case KeyUp:
		return "KeyUp"
	case KeyRepeat:
		return "KeyRepeat"
	case Ghost:
		return "Ghost"
	case Stuck:
		return "Stuck"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Event is something that happened on the keypad.
type Event struct {
	Kind   Kind
	Key    rune // the key's label; 0 for Ghost and for a faulty column
	Row    int  // 0-based; -1 when not about one key
	Col    int  // 0-based; -1 when not about one column
	Time   time.Time
	Detail string // Ghost and Stuck: what was seen, for the log
}

func (e Event) String() string {
	s := e.Kind.String()
	if e.Key != 0 {
		s += " " + strconv.QuoteRune(e.Key)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Timing configures debounce, auto-repeat and stuck-key detection.
type Timing struct {
	// Debounce is how long a key must read the same before a change is
	// believed; default 20ms.
	Debounce time.Duration
	// RepeatDelay is how long a key is held before it repeats; default
	// 500ms. Negative disables auto-repeat.
	RepeatDelay time.Duration
	// RepeatInterval is the time between repeats; default 1/15 s.
	RepeatInterval time.Duration
	// StuckAfter is how long a key may be held before it is reported as
	// stuck (and stops repeating); default 30s. Negative disables it.
	StuckAfter time.Duration
}

func (t *Timing) defaults() {
	if t.Debounce <= 0 {
		t.Debounce = 20 * time.Millisecond
	}
	if t.RepeatDelay == 0 {
		t.RepeatDelay = 500 * time.Millisecond
	}
	if t.RepeatInterval <= 0 {
		t.RepeatInterval = time.Second / 15
	}
	if t.StuckAfter == 0 {
		t.StuckAfter = 30 * time.Second
	}
}

type keyState struct {
	cand    bool      // the reading being debounced
	since   time.Time // when cand was first read
	down    bool      // debounced state
	downAt  time.Time
	stuck   bool
	started bool // cand/since initialised
}

// Matrix turns raw scans of a key matrix into key events: debounce,
// auto-repeat, ghosting and stuck keys. It is a pure state machine: time is
// whatever Update is given, so it runs the same on a fake clock. It is not
// safe for concurrent use.
type Matrix struct {
	km         Keymap
	t          Timing
	rows, cols int
	keys       [][]keyState
	rep        [2]int // the key that auto-repeats; rep[0] = -1 when none
	nextRep    time.Time
	ghost      bool
}

// NewMatrix returns a Matrix for km with timing t (zero fields take their
// defaults).
func NewMatrix(km Keymap, t Timing) *Matrix {
	t.defaults()
	rows, cols := km.Size()
	m := &Matrix{km: km, t: t, rows: rows, cols: cols, rep: [2]int{-1, -1}}
	m.keys = make([][]keyState, rows)
	for r := range m.keys {
		m.keys[r] = make([]keyState, cols)
	}
	return m
}

// Timing returns the timing in use, defaults filled in.
func (m *Matrix) Timing() Timing { return m.t }

// Update takes one scan, pressed[row][col], read at now, and returns the
// events it causes. Rows or columns missing from pressed read as released.
func (m *Matrix) Update(now time.Time, pressed [][]bool) []Event {
	var evs []Event
	at := func(r, c int) bool { return r < len(pressed) && c < len(pressed[r]) && pressed[r][c] }

	ghost, detail := m.findGhost(at)
	if ghost && !m.ghost {
		evs = append(evs, Event{Kind: Ghost, Row: -1, Col: -1, Time: now, Detail: detail})
	}
	m.ghost = ghost

	for r := range m.keys {
		for c := range m.keys[r] {
			k := &m.keys[r][c]
			raw := at(r, c)
			if ghost && !k.down {
				// Ambiguous: this may be a phantom. Releases are always
				// real; new presses wait until the ghosting clears.
				raw = false
			}
			if !k.started || raw != k.cand {
				k.cand, k.since, k.started = raw, now, true
			}
			if k.cand == k.down || now.Sub(k.since) < m.t.Debounce {
				continue
			}
			k.down = k.cand
			ev := Event{Key: m.km[r][c], Row: r, Col: c, Time: now}
			if k.down {
				ev.Kind = KeyDown
				k.downAt, k.stuck = now, false
				if m.t.RepeatDelay >= 0 {
					m.rep, m.nextRep = [2]int{r, c}, now.Add(m.t.RepeatDelay)
				}
			} else {
				ev.Kind = KeyUp
				if k.stuck {
					ev.Detail = fmt.Sprintf("released after %v", now.Sub(k.downAt).Round(time.Millisecond))
				}
				k.stuck = false
				if m.rep == [2]int{r, c} {
					m.rep = [2]int{-1, -1}
				}
			}
			evs = append(evs, ev)
		}
	}

	if m.t.StuckAfter > 0 {
		for r := range m.keys {
			for c := range m.keys[r] {
				k := &m.keys[r][c]
				if k.down && !k.stuck && now.Sub(k.downAt) >= m.t.StuckAfter {
					k.stuck = true
					if m.rep == [2]int{r, c} {
						m.rep = [2]int{-1, -1}
					}
					evs = append(evs, Event{Kind: Stuck, Key: m.km[r][c], Row: r, Col: c, Time: now,
						Detail: fmt.Sprintf("key %q held for %v: stuck key or short circuit?", m.km[r][c], now.Sub(k.downAt).Round(time.Millisecond))})
				}
			}
		}
	}

	if r, c := m.rep[0], m.rep[1]; r >= 0 && !now.Before(m.nextRep) {
		evs = append(evs, Event{Kind: KeyRepeat, Key: m.km[r][c], Row: r, Col: c, Time: now})
		m.nextRep = m.nextRep.Add(m.t.RepeatInterval)
		if !m.nextRep.After(now) {
			// Update was called late: don't burst, pick up the rhythm.
			m.nextRep = now.Add(m.t.RepeatInterval)
		}
	}
	return evs
}

// findGhost looks for a rectangle of pressed keys: with three corners
// down, a matrix without diodes reads the fourth as down too.
func (m *Matrix) findGhost(at func(r, c int) bool) (bool, string) {
	for r1 := 0; r1 < m.rows; r1++ {
		for r2 := r1 + 1; r2 < m.rows; r2++ {
			var both []int
			for c := 0; c < m.cols; c++ {
				if at(r1, c) && at(r2, c) {
					both = append(both, c)
				}
			}
			if len(both) >= 2 {
				c1, c2 := both[0], both[1]
				return true, fmt.Sprintf("keys %c%c%c%c read down together (rows %d,%d columns %d,%d): cannot tell which are pressed",
					m.km[r1][c1], m.km[r1][c2], m.km[r2][c1], m.km[r2][c2], r1, r2, c1, c2)
			}
		}
	}
	return false, ""
}

// Active reports whether the matrix needs more scans: a key is down or a
// change is being debounced. When it returns false the scanner can go back
// to waiting for an edge.
func (m *Matrix) Active() bool {
	for r := range m.keys {
		for c := range m.keys[r] {
			if k := m.keys[r][c]; k.down || k.cand {
				return true
			}
		}
	}
	return false
}

// OnlyStuck reports whether every key down is a reported stuck key and
// nothing is being debounced: scanning can slow down.
func (m *Matrix) OnlyStuck() bool {
	any := false
	for r := range m.keys {
		for c := range m.keys[r] {
			k := m.keys[r][c]
			if k.cand != k.down || (k.down && !k.stuck) {
				return false
			}
			any = any || k.down
		}
	}
	return any
}

// Next returns when Update must next be called even if the scan does not
// change: a debounce settling, a repeat or a stuck-key deadline.
func (m *Matrix) Next() (time.Time, bool) {
	var next time.Time
	set := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for r := range m.keys {
		for c := range m.keys[r] {
			k := m.keys[r][c]
			if k.started && k.cand != k.down {
				set(k.since.Add(m.t.Debounce))
			}
			if k.down && !k.stuck && m.t.StuckAfter > 0 {
				set(k.downAt.Add(m.t.StuckAfter))
			}
		}
	}
	if m.rep[0] >= 0 {
		set(m.nextRep)
	}
	return next, !next.IsZero()
}

// Down returns the labels of the keys down now (debounced), row by row.
func (m *Matrix) Down() []rune {
	var out []rune
	for r := range m.keys {
		for c := range m.keys[r] {
			if m.keys[r][c].down {
				out = append(out, m.km[r][c])
			}
		}
	}
	return out
}
