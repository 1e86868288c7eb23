package device

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"termlink/device/input"
	"termlink/link"
)

// Kiosk configures what a daemon does for a kiosk beyond the chat: server
// notices take over the screen, and an unattended screen goes idle and
// dark. The zero value shows notices for DefaultNoticeSeconds and never
// goes idle or dark.
type Kiosk struct {
	// NoticeSeconds is how long a notice that gives no display_seconds
	// takes over the screen (default DefaultNoticeSeconds).
	NoticeSeconds int
	// IdleAfter: after this long without a key the screen shows IdleText,
	// or without one the latest notice still unexpired, or a clock (0:
	// never); while the device is not online, with the link's state on
	// its bottom row ("no server" and the seconds to the next try).
	IdleAfter time.Duration
	// IdleText is the idle screen's text ("": a clock).
	IdleText string
	// BacklightOffAfter: after this long without a key the backlight
	// goes off (0: never). A notice lights it while it is shown.
	BacklightOffAfter time.Duration
	// Blink is how long an alert notice's backlight stays on, and off,
	// in turn (default DefaultBlink).
	Blink time.Duration
}

// Kiosk defaults.
const (
	DefaultNoticeSeconds = 15
	DefaultBlink         = 500 * time.Millisecond
	maxQueuedNotices     = 32 // notices waiting for the screen; past it the oldest goes (not acked: resent)
)

// OverlayKind says what has taken over the screen.
type OverlayKind uint8

// Overlays.
const (
	OverlayNone   OverlayKind = iota // the conversation
	OverlayNotice                    // a server notice (Overlay.Text, Overlay.Alert)
	OverlayIdle                      // the idle screen: Overlay.Text, or a clock when it is empty
	OverlayReason                    // why the link is offline, in full (Overlay.Text), opened by the user
)

// ReasonPageFor is how long the page with the offline reason stays open
// when no key closes it (it closes at once when the link comes up).
const ReasonPageFor = time.Minute

// Overlay is what the screen shows instead of the conversation.
type Overlay struct {
	Kind  OverlayKind
	Text  string
	Alert bool
	ID    string    // OverlayNotice: the notice id
	Since time.Time // when it took over the screen (a long text turns pages from then)
}

// KeyGate sits between a keypad and its text entry: while the kiosk
// shows a notice, its idle screen or a dark backlight, the next key press
// only dismisses or wakes (it is swallowed, with its release), so it
// types nothing. It also tells the daemon about every press, which keeps
// the screen awake. Create it with NewKeyGate; the daemon arms it.
//
// While a question is open (the daemon sets it) every key press goes to
// the daemon instead (Keys), swallowed with its release: 1-9 answer, the
// page keys turn the question's pages, nothing is typed.
type KeyGate struct {
	armed  atomic.Bool
	ask    atomic.Bool   // a question is open: presses go to keys
	active chan struct{} // cap 1: a key was pressed and passed on
	woke   chan struct{} // cap 1: a key was swallowed to wake or dismiss
	keys   chan rune     // presses taken for the open question
}

// NewKeyGate returns a disarmed gate.
func NewKeyGate() *KeyGate {
	return &KeyGate{active: make(chan struct{}, 1), woke: make(chan struct{}, 1), keys: make(chan rune, 8)}
}

// Press reports a key press; true: swallow it (it only woke the kiosk).
func (g *KeyGate) Press() bool {
	if g.armed.CompareAndSwap(true, false) {
		poke(g.woke)
		return true
	}
	poke(g.active)
	return false
}

// Keys delivers the key presses taken while a question is open (the
// daemon reads it).
func (g *KeyGate) Keys() <-chan rune { return g.keys }

// take passes a press to the open question; true: taken (swallow it).
// Past a few presses waiting, more are dropped (a person presses one).
func (g *KeyGate) take(key rune) bool {
	if !g.ask.Load() {
		return false
	}
	select {
	case g.keys <- key:
	default:
	}
	return true
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// GateKeys passes keypad events from in to out through g until ctx ends
// or in is closed: a press g swallows is dropped with everything of that
// key up to its release.
func GateKeys(ctx context.Context, g *KeyGate, in <-chan input.Event, out chan<- input.Event) {
	swallowed := map[rune]bool{}
	for {
		select {
		case ev, ok := <-in:
			if !ok {
				return
			}
			switch ev.Kind {
			case input.KeyDown:
				if g.take(ev.Key) || g.Press() {
					swallowed[ev.Key] = true
					continue
				}
			case input.KeyRepeat:
				if swallowed[ev.Key] {
					continue
				}
			case input.KeyUp:
				if swallowed[ev.Key] {
					delete(swallowed, ev.Key)
					continue
				}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// shownNotice is a notice on its way to the screen.
type shownNotice struct {
	n       link.Notice
	expires time.Time // zero: never
	acked   bool      // drawn and confirmed to the client
	local   bool      // termd's own (Daemon.Hello): never confirmed to the server
}

func (s *shownNotice) expired(now time.Time) bool {
	return !s.expires.IsZero() && !now.Before(s.expires)
}

// kiosk is the daemon's kiosk state, owned by the daemon's goroutine.
type kiosk struct {
	cfg Kiosk

	queue     []*shownNotice // waiting for the screen, in arrival order
	cur       *shownNotice   // on the screen now
	curSince  time.Time
	curUntil  time.Time
	last      *shownNotice // the latest notice drawn (for the idle screen)
	lastInput time.Time
	why       time.Time // the offline reason's page opened then; zero: closed
	blinkOff  bool
	nextBlink time.Time
}

func newKiosk(cfg Kiosk, now time.Time) *kiosk {
	if cfg.NoticeSeconds <= 0 {
		cfg.NoticeSeconds = DefaultNoticeSeconds
	}
	if cfg.Blink <= 0 {
		cfg.Blink = DefaultBlink
	}
	return &kiosk{cfg: cfg, lastInput: now}
}

// setConfig takes a new kiosk config (defaults as newKiosk), from the
// next step on.
func (k *kiosk) setConfig(cfg Kiosk) {
	if cfg.NoticeSeconds <= 0 {
		cfg.NoticeSeconds = DefaultNoticeSeconds
	}
	if cfg.Blink <= 0 {
		cfg.Blink = DefaultBlink
	}
	k.cfg = cfg
}

// add queues a notice for the screen, unless it is there or queued.
func (k *kiosk) add(ev link.Event, now time.Time) {
	n := ev.Notice
	if n == nil {
		return
	}
	sn := &shownNotice{n: *n, expires: ev.Expires}
	if sn.expired(now) || (k.cur != nil && k.cur.n.NoticeID == n.NoticeID) ||
		slices.ContainsFunc(k.queue, func(q *shownNotice) bool { return q.n.NoticeID == n.NoticeID }) {
		return
	}
	k.queue = append(k.queue, sn)
	if over := len(k.queue) - maxQueuedNotices; over > 0 {
		k.queue = slices.Delete(k.queue, 0, over)
	}
}

// addLocal puts termd's own text on the screen for secs, before the
// notices waiting.
func (k *kiosk) addLocal(text string, secs int) {
	sn := &shownNotice{n: link.Notice{NoticeID: "termd-local", Text: text, DisplaySeconds: secs}, local: true}
	k.queue = append([]*shownNotice{sn}, k.queue...)
}

// wake is a key press that woke the screen or dismissed a notice.
func (k *kiosk) wake(now time.Time) {
	if k.cur != nil {
		k.end()
	} else {
		k.why = time.Time{} // the key closes the reason's page
	}
	k.lastInput = now
}

// touch is a key press passed on as input.
func (k *kiosk) touch(now time.Time) { k.lastInput = now }

func (k *kiosk) end() {
	if k.cur != nil && k.cur.acked && !k.cur.local {
		k.last = k.cur
	}
	k.cur, k.blinkOff = nil, false
}

// step brings the kiosk to now: ends a notice whose time is up, puts the
// next one on the screen, blinks, and sets the model's overlay and
// backlight. It returns when the next change is due (zero: none) and
// whether the gate should swallow the next key.
func (k *kiosk) step(m *Model, now time.Time) (next time.Time, armed bool) {
	if k.cur != nil && (!now.Before(k.curUntil) || k.cur.expired(now)) {
		k.end()
	}
	if m.Asking() {
		// A question (or what became of it) has the screen: notices
		// wait, the screen neither idles nor darkens, and keys go to the
		// question (the gate is not armed).
		k.lastInput = now
		m.Overlay, m.Dark = Overlay{}, false
		return time.Time{}, false
	}
	for k.cur == nil && len(k.queue) > 0 {
		sn := k.queue[0]
		k.queue = slices.Delete(k.queue, 0, 1)
		if sn.expired(now) {
			continue
		}
		secs := sn.n.DisplaySeconds
		if secs <= 0 {
			secs = k.cfg.NoticeSeconds
		}
		k.cur, k.curSince, k.curUntil = sn, now, now.Add(time.Duration(secs)*time.Second)
		k.nextBlink = now.Add(k.cfg.Blink)
	}
	soonest := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	idleFor := now.Sub(k.lastInput)
	idle := k.cfg.IdleAfter > 0 && idleFor >= k.cfg.IdleAfter
	dark := k.cfg.BacklightOffAfter > 0 && idleFor >= k.cfg.BacklightOffAfter
	if !idle && k.cfg.IdleAfter > 0 {
		soonest(k.lastInput.Add(k.cfg.IdleAfter))
	}
	if !dark && k.cfg.BacklightOffAfter > 0 {
		soonest(k.lastInput.Add(k.cfg.BacklightOffAfter))
	}
	if !k.why.IsZero() && (m.Link == link.StateConnected || m.Reason == "" || m.Stopping || !now.Before(k.why.Add(ReasonPageFor))) {
		k.why = time.Time{}
	}
	m.Overlay = Overlay{}
	switch {
	case !k.why.IsZero() && k.cur == nil:
		m.Overlay = Overlay{Kind: OverlayReason, Text: "Offline: " + link.GlassReason(m.Reason), Since: k.why}
		soonest(k.why.Add(ReasonPageFor))
		idle, dark = false, false // the user is reading
	case k.cur != nil:
		n := &k.cur.n
		alert := n.Priority == link.PriorityAlert
		m.Overlay = Overlay{Kind: OverlayNotice, Text: n.Text, Alert: alert, ID: n.NoticeID, Since: k.curSince}
		soonest(k.curUntil)
		soonest(k.cur.expires)
		if alert {
			for !now.Before(k.nextBlink) {
				k.blinkOff = !k.blinkOff
				k.nextBlink = k.nextBlink.Add(k.cfg.Blink)
				if k.nextBlink.Before(now) { // late: no catching up
					k.nextBlink = now.Add(k.cfg.Blink)
				}
			}
			soonest(k.nextBlink)
		}
		dark = false // a notice lights the screen (an alert blinks it)
	case idle:
		// The idle text the operator set (pushed or given) comes first;
		// without one the latest notice still unexpired, else a clock. A
		// notice that arrives takes the screen for its time as ever (k.cur
		// above). While the device is not online the view adds the link's
		// line (LCDView).
		m.Overlay = Overlay{Kind: OverlayIdle, Text: k.cfg.IdleText, Since: k.lastInput.Add(k.cfg.IdleAfter)}
		if l := k.last; l != nil && m.Overlay.Text == "" && !l.expired(now) {
			m.Overlay.Text = l.n.Text
			soonest(l.expires)
		}
	}
	m.Dark = dark || (k.cur != nil && k.blinkOff)
	return next, k.cur != nil || idle || dark || !k.why.IsZero()
}

// openWhy opens the page with the full offline reason (the next key
// closes it).
func (k *kiosk) openWhy(now time.Time) {
	k.why, k.lastInput = now, now
}

// whyOpen reports whether the page with the offline reason is open.
func (k *kiosk) whyOpen() bool { return !k.why.IsZero() }

// drawn is called after a draw succeeded: the notice on the screen is
// confirmed to the client (once).
func (k *kiosk) drawn(m *Model) (confirm string) {
	if k.cur == nil || k.cur.acked || k.cur.local || m.Overlay.Kind != OverlayNotice || m.Overlay.ID != k.cur.n.NoticeID {
		return ""
	}
	k.cur.acked = true
	k.last = k.cur
	return k.cur.n.NoticeID
}
