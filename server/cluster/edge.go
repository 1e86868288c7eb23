package cluster

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"termlink/server/bus"
)

// Key names a message: its session and id.
type Key struct{ Session, MessageID string }

// KeyOf is in's key.
func KeyOf(in bus.Inbound) Key { return Key{in.SessionKey, in.MessageID} }

// Waits is an edge's book of what it owes devices: the messages it
// acked (or is acking) and has not answered yet, per session; the
// presence revision of each peer it holds. (A session's later messages
// wait for one whose accept failed above the store, in the runtime:
// package record/holdback.) Safe for concurrent use.
type Waits struct {
	mu      sync.Mutex
	waiting map[Key]*edgeWait   // acked to a device here, reply not yet sent
	bySess  map[string][]string // per session, the message ids of waiting, oldest first
	present map[string]uint64   // per channel+peer held here, its presence revision
	// last: per session, the stream sequence of its last message this
	// edge stored (LastStored), bounded by maxLastStored.
	last map[string]uint64
}

// maxLastStored bounds the sessions an edge remembers the last stored
// message of; past it the memory is cleared (each session's next publish
// then learns it from the stream's answer).
const maxLastStored = 1 << 16

// edgeWait is a message an edge acked and has not answered yet.
type edgeWait struct {
	channel, peer string
	since         time.Time
	checked       time.Time
	acking        bool          // the ack is not written yet
	parked        *bus.Outbound // a reply that came before the ack
	parkedDelta   *bus.Outbound // the latest delta that came before the ack (each carries all the text so far)
}

// NewWaits makes an empty book.
func NewWaits() *Waits {
	return &Waits{waiting: map[Key]*edgeWait{}, bySess: map[string][]string{}, present: map[string]uint64{}, last: map[string]uint64{}}
}

// Len is the number of messages waited on.
func (w *Waits) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiting)
}

// Admit applies the bounds (per session, in all) to the messages
// waited on and, within them, starts waiting on in with its ack not
// written yet, in one step: two accepts cannot both take the last place.
// Refused, it says why. A message waited on already (again: a resend of
// one acked here, not started yet) takes no place and passes any bound:
// the stream keeps one copy, and the resend is answered as a duplicate.
func (w *Waits) Admit(in bus.Inbound, perSession, total int) (again bool, refused string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting[KeyOf(in)] != nil {
		return true, ""
	}
	if n := len(w.bySess[in.SessionKey]); n >= perSession {
		return false, fmt.Sprintf("session %s has %d messages waiting (maxWaitingPerSession)", in.SessionKey, n)
	}
	if len(w.waiting) >= total {
		return false, fmt.Sprintf("the server has %d messages waiting (maxWaitingRuns)", len(w.waiting))
	}
	w.waitLocked(in, true)
	return false, ""
}

// Wait records that the edge waits on in's reply; acking: its ack is
// still to be written, and a reply must not overtake it.
func (w *Waits) Wait(in bus.Inbound, acking bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waitLocked(in, acking)
}

func (w *Waits) waitLocked(in bus.Inbound, acking bool) {
	k := KeyOf(in)
	if w.waiting[k] == nil {
		w.waiting[k] = &edgeWait{channel: in.ChannelID, peer: in.PeerID, since: time.Now(), acking: acking}
		w.bySess[k.Session] = append(w.bySess[k.Session], k.MessageID)
	}
}

// Acked says k's ack is written; it returns a reply that came first,
// to be sent now, else the latest delta that came first.
func (w *Waits) Acked(k Key) *bus.Outbound {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.waiting[k]
	var parked *bus.Outbound
	if e != nil {
		e.acking, parked, e.parked = false, e.parked, nil
		if parked == nil {
			parked = e.parkedDelta // the reply supersedes it
		}
		e.parkedDelta = nil
	}
	return parked
}

// Delta takes a delta (reply text streamed so far): send, to be sent to
// the device now; false, it was parked because its message's ack is not
// written yet (Acked returns it unless the final came too; a later delta
// takes its place, as each carries all the text so far).
func (w *Waits) Delta(out bus.Outbound) (send bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.waiting[Key{out.SessionKey, out.MessageID}]; e != nil && e.acking {
		e.parkedDelta = &out
		return false
	}
	return true
}

// Before lists the messages of k's session this edge began waiting on
// before k and still waits on, oldest first (their acks written); none
// when k is not waited on here. A final that comes while one of them is
// still waited on has overtaken its reply, which was lost on its way
// (the peer moved here just as it went to the old edge): the caller looks
// their claims up first, so the device gets its session's replies in
// order instead of the lost one after the sweep (TestKillEdge, stress
// run 16: message 1's reply came after 2-6's).
func (w *Waits) Before(k Key) []Key {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting[k] == nil {
		return nil
	}
	var out []Key
	for _, id := range w.bySess[k.Session] {
		if id == k.MessageID {
			break
		}
		if e := w.waiting[Key{k.Session, id}]; e != nil && !e.acking {
			out = append(out, Key{k.Session, id})
		}
	}
	return out
}

// Done forgets a message waited on; false if it was not.
func (w *Waits) Done(k Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.doneLocked(k)
}

func (w *Waits) doneLocked(k Key) bool {
	if w.waiting[k] == nil {
		return false
	}
	delete(w.waiting, k)
	ids := slices.DeleteFunc(w.bySess[k.Session], func(id string) bool { return id == k.MessageID })
	if w.bySess[k.Session] = ids; len(ids) == 0 {
		delete(w.bySess, k.Session)
	}
	return true
}

// Final takes a final reply: send, it is to be sent to the device now
// (and is no longer waited on); false, it was parked (its ack is not
// written yet: Acked returns it) or is not waited on here (a second
// copy, or its device left: it gets it from its claim when it resends).
func (w *Waits) Final(out bus.Outbound) (send bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := Key{out.SessionKey, out.MessageID}
	if e := w.waiting[k]; e != nil && e.acking {
		e.parked = &out // the accept sends it after the ack
		return false
	}
	return w.doneLocked(k)
}

// Disconnected forgets what a peer's connection waited on (the device
// resends it wherever it reconnects) and its presence.
func (w *Waits) Disconnected(channel, peer string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, e := range w.waiting {
		if e.channel == channel && e.peer == peer {
			w.doneLocked(k)
		}
	}
	delete(w.present, channel+"\n"+peer)
}

// LastStored is the stream sequence of the session's last message this
// edge stored (0: none known). It is a guess: the publish that follows
// names it as the session's last (Node.publishInbound), and the stream
// refuses it, saying the right one, when another edge stored one since.
func (w *Waits) LastStored(session string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[session]
}

// Stored records the stream sequence of the session's last message (0:
// not known: forgotten).
func (w *Waits) Stored(session string, seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if seq == 0 {
		delete(w.last, session)
		return
	}
	if len(w.last) >= maxLastStored {
		clear(w.last)
	}
	w.last[session] = seq
}

// Present records that the edge holds the peer since presence revision
// rev.
func (w *Waits) Present(channel, peer string, rev uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.present[channel+"\n"+peer] = rev
}

// Newer reports a presence change at rev newer than the connection the
// edge holds for the peer (an older one is a watch running late).
func (w *Waits) Newer(channel, peer string, rev uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return rev > w.present[channel+"\n"+peer]
}

// Due lists up to max messages waited on for longer than age and not
// checked for as long (it marks them checked at now).
func (w *Waits) Due(now time.Time, age time.Duration, max int) []Key {
	w.mu.Lock()
	defer w.mu.Unlock()
	var due []Key
	for k, e := range w.waiting {
		if now.Sub(e.since) > age && now.Sub(e.checked) > age {
			e.checked = now
			due = append(due, k)
			if len(due) == max {
				break
			}
		}
	}
	return due
}

// Waiter is who waits on a message and since when.
type Waiter struct {
	Channel, Peer string
	Since         time.Time
}

// Waiting says who waits on k; false if the edge does not.
func (w *Waits) Waiting(k Key) (Waiter, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.waiting[k]
	if e == nil {
		return Waiter{}, false
	}
	return Waiter{e.channel, e.peer, e.since}, true
}
