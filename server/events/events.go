// Package events keeps a channel's recent events (terminal_connected,
// inbound_accepted, outbound_unclaimed, ...) in a bounded ring for the
// /api/channels/{id}/events endpoint. Events carry previews only: message
// text is cut to PreviewChars, every other field to MaxFieldBytes (a
// rejected peer_id is quoted, not kept), raw payloads are never stored,
// and the ring is bounded in bytes as well as in events.
package events

import (
	"sync"
	"time"
	"unicode/utf8"

	"termlink/server/fanout"
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
	// Fleet operations (issue 28): a device's release download refused,
	// and the staged rollouts of releases (package rollout).
	ReleaseDownloadRefused = "release_download_refused"
	RolloutCreated         = "rollout_created"
	RolloutWave            = "rollout_wave"    // a wave (or the canaries) released
	RolloutDevice          = "rollout_device"  // a device failed, rolled back or refused
	RolloutPaused          = "rollout_paused"  // by itself (naming the device) or by the operator
	RolloutResumed         = "rollout_resumed" // by the operator
	RolloutAborted         = "rollout_aborted"
	RolloutDone            = "rollout_done"
)

// PreviewChars is how much of a message's text an event keeps.
const PreviewChars = 48

// MaxFieldBytes bounds every string field of a stored event (ellipsis
// included): ids and details come from unauthenticated peers.
const MaxFieldBytes = 200

// DefaultMaxBytes bounds the memory of one channel's events.
const DefaultMaxBytes = 1 << 20

// eventOverhead is what an event costs beyond its strings (the struct,
// sequence number and time), for the byte bound.
const eventOverhead = 160

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
	// Node is the cluster node that recorded the event (cluster mode:
	// a channel's events are read from any node).
	Node string `json:"node,omitempty"`
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

// Truncate cuts s to at most max bytes at a UTF-8 boundary, marking the
// cut with "…" (counted in max).
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const mark = "…"
	n := max - len(mark)
	if n < 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}

// size is what e counts toward the byte bound.
func (e *Event) size() int {
	return eventOverhead + len(e.Event) + len(e.PeerID) + len(e.SessionID) +
		len(e.MessageID) + len(e.RunID) + len(e.Preview) + len(e.Detail) + len(e.Node)
}

// Log is a ring of events bounded in count and in bytes; safe for
// concurrent use. When either bound is reached the oldest events go.
type Log struct {
	mu       sync.Mutex
	ring     []Event // capacity: the count bound
	head     int     // index of the oldest event
	n        int     // events held
	bytes    int     // their sizes, summed
	maxBytes int
	next     uint64 // seq of the next event
	last     time.Time
	live     fanout.Hub[Event] // Subscribe: every event as it is added
	onAdd    func(Event)       // NewLogWith
}

// NewLog keeps the newest size events, within DefaultMaxBytes.
func NewLog(size int) *Log { return NewLogLimits(size, DefaultMaxBytes) }

// NewLogLimits keeps the newest events, at most size of them and at most
// maxBytes of them together (at least the newest one is always kept).
func NewLogLimits(size, maxBytes int) *Log {
	return NewLogWith(size, maxBytes, nil)
}

// NewLogWith is NewLogLimits that also hands every event added, as
// recorded (its sequence number set), to onAdd; onAdd must not block (a
// cluster node publishes the channel's events with it).
func NewLogWith(size, maxBytes int, onAdd func(Event)) *Log {
	if size < 1 {
		size = 1
	}
	if maxBytes < 1 {
		maxBytes = DefaultMaxBytes
	}
	return &Log{ring: make([]Event, size), maxBytes: maxBytes, onAdd: onAdd}
}

// Add records e, setting its sequence number and, if zero, its time. The
// preview and every other field are cut here, so callers may pass full
// text and untrusted ids.
func (l *Log) Add(e Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	e.Preview = Truncate(Preview(e.Preview), MaxFieldBytes)
	for _, f := range []*string{&e.Event, &e.PeerID, &e.SessionID, &e.MessageID, &e.RunID, &e.Detail, &e.Node} {
		*f = Truncate(*f, MaxFieldBytes)
	}
	sz := e.size()
	l.mu.Lock()
	for l.n > 0 && (l.n == len(l.ring) || l.bytes+sz > l.maxBytes) {
		l.bytes -= l.ring[l.head].size()
		l.ring[l.head] = Event{}
		l.head = (l.head + 1) % len(l.ring)
		l.n--
	}
	e.Seq = l.next
	l.ring[(l.head+l.n)%len(l.ring)] = e
	l.n++
	l.bytes += sz
	l.next++
	l.last = e.At
	l.live.Publish(e) // under mu: subscribers see seq order
	l.mu.Unlock()
	if l.onAdd != nil {
		l.onAdd(e)
	}
}

// Recent returns up to limit newest events, oldest first (newest last).
func (l *Log) Recent(limit int) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.n
	if limit >= 0 && limit < n {
		n = limit
	}
	out := make([]Event, 0, n)
	for i := l.n - n; i < l.n; i++ {
		out = append(out, l.ring[(l.head+i)%len(l.ring)])
	}
	return out
}

// Bytes is what the held events count toward the byte bound.
func (l *Log) Bytes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// LastAt is the time of the newest event (zero when none).
func (l *Log) LastAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}
