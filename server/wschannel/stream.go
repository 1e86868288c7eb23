package wschannel

import (
	"sort"
	"sync"
	"time"

	"termlink/link"
)

// Streamed replies (the "stream" extension): a run's text on its way,
// as delta frames. The runtime's Send hands the adapter a bus.Delta whose
// Text is all the run's text so far; the adapter sends each connection
// only what it lacks.
//
// On a connection (one whose connect listed "stream"), each message being
// streamed has a slot (connStream): the text not yet written (one string,
// the latest wins), how much of it was written and the last seq. The
// writer takes every slot's new suffix as one delta frame (seq+1), at most
// one such batch per deltaGap (about 8 a second): updates that come
// meanwhile replace the slot's string, so a device that does not read
// costs one string per stream, never a queue, and deltas never count
// toward dropping it. A batch's deltas go before its replies, and a final
// reply drops its message's slot: no delta follows a reply.
//
// The adapter keeps, per peer, the open streams' text so far (streams),
// so a device that reconnects mid-run is sent one delta with all of it
// right behind connected (seq 1 on the new connection), then the rest.
// That store is bounded: an entry goes at its final reply's Send, whether
// or not the peer is connected; a peer keeps at most maxStreamsPerPeer
// (the least recently updated goes); entries not updated for streamIdle
// are evicted; and all the text kept is within maxStreamBytes (past it a
// stream is not kept: a device reconnecting gets its text with the next
// delta instead of at once).

// deltaGap is the least time between two batches of deltas on one
// connection (a variable only for the benchmark, which measures a delta
// without it).
var deltaGap = 125 * time.Millisecond

const (
	maxStreamsPerPeer = 16
	maxStreamBytes    = 64 << 20
	streamIdle        = 10 * time.Minute
	streamSweepEvery  = time.Minute
)

// connStream is one streamed message on a connection (c.mu).
type connStream struct {
	pending string // all the text so far, when longer than sent; "" when nothing waits
	sent    int    // bytes of the text written
	seq     int64  // the last delta's seq
}

// offerDelta puts text (all of messageID's text so far) in the message's
// slot, replacing what the writer has not taken yet; text no longer than
// what the slot has is stale and ignored. false: not taken (closing, or
// the connection has its most streams).
func (c *wsConn) offerDelta(messageID, text string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state >= connClosing {
		return false
	}
	q := c.busy()
	s := q.streams[messageID]
	if s == nil {
		if len(q.streams) >= c.maxFrames() {
			return false // best effort: the final reply carries the text
		}
		if q.streams == nil {
			q.streams = map[string]*connStream{}
		}
		s = &connStream{}
		q.streams[messageID] = s
	}
	if len(text) <= max(s.sent, len(s.pending)) {
		return true // nothing new
	}
	if s.pending == "" {
		q.deltaOrder = append(q.deltaOrder, messageID)
	}
	s.pending = text
	c.deltasDueLocked(time.Now())
	return true
}

// deltasDueLocked has the writer take the waiting deltas now, or arms the
// timer that does once the gap since the last batch has passed (c.mu
// held). Before connected is taken the writer holds them back itself.
func (c *wsConn) deltasDueLocked(now time.Time) {
	q := c.q
	switch {
	case q == nil || len(q.deltaOrder) == 0 || c.state >= connClosing:
	case now.UnixNano() >= c.deltaNext:
		c.startWriterLocked()
	case q.deltaTimer == nil:
		q.deltaTimer = time.AfterFunc(time.Duration(c.deltaNext-now.UnixNano()), c.deltaTimerFired)
	}
}

func (c *wsConn) deltaTimerFired() {
	c.mu.Lock()
	if c.q != nil {
		c.q.deltaTimer = nil
	}
	c.deltasDueLocked(time.Now())
	c.mu.Unlock()
}

// takeDeltas moves the waiting deltas into b, if the gap allows (c.mu
// held, connected taken).
func (c *wsConn) takeDeltas(b *batch) {
	q := c.q
	if len(q.deltaOrder) == 0 {
		return
	}
	now := time.Now()
	if now.UnixNano() < c.deltaNext {
		c.deltasDueLocked(now)
		return
	}
	if b.deltaBuf == nil {
		b.deltaBuf = deltaBufs.Get().(*[]link.Delta)
		b.deltas = (*b.deltaBuf)[:0]
	}
	for _, id := range q.deltaOrder {
		s := q.streams[id]
		if s == nil || s.pending == "" {
			continue
		}
		s.seq++
		b.deltas = append(b.deltas, link.Delta{MessageID: id, Seq: s.seq, Text: s.pending[s.sent:]})
		s.sent, s.pending = len(s.pending), ""
	}
	clear(q.deltaOrder)
	q.deltaOrder = q.deltaOrder[:0]
	c.deltaNext = now.Add(deltaGap).UnixNano()
}

// deltaBufs holds the batches' delta lists: taking deltas allocates
// nothing in the steady state, and an idle connection holds none.
var deltaBufs = sync.Pool{New: func() any { b := make([]link.Delta, 0, 4); return &b }}

// endStreamLocked forgets messageID's stream on c: its final reply is
// queued (c.mu held).
func (c *wsConn) endStreamLocked(messageID string) {
	q := c.q
	if q == nil {
		return
	}
	if s, ok := q.streams[messageID]; ok {
		if s.pending != "" {
			q.deltaOrder = deleteString(q.deltaOrder, messageID)
		}
		delete(q.streams, messageID)
	}
}

// dropStreamsLocked lets go of every stream of a closing connection (c.mu
// held): deltas are not worth writing then.
func (c *wsConn) dropStreamsLocked() {
	q := c.q
	if q == nil {
		return
	}
	q.streams, q.deltaOrder = nil, nil
	if q.deltaTimer != nil {
		q.deltaTimer.Stop()
		q.deltaTimer = nil
	}
}

// streamsOnConnect queues, right behind connected, one delta per open
// stream of c's peer with all its text so far, if c listed "stream".
func (c *wsConn) streamsOnConnect() {
	if !c.stream {
		return
	}
	a := c.a
	// Under a.mu: a final reply's Send (which forgets the stream under
	// a.mu first) is either seen here or queued after these deltas.
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.streams.of(c.peerID) {
		c.offerDelta(s.id, s.text)
	}
}

// openStreams is what an adapter keeps of its peers' open streams (a.mu).
type openStreams struct {
	byPeer    map[string]map[string]*openStream
	bytes     int // of all the texts
	maxBytes  int
	lastSweep time.Time
}

type openStream struct {
	id      string
	text    string
	updated time.Time
}

// put records text, all of message id's text so far.
func (s *openStreams) put(peer, id, text string, now time.Time) {
	if now.Sub(s.lastSweep) >= streamSweepEvery {
		s.sweep(now)
	}
	limit := s.maxBytes
	if limit == 0 {
		limit = maxStreamBytes
	}
	m := s.byPeer[peer]
	if e := m[id]; e != nil {
		if len(text) <= len(e.text) {
			return // stale
		}
		if s.bytes+len(text)-len(e.text) > limit {
			s.remove(peer, id) // over budget: not kept
			return
		}
		s.bytes += len(text) - len(e.text)
		e.text, e.updated = text, now
		return
	}
	if s.bytes+len(text) > limit {
		return
	}
	if m == nil {
		if s.byPeer == nil {
			s.byPeer = map[string]map[string]*openStream{}
		}
		m = map[string]*openStream{}
		s.byPeer[peer] = m
	}
	if len(m) >= maxStreamsPerPeer {
		var oldest *openStream
		for _, e := range m {
			if oldest == nil || e.updated.Before(oldest.updated) {
				oldest = e
			}
		}
		s.remove(peer, oldest.id)
	}
	m[id] = &openStream{id: id, text: text, updated: now}
	s.bytes += len(text)
}

// remove forgets message id's stream (its final reply is sent).
func (s *openStreams) remove(peer, id string) {
	m := s.byPeer[peer]
	e := m[id]
	if e == nil {
		return
	}
	s.bytes -= len(e.text)
	delete(m, id)
	if len(m) == 0 {
		delete(s.byPeer, peer)
	}
}

// sweep evicts the streams not updated for streamIdle (a run whose reply
// never came here: a hard stop, or it went to another edge).
func (s *openStreams) sweep(now time.Time) {
	s.lastSweep = now
	for peer, m := range s.byPeer {
		for id, e := range m {
			if now.Sub(e.updated) >= streamIdle {
				s.remove(peer, id)
			}
		}
	}
}

// of lists peer's open streams, oldest update first.
func (s *openStreams) of(peer string) []openStream {
	m := s.byPeer[peer]
	if len(m) == 0 {
		return nil
	}
	out := make([]openStream, 0, len(m))
	for _, e := range m {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].updated.Before(out[j].updated) })
	return out
}

// count is the number of streams kept (tests).
func (s *openStreams) count() int {
	n := 0
	for _, m := range s.byPeer {
		n += len(m)
	}
	return n
}
