package cluster

import "sync"

// How many keys a worker remembers as answered lately, and as cancelled
// lately (KeySet): a delivery of one reads its claim before it starts.
// A copy of an answered message comes again when its ack was lost, or
// when a device resent it past the inbound stream's duplicate window
// while it ran; a cancel may come before its message.
const (
	recentAnswered = 1 << 16
	recentCancels  = 1 << 12
)

// KeySet is a bounded set of message keys: past its size, the oldest
// added goes. Safe for concurrent use.
type KeySet struct {
	mu   sync.Mutex
	max  int
	set  map[Key]struct{}
	ring []Key // in the order added; next is the oldest once full
	next int
}

// NewKeySet makes a set of at most max keys.
func NewKeySet(max int) *KeySet {
	return &KeySet{max: max, set: make(map[Key]struct{})}
}

// Add puts k in the set, dropping the oldest key when it is full.
func (s *KeySet) Add(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.set[k]; ok {
		return
	}
	if len(s.ring) < s.max {
		s.ring = append(s.ring, k)
	} else {
		delete(s.set, s.ring[s.next])
		s.ring[s.next] = k
		s.next = (s.next + 1) % s.max
	}
	s.set[k] = struct{}{}
}

// Has reports whether k is in the set.
func (s *KeySet) Has(k Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.set[k]
	return ok
}

// Len is the number of keys in the set.
func (s *KeySet) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.set)
}
