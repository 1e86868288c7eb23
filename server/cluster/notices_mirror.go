package cluster

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/notices"
)

// The mirror of KV termlink_notices each node keeps (notices.go): a watch
// of the whole bucket, this node's own writes taken at once, and the
// pusher that tells the registry and the connections of what changed.

// mnotice is a notice in the mirror.
type mnotice struct {
	ch    string
	c     notices.Content
	wire  []byte
	rev   uint64
	seq   uint64
	gen   uint64
	peers map[string]*mdelivery
}

// mdelivery is a delivery in the mirror.
type mdelivery struct {
	n    *mnotice
	peer string
	v    deliveryValue
	rev  uint64
	seq  uint64
	gen  uint64
}

// mbox is a peer's deliveries in the order the mirror took them.
type mbox struct{ list []*mdelivery }

// The mirror.

// watch follows the bucket into the mirror until ctx ends; a watch that
// ends is made again, and what the new one does not hold is forgotten.
//
// The generation is taken before the watch is made: this node's own
// writes from then on carry it. A write made after the watch's start is
// not in its load but comes through it afterwards; with the generation
// taken after the watch was made, such a write carried the older one and
// the load's end forgot it (until the watch brought it back): a MarkSent
// in between found no delivery and the bucket kept "pending".
func (s *Notices) watch(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		s.gen++
		gen := s.gen
		s.mu.Unlock()
		w, err := watchKV(ctx, s.kv, nil)
		if err != nil {
			s.log.Warn("cluster: cannot watch the notices; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		s.follow(ctx, w, gen)
		_ = w.Stop()
	}
}

func (s *Notices) follow(ctx context.Context, w jetstream.KeyWatcher, gen uint64) {
	loaded := false
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				if !loaded {
					loaded = true
					s.forgetOlder(gen)
					select {
					case <-s.ready:
					default:
						close(s.ready)
					}
				}
				continue
			}
			if e.Operation() == jetstream.KeyValuePut {
				s.applyPut(e.Key(), e.Value(), e.Revision(), gen)
			} else {
				s.applyGone(e.Key(), e.Revision())
			}
		}
	}
}

// applyPut takes a value of key at rev into the mirror (a revision it
// holds already, or an older one, changes nothing); gen is the watch's
// generation, 0 for this node's own write.
func (s *Notices) applyPut(key string, data []byte, rev, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen == 0 { // this node's own write
		gen = s.gen
	}
	if id, ok := strings.CutPrefix(key, "n."); ok {
		if n := s.byID[id]; n != nil {
			n.gen = max(n.gen, gen)
			return // a notice is never rewritten
		}
		var v noticeValue
		if err := json.Unmarshal(data, &v); err != nil || v.NoticeID != id {
			s.log.Warn("cluster: skipping a notice the bucket holds", "key", key, "err", err)
			return
		}
		s.seq++
		s.byID[id] = &mnotice{ch: v.Channel, c: v.Content, wire: notices.Frame(v.Content), rev: rev, seq: s.seq, gen: gen, peers: map[string]*mdelivery{}}
		return
	}
	ch, peer, id, ok := parseDeliveryKey(key)
	if !ok {
		return
	}
	n := s.byID[id]
	if n == nil || n.ch != ch {
		return // its notice is gone (expired)
	}
	var v deliveryValue
	if err := json.Unmarshal(data, &v); err != nil {
		s.log.Warn("cluster: skipping a notice delivery the bucket holds", "key", key, "err", err)
		return
	}
	d := n.peers[peer]
	if d != nil {
		d.gen = max(d.gen, gen)
		if rev <= d.rev {
			return
		}
		d.v, d.rev = v, rev
		s.dirty[chanPeer{ch, peer}] = true
		s.signalLocked()
		return
	}
	s.seq++
	d = &mdelivery{n: n, peer: peer, v: v, rev: rev, seq: s.seq, gen: gen}
	n.peers[peer] = d
	b := s.box(ch, peer, true)
	b.list = append(b.list, d)
	s.dirty[chanPeer{ch, peer}] = true
	s.signalLocked()
}

// applyGone forgets a removed key (its TTL ran out, or a prune).
func (s *Notices) applyGone(key string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := strings.CutPrefix(key, "n."); ok {
		if n := s.byID[id]; n != nil && rev > n.rev {
			s.dropNotice(n)
		}
		return
	}
	ch, peer, id, ok := parseDeliveryKey(key)
	if !ok {
		return
	}
	if n := s.byID[id]; n != nil && n.ch == ch {
		if d := n.peers[peer]; d != nil && rev > d.rev {
			s.dropDelivery(d)
		}
	}
}

// dropNotice forgets n and its deliveries (s.mu held).
func (s *Notices) dropNotice(n *mnotice) {
	for _, d := range n.peers {
		s.dropDelivery(d)
	}
	delete(s.byID, n.c.NoticeID)
}

// dropDelivery forgets d (s.mu held).
func (s *Notices) dropDelivery(d *mdelivery) {
	delete(d.n.peers, d.peer)
	if b := s.box(d.n.ch, d.peer, false); b != nil {
		for i, x := range b.list {
			if x == d {
				b.list = append(b.list[:i], b.list[i+1:]...)
				break
			}
		}
		if len(b.list) == 0 {
			delete(s.boxes[d.n.ch], d.peer)
		}
	}
	s.dirty[chanPeer{d.n.ch, d.peer}] = true
	s.signalLocked()
}

// forgetOlder forgets what a new watch's load did not bring (removed
// while no watch ran).
func (s *Notices) forgetOlder(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.byID {
		if n.gen < gen {
			s.dropNotice(n)
			continue
		}
		for _, d := range n.peers {
			if d.gen < gen {
				s.dropDelivery(d)
			}
		}
	}
}

func (s *Notices) box(ch, peer string, create bool) *mbox {
	m := s.boxes[ch]
	if m == nil {
		if !create {
			return nil
		}
		m = map[string]*mbox{}
		s.boxes[ch] = m
	}
	b := m[peer]
	if b == nil && create {
		b = &mbox{}
		m[peer] = b
	}
	return b
}

func (s *Notices) signal() {
	s.mu.Lock()
	s.signalLocked()
	s.mu.Unlock()
}

func (s *Notices) signalLocked() {
	if !s.started || len(s.dirty) == 0 {
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// pusher tells the registry of each peer whose mailbox changed and
// pushes its notices to its connection, if this node holds it.
func (s *Notices) pusher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		s.mu.Lock()
		dirty := s.dirty
		s.dirty = map[chanPeer]bool{}
		s.mu.Unlock()
		for cp := range dirty {
			if s.opt.Changed != nil {
				s.opt.Changed(cp.ch, cp.peer)
			}
			if s.opt.Push != nil {
				s.opt.Push(cp.ch, cp.peer)
			}
		}
	}
}

// gauges emits per channel the open deliveries (boxes: the peers with one).
func (s *Notices) gauges(emit func(int64, ...string), boxes bool) {
	now := time.Now()
	s.mu.Lock()
	counts := map[string]int64{}
	for ch, peers := range s.boxes {
		counts[ch] += 0
		for _, b := range peers {
			open := int64(0)
			for _, d := range b.list {
				if d.v.open() && now.Before(d.n.c.ExpiresAt) {
					open++
				}
			}
			if boxes {
				open = min(open, 1)
			}
			counts[ch] += open
		}
	}
	s.mu.Unlock()
	chs := make([]string, 0, len(counts))
	for ch := range counts {
		chs = append(chs, ch)
	}
	sort.Strings(chs)
	for _, ch := range chs {
		emit(counts[ch], ch)
	}
}
