package link

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"time"
)

// Outbox holds the messages a device has sent and not yet seen answered.
// A Client writes every message to its Outbox before sending it, resends
// every Pending message after each (re)connect, and calls Done when the
// caller has confirmed the final answer (Client.Delivered).
//
// FileOutbox is the durable one (append-only file in the state dir);
// FallbackOutbox is a FileOutbox that falls back to memory while the state
// dir cannot be written; MemoryOutbox is for load tests and simulations.
type Outbox interface {
	// Add stores text as a new unanswered message with a fresh message id,
	// unique for this peer across restarts. When Add returns, a durable
	// outbox has the message on disk (fsync).
	Add(text string) (OutboxEntry, error)
	// AddAnswer stores the answer to a question (an option picked:
	// capability "choice") as an entry with its own message id, in the
	// same order and with the same durability as Add's messages: it is
	// sent, resent after reconnects and restarts, and kept until Done.
	AddAnswer(questionID, optionID string) (OutboxEntry, error)
	// Pending lists the unanswered messages, oldest first.
	Pending() []OutboxEntry
	// Done marks a message answered; it leaves Pending. Unknown ids are
	// ignored.
	Done(id string) error
	// Close releases the outbox.
	Close() error
}

// OutboxEntry is one message of an Outbox: a user's message (Text), or
// the answer to a question (QuestionID and OptionID set, Text empty),
// which goes out as an answer frame.
type OutboxEntry struct {
	ID    string
	Text  string
	Added time.Time
	// QuestionID and OptionID: an answer (AddAnswer).
	QuestionID, OptionID string
}

// IsAnswer reports whether e is the answer to a question.
func (e OutboxEntry) IsAnswer() bool { return e.QuestionID != "" }

// ErrOutboxClosed is returned by the outboxes' methods after Close.
var ErrOutboxClosed = errors.New("link: outbox is closed")

// pendingList keeps unanswered entries in order with O(1) removal by id.
type pendingList struct {
	order   []OutboxEntry
	index   map[string]int // id -> position in order
	removed int            // holes in order (ID == "")
}

func newPendingList() *pendingList { return &pendingList{index: map[string]int{}} }

func (l *pendingList) add(e OutboxEntry) bool {
	if _, dup := l.index[e.ID]; dup {
		return false
	}
	l.index[e.ID] = len(l.order)
	l.order = append(l.order, e)
	return true
}

func (l *pendingList) remove(id string) bool {
	i, ok := l.index[id]
	if !ok {
		return false
	}
	delete(l.index, id)
	l.order[i] = OutboxEntry{}
	l.removed++
	if l.removed > 64 && l.removed > len(l.order)/2 {
		l.compact()
	}
	return true
}

func (l *pendingList) compact() {
	kept := make([]OutboxEntry, 0, len(l.index))
	for _, e := range l.order {
		if e.ID != "" {
			l.index[e.ID] = len(kept)
			kept = append(kept, e)
		}
	}
	l.order, l.removed = kept, 0
}

func (l *pendingList) len() int { return len(l.index) }

func (l *pendingList) list() []OutboxEntry {
	out := make([]OutboxEntry, 0, len(l.index))
	for _, e := range l.order {
		if e.ID != "" {
			out = append(out, e)
		}
	}
	return out
}

// idPrefix is a short random hex string; with a boot counter it makes
// message ids unique per peer even when the state dir was wiped.
func idPrefix() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return hex.EncodeToString(b[:])
}

// MemoryOutbox is an Outbox that lives in memory only: for load tests,
// simulated devices, and a FallbackOutbox while its disk fails. Its ids
// are "m<64 random bits>-<seq>".
type MemoryOutbox struct {
	mu      sync.Mutex
	prefix  string
	seq     uint64
	pending *pendingList
	closed  bool
}

// NewMemoryOutbox returns an empty in-memory outbox.
func NewMemoryOutbox() *MemoryOutbox { return newMemoryOutbox(nil) }

// newMemoryOutbox starts with entries (kept with their ids).
func newMemoryOutbox(entries []OutboxEntry) *MemoryOutbox {
	o := &MemoryOutbox{prefix: "m" + idPrefix() + idPrefix(), pending: newPendingList()}
	for _, e := range entries {
		o.pending.add(e)
	}
	return o
}

// Add implements Outbox.
func (o *MemoryOutbox) Add(text string) (OutboxEntry, error) {
	return o.add(OutboxEntry{Text: text})
}

// AddAnswer implements Outbox.
func (o *MemoryOutbox) AddAnswer(questionID, optionID string) (OutboxEntry, error) {
	return o.add(OutboxEntry{QuestionID: questionID, OptionID: optionID})
}

func (o *MemoryOutbox) add(e OutboxEntry) (OutboxEntry, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return OutboxEntry{}, ErrOutboxClosed
	}
	o.seq++
	e.ID, e.Added = o.prefix+"-"+strconv.FormatUint(o.seq, 10), time.Now()
	o.pending.add(e)
	return e, nil
}

// Pending implements Outbox.
func (o *MemoryOutbox) Pending() []OutboxEntry {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pending.list()
}

// Done implements Outbox.
func (o *MemoryOutbox) Done(id string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return ErrOutboxClosed
	}
	o.pending.remove(id)
	return nil
}

// Close implements Outbox.
func (o *MemoryOutbox) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	return nil
}
