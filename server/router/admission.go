package router

import (
	"context"
	"fmt"
	"sync"

	"termlink/server/record"
)

// Admission bounds the messages accepted and not yet started, per session
// and server-wide. AcceptInbound reserves a place before it writes a
// message to the session log; the place is released when the message
// leaves the waiting state: its run starts (or it joins a running turn), it
// is cancelled while queued, or it is left for the next start at stop. The
// router holds every such message in one place (on its way to Put,
// queue, injection in flight), so each release matches one reservation.
//
// A refused caller may wait for room instead of answering busy (Wait, or
// the refusal's WaitRoom): waiters are served in order, each woken alone
// when a place is held for it (no wake for many, no spin). A waiter whose
// session is at its bound waits for that session to release a place, then
// joins the server-wide line; while anyone is in that line, a freed place
// goes to its head (held for it: the waiter's next ReserveFirst takes it),
// so a fresh message cannot overtake the ones that waited.
type Admission struct {
	maxTotal int

	mu        sync.Mutex
	total     int // places taken, held ones included
	bySession map[string]int

	line    []*Waiter // waiting for a server-wide place, oldest first (done ones skipped)
	head    int       // line[head:] is the line
	inLine  int       // live waiters in line
	blocked map[string][]*Waiter
	held    map[string][]*Waiter // a place is held for these, not yet taken
}

// NewAdmission bounds the messages waiting to maxTotal in all.
func NewAdmission(maxTotal int) *Admission {
	return &Admission{maxTotal: maxTotal, bySession: map[string]int{},
		blocked: map[string][]*Waiter{}, held: map[string][]*Waiter{}}
}

// BusyError is ReserveFirst's refusal: it wraps record.ErrBusy, says which
// bound refused, and lets the caller wait for room (WaitRoom).
type BusyError struct {
	a          *Admission
	key        string
	perSession int
	waiting    int  // what the bound counted
	server     bool // the server-wide bound refused (else the session's)
}

// Error says which bound refused; it is formatted only when asked (a
// refusal the caller waits out is never formatted).
func (e *BusyError) Error() string {
	if e.server {
		return fmt.Sprintf("%v: the server has %d messages waiting (maxWaitingRuns)", record.ErrBusy, e.waiting)
	}
	return fmt.Sprintf("%v: session %s has %d messages waiting (maxWaitingPerSession)", record.ErrBusy, e.key, e.waiting)
}
func (e *BusyError) Unwrap() error { return record.ErrBusy }

// WaitRoom registers a waiter for a place of the refused message's session
// (Admission.Wait): ready is closed once a place is held for it; done must
// be called once the message was offered again (or is given up).
func (e *BusyError) WaitRoom() (ready <-chan struct{}, done func()) {
	w := e.a.Wait(e.key, e.perSession)
	return w.ready, w.Done
}

// Reserve takes a place for one message of session key, or returns an
// error wrapping record.ErrBusy that says which bound refused it.
func (a *Admission) Reserve(key string, perSession int) error {
	_, err := a.ReserveFirst(key, perSession)
	return err
}

// ReserveFirst is Reserve that also reports whether the session had no
// other message waiting (accepted, not yet started). A place held for a
// waiter of the session (Wait) is taken first. The refusal is a
// *BusyError.
func (a *Admission) ReserveFirst(key string, perSession int) (first bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if hs := a.held[key]; len(hs) > 0 {
		a.takeHeldLocked(hs[0])
		return a.bySession[key] == 1, nil
	}
	n := a.bySession[key]
	if n >= perSession {
		return false, &BusyError{a: a, key: key, perSession: perSession, waiting: n}
	}
	if a.total >= a.maxTotal || a.inLine > 0 {
		return false, &BusyError{a: a, key: key, perSession: perSession, waiting: a.total, server: true}
	}
	a.bySession[key]++
	a.total++
	return n == 0, nil
}

// ReserveWait is Reserve that waits (in line, see Admission) for a place
// until ctx ends.
func (a *Admission) ReserveWait(ctx context.Context, key string, perSession int) error {
	w := a.Wait(key, perSession)
	select {
	case <-w.ready:
		a.mu.Lock()
		if w.state == waiterHeld {
			a.takeHeldLocked(w)
		}
		a.mu.Unlock()
		return nil
	case <-ctx.Done():
		w.Done()
		return ctx.Err()
	}
}

// Release gives back n places of session key; a waiter it makes room for
// gets the place.
func (a *Admission) Release(key string, n int) {
	if n <= 0 {
		return
	}
	a.mu.Lock()
	a.releaseLocked(key, n)
	a.mu.Unlock()
}

func (a *Admission) releaseLocked(key string, n int) {
	if left := a.bySession[key] - n; left > 0 {
		a.bySession[key] = left
	} else {
		delete(a.bySession, key)
	}
	a.total -= n
	if bl := a.blocked[key]; len(bl) > 0 {
		for len(bl) > 0 && a.bySession[key] < bl[0].perSession {
			w := bl[0]
			bl[0] = nil
			bl = bl[1:]
			a.placeLocked(w)
		}
		if len(bl) == 0 {
			delete(a.blocked, key)
		} else {
			a.blocked[key] = bl
		}
	}
	a.serveLineLocked()
}

// Waiting is the number of messages waiting (places held for waiters
// included).
func (a *Admission) Waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

// Waiters is the number of callers waiting for a place (no place held for
// them yet).
func (a *Admission) Waiters() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.inLine
	for _, bl := range a.blocked {
		n += len(bl)
	}
	return n
}

// MaxTotal is the bound on the messages waiting in all.
func (a *Admission) MaxTotal() int { return a.maxTotal }

// Waiter is one caller waiting for a place of its session (Wait).
type Waiter struct {
	a          *Admission
	key        string
	perSession int
	ready      chan struct{}
	state      waiterState // guarded by a.mu
}

type waiterState uint8

const (
	waiterBlocked waiterState = iota // its session is at its bound
	waiterInLine                     // in the server-wide line
	waiterHeld                       // a place is held for it
	waiterDone                       // its place was taken, or it gave up
)

// Wait registers a caller for a place of session key (perSession its
// bound): Ready is closed once a place is held for it, which the
// session's next ReserveFirst takes. Done must be called once the caller
// has offered its message again or gives up; a place held and not taken
// goes to the next waiter. A place free now (and nobody in line) is held
// at once.
func (a *Admission) Wait(key string, perSession int) *Waiter {
	w := &Waiter{a: a, key: key, perSession: perSession, ready: make(chan struct{})}
	a.mu.Lock()
	a.placeLocked(w)
	a.mu.Unlock()
	return w
}

// Ready is closed once a place is held for w.
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// Done ends w's wait; a place held for it and not taken is released.
func (w *Waiter) Done() {
	a := w.a
	a.mu.Lock()
	defer a.mu.Unlock()
	switch w.state {
	case waiterBlocked:
		a.blocked[w.key] = removeWaiter(a.blocked[w.key], w)
		if len(a.blocked[w.key]) == 0 {
			delete(a.blocked, w.key)
		}
	case waiterInLine:
		a.inLine-- // skipped when it reaches the head
		w.state = waiterDone
		a.compactLocked()
	case waiterHeld:
		a.dropHeldLocked(w)
		w.state = waiterDone
		a.releaseLocked(w.key, 1)
	}
	w.state = waiterDone
}

// placeLocked puts w where it waits, or holds a place for it now.
func (a *Admission) placeLocked(w *Waiter) {
	switch {
	case a.bySession[w.key] >= w.perSession:
		w.state = waiterBlocked
		a.blocked[w.key] = append(a.blocked[w.key], w)
	case a.total >= a.maxTotal || a.inLine > 0:
		w.state = waiterInLine
		a.line = append(a.line, w)
		a.inLine++
	default:
		a.holdLocked(w)
	}
}

// serveLineLocked holds the free places for the waiters in line, in order.
func (a *Admission) serveLineLocked() {
	for a.inLine > 0 && a.total < a.maxTotal {
		w := a.line[a.head]
		a.line[a.head] = nil
		a.head++
		if w.state != waiterInLine {
			continue // gave up
		}
		a.inLine--
		if a.bySession[w.key] >= w.perSession { // its session filled meanwhile
			w.state = waiterBlocked
			a.blocked[w.key] = append(a.blocked[w.key], w)
			continue
		}
		a.holdLocked(w)
	}
	a.compactLocked()
}

// compactLocked drops the line's served and given-up entries once they
// are most of it, so its memory follows the waiters.
func (a *Admission) compactLocked() {
	if len(a.line)-a.head <= 2*a.inLine+16 && a.head <= len(a.line)/2 {
		return
	}
	n := 0
	for _, w := range a.line[a.head:] {
		if w != nil && w.state == waiterInLine {
			a.line[n] = w
			n++
		}
	}
	clear(a.line[n:])
	a.line, a.head = a.line[:n], 0
}

func (a *Admission) holdLocked(w *Waiter) {
	a.total++
	a.bySession[w.key]++
	w.state = waiterHeld
	a.held[w.key] = append(a.held[w.key], w)
	close(w.ready)
}

// takeHeldLocked turns w's held place into a reservation.
func (a *Admission) takeHeldLocked(w *Waiter) {
	a.dropHeldLocked(w)
	w.state = waiterDone
}

func (a *Admission) dropHeldLocked(w *Waiter) {
	hs := removeWaiter(a.held[w.key], w)
	if len(hs) == 0 {
		delete(a.held, w.key)
	} else {
		a.held[w.key] = hs
	}
}

func removeWaiter(ws []*Waiter, w *Waiter) []*Waiter {
	for i, x := range ws {
		if x == w {
			copy(ws[i:], ws[i+1:])
			ws[len(ws)-1] = nil
			return ws[:len(ws)-1]
		}
	}
	return ws
}
