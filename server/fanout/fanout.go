// Package fanout hands values to subscribers without ever waiting for
// one: each subscriber has a bounded buffer, and one that lets it fill
// up is dropped (Done is closed, Lagged reports it) instead of slowing
// the publisher. It carries the live streams of the operator API
// (channel events, registry changes) to Server-Sent Events clients,
// which reconnect when dropped.
package fanout

import "sync"

// Hub publishes values of type T to its subscribers; safe for concurrent
// use. The zero Hub is ready.
type Hub[T any] struct {
	mu   sync.Mutex
	subs map[*Sub[T]]struct{}
}

// Sub is one subscriber.
type Sub[T any] struct {
	hub    *Hub[T]
	c      chan T
	done   chan struct{}
	lagged bool // guarded by hub.mu
	gone   bool // guarded by hub.mu: removed from the hub
}

// Subscribe adds a subscriber that may fall buf values behind (at least 1).
func (h *Hub[T]) Subscribe(buf int) *Sub[T] {
	s := &Sub[T]{hub: h, c: make(chan T, max(buf, 1)), done: make(chan struct{})}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*Sub[T]]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

// Publish hands v to every subscriber without blocking; a subscriber whose
// buffer is full is dropped. It returns how many were dropped.
func (h *Hub[T]) Publish(v T) (dropped int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.c <- v:
		default:
			s.lagged = true
			s.removeLocked()
			dropped++
		}
	}
	return dropped
}

// Len is the number of subscribers.
func (h *Hub[T]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// C delivers the published values, in order.
func (s *Sub[T]) C() <-chan T { return s.c }

// Done is closed when the subscriber is dropped or closed; values still
// buffered in C may be read, but no more come.
func (s *Sub[T]) Done() <-chan struct{} { return s.done }

// Lagged reports whether the subscriber was dropped for falling behind.
func (s *Sub[T]) Lagged() bool {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.lagged
}

// Close removes the subscriber; it is idempotent.
func (s *Sub[T]) Close() {
	s.hub.mu.Lock()
	s.removeLocked()
	s.hub.mu.Unlock()
}

func (s *Sub[T]) removeLocked() {
	if s.gone {
		return
	}
	s.gone = true
	delete(s.hub.subs, s)
	close(s.done)
}
