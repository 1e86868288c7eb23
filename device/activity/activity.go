// Package activity tells whether a person is using the device now
// (issue 42): a conversation is live while a run is in progress (a
// message sent and not yet replied), a question is open on the glass, or
// a key was pressed in the last KeyWindow. termd reports it to the
// server (the busy frame: a rollout does not send an update to a device
// in use) and waits for it before it restarts into a staged release
// (WaitIdle).
package activity

import (
	"context"
	"sync"
	"time"

	"termlink/link"
)

// DefaultKeyWindow is how long a key keeps the device busy (the
// busy_seconds setting's default).
const DefaultKeyWindow = 60 * time.Second

// MinReportGap is the least time between two reports of a change (the
// server takes a device's busy frames at its answer rate).
const MinReportGap = time.Second

// Tracker is the device's use. Its zero value is not usable: New.
type Tracker struct {
	runs func() int // the runs in progress, read at each question

	mu        sync.Mutex
	question  bool
	lastKey   time.Time
	keyWindow time.Duration
	keyTimer  *time.Timer   // fires when the last key's window ends
	changed   chan struct{} // closed (and made again) on each change
}

// New is a tracker: runs says how many runs are in progress now (termd:
// the client's outbox entries not yet done; nil: none), keyWindow how
// long a key keeps the device busy (0: DefaultKeyWindow).
func New(runs func() int, keyWindow time.Duration) *Tracker {
	if keyWindow <= 0 {
		keyWindow = DefaultKeyWindow
	}
	if runs == nil {
		runs = func() int { return 0 }
	}
	return &Tracker{runs: runs, keyWindow: keyWindow, changed: make(chan struct{})}
}

// changedLocked wakes whoever waits for a change.
func (t *Tracker) changedLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// Changed tells the tracker the runs in progress may have changed (a
// message sent, a reply shown): its reporter looks again at once.
func (t *Tracker) Changed() {
	t.mu.Lock()
	t.changedLocked()
	t.mu.Unlock()
}

// SetQuestionOpen says whether a question is open on the glass (the
// question screen calls it when it shows one and when it closes).
func (t *Tracker) SetQuestionOpen(open bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.question != open {
		t.question = open
		t.changedLocked()
	}
}

// KeyPressed says a person pressed a key now: busy for KeyWindow.
func (t *Tracker) KeyPressed() {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.keysLocked(time.Now())
	t.lastKey = time.Now()
	t.armLocked()
	if !was {
		t.changedLocked()
	}
}

// SetKeyWindow changes how long a key keeps the device busy (the
// busy_seconds setting; 0: DefaultKeyWindow).
func (t *Tracker) SetKeyWindow(d time.Duration) {
	if d <= 0 {
		d = DefaultKeyWindow
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if d == t.keyWindow {
		return
	}
	t.keyWindow = d
	if !t.lastKey.IsZero() {
		t.armLocked()
	}
	t.changedLocked()
}

// KeyWindow is how long a key keeps the device busy.
func (t *Tracker) KeyWindow() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.keyWindow
}

// armLocked sets the timer that wakes the waiters when the last key's
// window ends.
func (t *Tracker) armLocked() {
	left := time.Until(t.lastKey.Add(t.keyWindow))
	if t.keyTimer != nil {
		t.keyTimer.Stop()
	}
	t.keyTimer = time.AfterFunc(max(left, 0), t.Changed)
}

func (t *Tracker) keysLocked(now time.Time) bool {
	return !t.lastKey.IsZero() && now.Sub(t.lastKey) < t.keyWindow
}

// State is whether the device is in use now and why (link.BusyRun,
// BusyQuestion, BusyKeys, in that order), and a channel closed at the
// next change.
func (t *Tracker) State() (busy bool, why string, changed <-chan struct{}) {
	runs := t.runs() // outside mu: it takes the client's lock
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case runs > 0:
		why = link.BusyRun
	case t.question:
		why = link.BusyQuestion
	case t.keysLocked(time.Now()):
		why = link.BusyKeys
	}
	return why != "", why, t.changed
}

// Busy is whether the device is in use now.
func (t *Tracker) Busy() bool {
	b, _, _ := t.State()
	return b
}

// WaitIdle returns once the device is not in use (at once when it is
// not), or ctx's error. runsPoll bounds how long a change of the runs
// (which the tracker is not told of unless Changed is called) takes to
// be seen.
func (t *Tracker) WaitIdle(ctx context.Context) error {
	for {
		busy, _, changed := t.State()
		if !busy {
			return nil
		}
		tm := time.NewTimer(runsPoll)
		select {
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		case <-changed:
		case <-tm.C:
		}
		tm.Stop()
	}
}

// runsPoll is how often the runs in progress are read again while
// nothing else changes.
const runsPoll = time.Second

// Report calls send with the device's state now, then with each change,
// at most one per MinReportGap (a change and its undoing within the gap
// send only the state at its end), until ctx ends.
func (t *Tracker) Report(ctx context.Context, send func(busy bool, why string)) {
	lastWhy, sent := "", false
	var lastAt time.Time
	for {
		busy, why, changed := t.State()
		if !sent || why != lastWhy {
			if wait := MinReportGap - time.Since(lastAt); sent && wait > 0 {
				tm := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					tm.Stop()
					return
				case <-tm.C:
				}
				continue // the state at the gap's end
			}
			send(busy, why)
			lastWhy, sent, lastAt = why, true, time.Now()
		}
		tm := time.NewTimer(runsPoll)
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-changed:
		case <-tm.C:
		}
		tm.Stop()
	}
}

// Stop releases the key timer.
func (t *Tracker) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keyTimer != nil {
		t.keyTimer.Stop()
	}
}
