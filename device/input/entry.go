package input

import (
	"context"
	"fmt"
	"strings"
	"termlink/internal/keymap"
	"time"
	"unicode"
)

// Mode is the multi-tap letter case.
type Mode uint8

// Multi-tap modes, in the order the case key cycles through them.
const (
	Lower  Mode = iota // abc
	Upper              // ABC
	Digits             // 123: each key types its digit
)

func (m Mode) String() string {
	switch m {
	case Lower:
		return "abc"
	case Upper:
		return "ABC"
	case Digits:
		return "123"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Binding ties a function to a key: pressed or held (keymap.Binding).
type Binding = keymap.Binding

// ParseBinding parses "#" (press) or "hold:*" (hold); "" is no binding.
func ParseBinding(s string) (Binding, error) {
	b, err := keymap.ParseBinding(s)
	if err != nil {
		return Binding{}, fmt.Errorf("input: %w", err)
	}
	return b, nil
}

// Keys binds the text-entry functions to keypad keys (keymap.Keys).
type Keys = keymap.Keys

// Keys4x4 is the default binding for a 4x4 keypad: * case, # send,
// D delete, A/B scroll up/down.
func Keys4x4() Keys { return keymap.Keys4x4() }

// Keys3x4 is the default binding for a 3x4 keypad: * case, holding *
// deletes, # send; no scrolling.
func Keys3x4() Keys { return keymap.Keys3x4() }

type function uint8

const (
	fnNone function = iota
	fnCase
	fnSend
	fnDelete
	fnScrollUp
	fnScrollDown
)

func lookup(k Keys, key rune, hold bool) function {
	for _, b := range []struct {
		b  Binding
		fn function
	}{{k.Case, fnCase}, {k.Send, fnSend}, {k.Delete, fnDelete}, {k.ScrollUp, fnScrollUp}, {k.ScrollDown, fnScrollDown}} {
		if b.b.Key == key && b.b.Hold == hold && key != 0 {
			return b.fn
		}
	}
	return fnNone
}

// ActionKind is the kind of an Action.
type ActionKind uint8

// Actions produced by text entry.
const (
	Edit       ActionKind = iota + 1 // the text changed: Action.Text, Action.Pending
	Send                             // send Action.Text; the text is cleared
	ScrollUp                         // scroll the conversation back
	ScrollDown                       // scroll the conversation forward
	ModeChange                       // the case mode changed: Action.Mode
	SendBlank                        // the send key with nothing typed (termd: why offline)
)

func (k ActionKind) String() string {
	switch k {
	case Edit:
		return "Edit"
	case Send:
		return "Send"
	case ScrollUp:
		return "ScrollUp"
	case ScrollDown:
		return "ScrollDown"
	case ModeChange:
		return "ModeChange"
	case SendBlank:
		return "SendBlank"
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is what text entry asks the device to do.
type Action struct {
	Kind    ActionKind
	Text    string // Edit: the whole text, pending letter included; Send: the message
	Pending bool   // Edit: the last character is a multi-tap letter not yet committed
	Mode    Mode
}

// Entry turns key events into actions. Tick must be called at Deadline
// (if any) so time-outs happen without a key press.
type Entry interface {
	Handle(ev Event) []Action
	Tick(now time.Time) []Action
	Deadline() (time.Time, bool)
}

// DefaultLetters is the multi-tap layout (ITU E.161 with digits last).
func DefaultLetters() map[rune]string {
	return map[rune]string{
		'1': ".,?!'-1", '2': "abc2", '3': "def3", '4': "ghi4", '5': "jkl5",
		'6': "mno6", '7': "pqrs7", '8': "tuv8", '9': "wxyz9", '0': " 0",
	}
}

// MultiTapOpts configures a MultiTap.
type MultiTapOpts struct {
	// Keys binds case, send, delete and scroll; default Keys4x4().
	Keys Keys
	// Timeout commits a pending letter when no key follows; default 800ms.
	Timeout time.Duration
	// MaxLen bounds the text in characters; default 1000.
	MaxLen int
	// Letters overrides the layout; default DefaultLetters().
	Letters map[rune]string
}

// MultiTap is phone-style text entry on a keypad: pressing 2 once types
// 'a', twice 'b', three times 'c', four times '2'; another key, or Timeout
// without a key, commits the letter. Holding a letter key types its digit.
// It is a pure state machine: time comes from the events and from Tick.
type MultiTap struct {
	o       MultiTapOpts
	letters map[rune][]rune
	text    []rune
	mode    Mode

	pending bool
	pkey    rune
	pidx    int
	lastTap time.Time

	down     rune // key currently held
	deferred bool // its press action waits for release (it has a hold binding)
	held     bool // its hold action ran
	undo     state
}

type state struct {
	text    []rune
	pending bool
	pkey    rune
	pidx    int
}

// NewMultiTap returns a MultiTap.
func NewMultiTap(o MultiTapOpts) *MultiTap {
	if o.Keys == (Keys{}) {
		o.Keys = Keys4x4()
	}
	if o.Timeout <= 0 {
		o.Timeout = 800 * time.Millisecond
	}
	if o.MaxLen <= 0 {
		o.MaxLen = 1000
	}
	if o.Letters == nil {
		o.Letters = DefaultLetters()
	}
	m := &MultiTap{o: o, letters: map[rune][]rune{}}
	for k, v := range o.Letters {
		if v != "" {
			m.letters[k] = []rune(v)
		}
	}
	return m
}

// Text returns the text, pending letter included.
func (m *MultiTap) Text() string {
	if l, ok := m.pendingLetter(); ok {
		return string(m.text) + string(l)
	}
	return string(m.text)
}

// Mode returns the case mode.
func (m *MultiTap) Mode() Mode { return m.mode }

// Reset clears the text and returns to lower case.
func (m *MultiTap) Reset() {
	m.text, m.pending, m.mode, m.down = m.text[:0], false, Lower, 0
}

// SetText replaces the text (for editing a draft); nothing is pending.
func (m *MultiTap) SetText(s string) {
	m.text = []rune(s)
	if len(m.text) > m.o.MaxLen {
		m.text = m.text[:m.o.MaxLen]
	}
	m.pending = false
}

// Deadline returns when a pending letter times out.
func (m *MultiTap) Deadline() (time.Time, bool) {
	if !m.pending {
		return time.Time{}, false
	}
	return m.lastTap.Add(m.o.Timeout), true
}

// Tick commits the pending letter if it has timed out.
func (m *MultiTap) Tick(now time.Time) []Action {
	if m.pending && now.Sub(m.lastTap) >= m.o.Timeout {
		m.commit()
		return []Action{m.edit()}
	}
	return nil
}

// Handle applies a keypad event.
func (m *MultiTap) Handle(ev Event) []Action {
	switch ev.Kind {
	case KeyDown:
		acts := m.Tick(ev.Time)
		m.down, m.held = ev.Key, false
		m.deferred = lookup(m.o.Keys, ev.Key, true) != fnNone
		if m.deferred {
			return acts
		}
		m.undo = m.snapshot()
		return append(acts, m.tap(ev.Key, ev.Time)...)
	case KeyRepeat:
		if ev.Key != m.down {
			return nil
		}
		first := !m.held
		m.held = true
		if fn := lookup(m.o.Keys, ev.Key, true); fn != fnNone {
			if first || repeats(fn) {
				return m.do(fn)
			}
			return nil
		}
		if _, ok := m.letters[ev.Key]; ok && lookup(m.o.Keys, ev.Key, false) == fnNone {
			if first && unicode.IsDigit(ev.Key) && m.mode != Digits {
				// Held letter key: undo the press, type the digit.
				m.restore(m.undo)
				m.commit()
				m.insert(ev.Key)
				return []Action{m.edit()}
			}
			return nil
		}
		if fn := lookup(m.o.Keys, ev.Key, false); repeats(fn) {
			return m.do(fn)
		}
	case KeyUp:
		if ev.Key != m.down {
			return nil
		}
		m.down = 0
		if m.deferred && !m.held {
			return m.tap(ev.Key, ev.Time)
		}
	}
	return nil
}

func repeats(fn function) bool {
	return fn == fnDelete || fn == fnScrollUp || fn == fnScrollDown
}

func (m *MultiTap) tap(key rune, now time.Time) []Action {
	if fn := lookup(m.o.Keys, key, false); fn != fnNone {
		return m.do(fn)
	}
	letters, ok := m.letters[key]
	if !ok {
		return nil
	}
	if m.mode == Digits {
		m.commit()
		if unicode.IsDigit(key) {
			m.insert(key)
		}
		return []Action{m.edit()}
	}
	if m.pending && m.pkey == key && now.Sub(m.lastTap) < m.o.Timeout {
		m.pidx = (m.pidx + 1) % len(letters)
	} else {
		m.commit()
		if len(m.text) >= m.o.MaxLen {
			return nil
		}
		m.pending, m.pkey, m.pidx = true, key, 0
	}
	m.lastTap = now
	return []Action{m.edit()}
}

func (m *MultiTap) do(fn function) []Action {
	switch fn {
	case fnCase:
		m.commit()
		m.mode = (m.mode + 1) % 3
		return []Action{{Kind: ModeChange, Mode: m.mode}, m.edit()}
	case fnSend:
		m.commit()
		text := string(m.text)
		if strings.TrimSpace(text) == "" {
			return []Action{{Kind: SendBlank, Mode: m.mode}}
		}
		m.text = m.text[:0]
		return []Action{{Kind: Send, Text: text, Mode: m.mode}, m.edit()}
	case fnDelete:
		if m.pending {
			m.pending = false
		} else if len(m.text) > 0 {
			m.text = m.text[:len(m.text)-1]
		} else {
			return nil
		}
		return []Action{m.edit()}
	case fnScrollUp:
		return []Action{{Kind: ScrollUp, Mode: m.mode}}
	case fnScrollDown:
		return []Action{{Kind: ScrollDown, Mode: m.mode}}
	}
	return nil
}

func (m *MultiTap) pendingLetter() (rune, bool) {
	if !m.pending {
		return 0, false
	}
	l := m.letters[m.pkey][m.pidx]
	if m.mode == Upper {
		l = unicode.ToUpper(l)
	}
	return l, true
}

func (m *MultiTap) commit() {
	if l, ok := m.pendingLetter(); ok {
		m.pending = false
		m.insert(l)
	}
}

func (m *MultiTap) insert(r rune) {
	if len(m.text) < m.o.MaxLen {
		m.text = append(m.text, r)
	}
}

func (m *MultiTap) edit() Action {
	return Action{Kind: Edit, Text: m.Text(), Pending: m.pending, Mode: m.mode}
}

func (m *MultiTap) snapshot() state {
	return state{text: append([]rune(nil), m.text...), pending: m.pending, pkey: m.pkey, pidx: m.pidx}
}

func (m *MultiTap) restore(s state) {
	m.text = append(m.text[:0], s.text...)
	m.pending, m.pkey, m.pidx = s.pending, s.pkey, s.pidx
}

// Kiosk maps keys to canned phrases: pressing a key sends its phrase. The
// scroll bindings of Keys still scroll.
type Kiosk struct {
	phrases map[rune]string
	keys    Keys
}

// NewKiosk returns a Kiosk. Phrases must not be blank.
func NewKiosk(phrases map[rune]string, keys Keys) (*Kiosk, error) {
	if len(phrases) == 0 {
		return nil, fmt.Errorf("input: kiosk mode needs at least one phrase")
	}
	p := make(map[rune]string, len(phrases))
	for k, v := range phrases {
		if strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("input: kiosk phrase for key %q is blank", k)
		}
		p[k] = v
	}
	return &Kiosk{phrases: p, keys: keys}, nil
}

// Handle sends the phrase of a pressed key, or scrolls.
func (k *Kiosk) Handle(ev Event) []Action {
	if ev.Kind != KeyDown && ev.Kind != KeyRepeat {
		return nil
	}
	if p, ok := k.phrases[ev.Key]; ok {
		if ev.Kind == KeyDown {
			return []Action{{Kind: Send, Text: p}}
		}
		return nil
	}
	switch lookup(k.keys, ev.Key, false) {
	case fnSend:
		if ev.Kind == KeyDown {
			return []Action{{Kind: SendBlank}}
		}
	case fnScrollUp:
		return []Action{{Kind: ScrollUp}}
	case fnScrollDown:
		return []Action{{Kind: ScrollDown}}
	}
	return nil
}

// Tick does nothing: a Kiosk has no time-outs.
func (k *Kiosk) Tick(time.Time) []Action { return nil }

// Deadline reports no deadline.
func (k *Kiosk) Deadline() (time.Time, bool) { return time.Time{}, false }

// Drive feeds keypad events to e and its actions to out, calling Tick at
// e's deadlines on the real clock, until events is closed or ctx is done.
func Drive(ctx context.Context, events <-chan Event, e Entry, out chan<- Action) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if d, ok := e.Deadline(); ok {
			timer.Reset(max(time.Until(d), 0))
		} else {
			timer.Stop()
		}
		var acts []Action
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			acts = e.Handle(ev)
		case now := <-timer.C:
			acts = e.Tick(now)
		}
		for _, a := range acts {
			select {
			case out <- a:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}
