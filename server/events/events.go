// Package events keeps a channel's recent events (terminal_connected,
// inbound_accepted, outbound_unclaimed, ...) in a bounded ring for the
// /api/channels/{id}/events endpoint. Events carry previews only: message
// text is cut to PreviewChars and raw payloads are never stored.
package events

import (
	"sync"
	"time"
	"unicode/utf8"
)

// Event names of the terminal channel spec.
const (
	AdapterStarted       = "adapter_started"
	TerminalConnected    = "terminal_connected"
	TerminalDisconnected = "terminal_disconnected"
	InboundAccepted      = "inbound_accepted"
	InboundDuplicate     = "inbound_duplicate"
	DirectRunStarted     = "direct_run_started"
	DirectRunFinished    = "direct_run_finished"
	OutboundDelivered    = "outbound_delivered"
	OutboundUnclaimed    = "outbound_unclaimed"
	AdapterStopped       = "adapter_stopped"
	// Beyond the spec: refusals, so an operator sees why a device failed.
	TerminalRefused = "terminal_refused"
	InboundRejected = "inbound_rejected"
)

// PreviewChars is how much of a message's text an event keeps.
const PreviewChars = 48

// Event is one entry of a channel's log.
type Event struct {
	Seq       uint64    `json:"seq"`
	At        time.Time `json:"at"`
	Event     string    `json:"event"`
	PeerID    string    `json:"peer_id,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	MessageID string    `json:"message_id,omitempty"`
	RunID     string    `json:"run_id,omitempty"`
	Preview   string    `json:"preview,omitempty"`
	Detail    string    `json:"detail,omitempty"`
}

// Preview cuts text to PreviewChars characters, marking the cut with "…".
func Preview(text string) string {
	if utf8.RuneCountInString(text) <= PreviewChars {
		return text
	}
	n := 0
	for i := range text {
		if n == PreviewChars {
			return text[:i] + "…"
		}
		n++
	}
	return text
}

// Log is a bounded ring of events; safe for concurrent use.
type Log struct {
	mu   sync.Mutex
	ring []Event
	next uint64 // seq of the next event; ring index is seq % len(ring)
	last time.Time
}

// NewLog keeps the newest size events.
func NewLog(size int) *Log {
	if size < 1 {
		size = 1
	}
	return &Log{ring: make([]Event, size)}
}

// Add records e, setting its sequence number and, if zero, its time. The
// preview is cut here, so callers may pass the full text.
func (l *Log) Add(e Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	e.Preview = Preview(e.Preview)
	l.mu.Lock()
	e.Seq = l.next
	l.ring[l.next%uint64(len(l.ring))] = e
	l.next++
	l.last = e.At
	l.mu.Unlock()
}

// Recent returns up to limit newest events, oldest first (newest last).
func (l *Log) Recent(limit int) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := uint64(len(l.ring))
	if l.next < n {
		n = l.next
	}
	if limit >= 0 && uint64(limit) < n {
		n = uint64(limit)
	}
	out := make([]Event, 0, n)
	for seq := l.next - n; seq < l.next; seq++ {
		out = append(out, l.ring[seq%uint64(len(l.ring))])
	}
	return out
}

// LastAt is the time of the newest event (zero when none).
func (l *Log) LastAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}
