package server

import (
	"sync"

	"termlink/link"
)

// dedupe remembers, per session, the recent message ids: pending while the
// run goes on, then the final reply. It is the spec's "dedupe sees a
// duplicate message id" table; it is rebuilt from the session log at start.
type dedupe struct {
	mu         sync.Mutex
	sessions   map[string]*sessionIDs
	perSession int // ids kept per session; the oldest answered ones go first
}

type sessionIDs struct {
	entries map[string]*dedupeEntry
	order   []string // insertion order, for eviction
}

type dedupeEntry struct {
	runID string
	reply *link.Message // nil while pending
}

func newDedupe(perSession int) *dedupe {
	return &dedupe{sessions: map[string]*sessionIDs{}, perSession: perSession}
}

// claim records messageID as pending under runID, unless it is known: then
// it returns the earlier entry and fresh=false.
func (d *dedupe) claim(sessionKey, messageID, runID string) (prior dedupeEntry, fresh bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sessions[sessionKey]
	if s == nil {
		s = &sessionIDs{entries: map[string]*dedupeEntry{}}
		d.sessions[sessionKey] = s
	}
	if e := s.entries[messageID]; e != nil {
		return *e, false
	}
	s.entries[messageID] = &dedupeEntry{runID: runID}
	s.order = append(s.order, messageID)
	d.evict(s)
	return dedupeEntry{}, true
}

// evict drops the oldest answered ids beyond the bound; pending ids stay.
func (d *dedupe) evict(s *sessionIDs) {
	for len(s.order) > d.perSession {
		kept := s.order[:0]
		excess := len(s.order) - d.perSession
		for _, id := range s.order {
			if excess > 0 && s.entries[id].reply != nil {
				delete(s.entries, id)
				excess--
				continue
			}
			kept = append(kept, id)
		}
		s.order = kept
		if excess > 0 { // all pending: nothing more to drop
			return
		}
	}
}

// finish stores the reply of messageID (inserting the id if it was
// evicted or never claimed, as when rebuilding from the log).
func (d *dedupe) finish(sessionKey, messageID string, reply *link.Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sessions[sessionKey]
	if s == nil {
		s = &sessionIDs{entries: map[string]*dedupeEntry{}}
		d.sessions[sessionKey] = s
	}
	e := s.entries[messageID]
	if e == nil {
		e = &dedupeEntry{}
		s.entries[messageID] = e
		s.order = append(s.order, messageID)
	}
	e.runID = reply.RunID
	e.reply = reply
	d.evict(s)
}

// forget removes a claim whose message could not be accepted after all.
func (d *dedupe) forget(sessionKey, messageID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sessions[sessionKey]
	if s == nil {
		return
	}
	delete(s.entries, messageID)
	for i, id := range s.order {
		if id == messageID {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

// pending lists the ids of a session still waiting for a reply, in order.
func (d *dedupe) pending(sessionKey string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sessions[sessionKey]
	if s == nil {
		return nil
	}
	var ids []string
	for _, id := range s.order {
		if s.entries[id].reply == nil {
			ids = append(ids, id)
		}
	}
	return ids
}
