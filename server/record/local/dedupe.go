package local

import (
	"container/list"
	"sync"

	"termlink/link"
	"termlink/server/session"
)

// dedupe remembers, per session, the recent message ids: pending while the
// run goes on, then the final reply. It is the spec's "dedupe sees a
// duplicate message id" table.
//
// It is bounded twice: per session by id count (the oldest answered ids go
// first) and server-wide by the bytes of the cached replies. Past the byte
// bound, idle sessions (nothing pending), least recently used first, are
// dropped from memory; the session log still has their replies, and the
// next message for such a session reloads them (load) before deciding
// duplicate or fresh. A session with a pending id is never dropped, so a
// session in memory always knows every id of its log's tail.
//
// Start-up reads only a short tail of each session file (rebuild: enough
// to find the messages left unanswered); such a session is partial, and
// the first id it does not know is looked up after completing it from the
// log (the last perSession messages), so after a restart a resend of any
// of the last perSession answered ids is still a duplicate.
type dedupe struct {
	perSession int   // ids kept per session
	maxBytes   int64 // bytes of cached replies before idle sessions are dropped
	// load reads the records of a session's last n messages from the
	// log; nil or no records for a session the log does not have.
	load func(key string, n int) ([]session.Record, error)

	mu        sync.Mutex
	sessions  map[string]*sessionIDs
	lru       *list.List // of *sessionIDs, most recently used first
	bytes     int64
	reloads   uint64 // sessions read back from the log on demand
	completed uint64 // partial sessions completed from the log
	evictions uint64 // sessions dropped to stay under maxBytes
}

type sessionIDs struct {
	key     string
	entries map[string]*dedupeEntry
	order   []string // insertion order, for eviction
	pending int      // entries without a reply
	bytes   int64
	elem    *list.Element
	// partial: filled from a short tail of the log (start-up), which may
	// lack older answered ids; completed on the first unknown id.
	partial bool
}

type dedupeEntry struct {
	runID string
	reply *link.Message // nil while pending
	// premarked: the start of the message's run was recorded with it
	// (Accept, a message of an idle session that starts at once) or with
	// the reply before it (Finish with next); Start writes nothing then.
	// Only a pending entry is premarked (it is never trimmed or dropped).
	premarked bool
	// sess is the entry's session while it is pending (nil once
	// answered): a pending entry and its session stay in the table, so
	// the entry claim returned reaches both without a lookup (the
	// message's bus.Inbound.Ref).
	sess *sessionIDs
}

// Accounted sizes: the strings plus a rough per-item overhead of the maps,
// slices and structs that hold them.
const (
	dedupeEntryOverhead   = 96
	dedupeSessionOverhead = 256
)

func entryBytes(id string, e *dedupeEntry) int64 {
	n := int64(dedupeEntryOverhead + 2*len(id) + len(e.runID))
	if r := e.reply; r != nil {
		n += int64(len(r.Text) + len(r.RunID) + len(r.FinishReason) + len(r.MessageID))
	}
	return n
}

// isPending reports whether messageID of the session is accepted and not
// yet answered (a session with a pending id is always in memory).
func (d *dedupe) isPending(sessionKey, messageID string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sessions[sessionKey]
	if s == nil {
		return false
	}
	e := s.entries[messageID]
	return e != nil && e.reply == nil
}

func newDedupe(perSession int, maxBytes int64, load func(string, int) ([]session.Record, error)) *dedupe {
	return &dedupe{perSession: perSession, maxBytes: maxBytes, load: load,
		sessions: map[string]*sessionIDs{}, lru: list.New()}
}

// session returns the session's ids, reading them from the log first if
// they are not in memory; mu is held on return (also on error: then s is
// nil). The read happens without mu; if another caller put the session in
// memory meanwhile, that copy wins (it may hold newer claims).
func (d *dedupe) session(key string) (*sessionIDs, error) {
	d.mu.Lock()
	if s := d.sessions[key]; s != nil {
		d.lru.MoveToFront(s.elem)
		return s, nil
	}
	d.mu.Unlock()
	var recs []session.Record
	if d.load != nil {
		var err error
		if recs, err = d.load(key, d.perSession); err != nil {
			d.mu.Lock()
			return nil, err
		}
	}
	d.mu.Lock()
	if s := d.sessions[key]; s != nil {
		d.lru.MoveToFront(s.elem)
		return s, nil
	}
	d.reloads++
	return d.insert(key, recs), nil
}

// insert puts a session in memory with the replies of recs (assistant
// records with a message id; a user record without a reply is not
// remembered: nothing runs it, so a resend runs it). mu is held.
func (d *dedupe) insert(key string, recs []session.Record) *sessionIDs {
	s := &sessionIDs{key: key, entries: map[string]*dedupeEntry{}, bytes: dedupeSessionOverhead + int64(len(key))}
	s.elem = d.lru.PushFront(s)
	d.sessions[key] = s
	d.bytes += s.bytes
	for _, r := range recs {
		if r.Role == "assistant" && r.MessageID != "" {
			d.setReply(s, r.MessageID, &link.Message{Role: link.RoleAssistant, MessageID: r.MessageID,
				RunID: r.RunID, Text: r.Content, FinishReason: r.FinishReason})
		}
	}
	return s
}

// claim records messageID as pending under runID, unless it is known: then
// it returns the earlier entry and fresh=false. A session not in memory is
// read from the log first; err is that read's failure. A fresh claim
// returns its entry (claimed), which stays in the table while it is
// pending: premark marks it without a lookup.
func (d *dedupe) claim(sessionKey, messageID, runID string) (prior dedupeEntry, claimed *dedupeEntry, err error) {
	s, err := d.session(sessionKey)
	defer d.mu.Unlock()
	if err != nil {
		return dedupeEntry{}, nil, err
	}
	if e := s.entries[messageID]; e != nil {
		return *e, nil, nil
	}
	if s.partial {
		if s, err = d.complete(s); err != nil {
			return dedupeEntry{}, nil, err
		}
		if e := s.entries[messageID]; e != nil {
			return *e, nil, nil
		}
	}
	e := d.addPending(s, messageID, runID)
	d.trim(s)
	return dedupeEntry{}, e, nil
}

// premark marks a pending entry claim returned: its start is recorded.
func (d *dedupe) premark(e *dedupeEntry) {
	d.mu.Lock()
	if e.reply == nil {
		e.premarked = true
	}
	d.mu.Unlock()
}

// takePremark reports whether messageID's start was recorded with it or
// with the reply before it, and clears the mark (the run starts now).
// ref is its entry, as for finish.
func (d *dedupe) takePremark(sessionKey, messageID string, ref *dedupeEntry) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ref != nil {
		on := ref.premarked && ref.sess != nil
		ref.premarked = false
		return on
	}
	if s := d.sessions[sessionKey]; s != nil {
		if e := s.entries[messageID]; e != nil && e.premarked {
			e.premarked = false
			return true
		}
	}
	return false
}

// complete reads the last perSession messages of a partial session from
// the log and adds the answered ids it lacks, as older than those it has.
// mu is held on entry and on return; the read happens without it. It
// returns the session as it is in memory now (it may have been dropped
// and read back meanwhile; then that copy, complete, is returned).
func (d *dedupe) complete(s *sessionIDs) (*sessionIDs, error) {
	key := s.key
	d.mu.Unlock()
	recs, err := d.load(key, d.perSession)
	d.mu.Lock()
	if err != nil {
		return nil, err
	}
	cur := d.sessions[key]
	if cur == nil {
		d.reloads++
		return d.insert(key, recs), nil
	}
	if !cur.partial {
		return cur, nil // completed meanwhile
	}
	cur.partial = false
	d.completed++
	var older []string
	for _, r := range recs {
		if r.Role != "assistant" || r.MessageID == "" || cur.entries[r.MessageID] != nil {
			continue
		}
		e := &dedupeEntry{runID: r.RunID, reply: &link.Message{Role: link.RoleAssistant, MessageID: r.MessageID,
			RunID: r.RunID, Text: r.Content, FinishReason: r.FinishReason}}
		cur.entries[r.MessageID] = e
		older = append(older, r.MessageID)
		d.grow(cur, entryBytes(r.MessageID, e))
	}
	cur.order = append(older, cur.order...)
	d.trim(cur)
	return cur, nil
}

// addPending adds messageID, not yet known in s, as pending; mu is held.
func (d *dedupe) addPending(s *sessionIDs, messageID, runID string) *dedupeEntry {
	e := &dedupeEntry{runID: runID, sess: s}
	s.entries[messageID] = e
	s.order = append(s.order, messageID)
	s.pending++
	d.grow(s, entryBytes(messageID, e))
	return e
}

func (d *dedupe) grow(s *sessionIDs, n int64) {
	s.bytes += n
	d.bytes += n
}

// setReply stores reply under messageID in s (adding the id if needed).
func (d *dedupe) setReply(s *sessionIDs, messageID string, reply *link.Message) {
	e := s.entries[messageID]
	if e == nil {
		e = &dedupeEntry{}
		s.entries[messageID] = e
		s.order = append(s.order, messageID)
	} else {
		d.grow(s, -entryBytes(messageID, e))
		if e.reply == nil {
			s.pending--
		}
	}
	d.answer(s, messageID, e, reply)
}

// answer stores reply in e, the entry of messageID in s (pending, or
// new); mu is held.
func (d *dedupe) answer(s *sessionIDs, messageID string, e *dedupeEntry, reply *link.Message) {
	e.runID = reply.RunID
	e.reply = reply
	e.premarked = false // answered (a message cancelled before its start)
	e.sess = nil
	d.grow(s, entryBytes(messageID, e))
	d.trim(s)
}

// trim drops the oldest answered ids of s beyond the per-session bound
// (pending ids stay), then idle sessions beyond the byte bound. A full
// session trims at every claim and reply, so the scan stops at the last id
// it drops (usually the first): the ids after it are kept as they are,
// without a lookup each.
func (d *dedupe) trim(s *sessionIDs) {
	if len(s.order) > d.perSession {
		excess := len(s.order) - d.perSession
		kept := s.order[:0]
		for i, id := range s.order {
			if excess == 0 {
				kept = append(kept, s.order[i:]...) // copy: overlap-safe
				break
			}
			if e := s.entries[id]; e.reply != nil {
				d.grow(s, -entryBytes(id, e))
				delete(s.entries, id)
				excess--
				continue
			}
			kept = append(kept, id)
		}
		clear(s.order[len(kept):])
		s.order = kept
	}
	for e := d.lru.Back(); e != nil && d.maxBytes > 0 && d.bytes > d.maxBytes; {
		prev := e.Prev()
		if idle := e.Value.(*sessionIDs); idle.pending == 0 && idle != s {
			d.lru.Remove(e)
			delete(d.sessions, idle.key)
			d.bytes -= idle.bytes
			d.evictions++
		}
		e = prev
	}
}

// finish stores the reply of messageID. A session that is not in memory is
// left to the log (the reply is there: it was written first). ref is
// the message's entry if its Accept here claimed it (bus.Inbound.Ref;
// nil: looked up).
func (d *dedupe) finish(sessionKey, messageID string, reply *link.Message, ref *dedupeEntry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := ref; e != nil && e.sess != nil && e.reply == nil {
		d.grow(e.sess, -entryBytes(messageID, e))
		e.sess.pending--
		d.answer(e.sess, messageID, e, reply)
		return
	}
	if s := d.sessions[sessionKey]; s != nil {
		d.setReply(s, messageID, reply)
	}
}

// premarkPending marks messageID's start as recorded if it is pending
// (accepted, not answered), and reports whether it was; setPremark(false)
// takes the mark back (the record was not written after all). ref is
// its entry, as for finish.
func (d *dedupe) premarkPending(sessionKey, messageID string, ref *dedupeEntry) bool {
	return d.setPremark(sessionKey, messageID, ref, true)
}

func (d *dedupe) setPremark(sessionKey, messageID string, ref *dedupeEntry, on bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ref != nil {
		if ref.reply != nil || ref.sess == nil {
			return false
		}
		ref.premarked = on
		return true
	}
	if s := d.sessions[sessionKey]; s != nil {
		if e := s.entries[messageID]; e != nil && e.reply == nil {
			e.premarked = on
			return true
		}
	}
	return false
}

// forget removes a claim whose message could not be accepted after all.
func (d *dedupe) forget(sessionKey, messageID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sessions[sessionKey]
	if s == nil {
		return
	}
	e := s.entries[messageID]
	if e == nil {
		return
	}
	if e.reply == nil {
		s.pending--
	}
	e.sess = nil // a Ref to it finds nothing pending
	e.premarked = false
	d.grow(s, -entryBytes(messageID, e))
	delete(s.entries, messageID)
	for i, id := range s.order {
		if id == messageID {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

// DedupeStats are the dedupe table's size and counters.
type DedupeStats struct {
	Sessions  int
	Bytes     int64
	Reloads   uint64
	Completed uint64
	Evictions uint64
}

func (d *dedupe) stats() DedupeStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return DedupeStats{Sessions: len(d.sessions), Bytes: d.bytes, Reloads: d.reloads, Completed: d.completed, Evictions: d.evictions}
}
