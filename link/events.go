package link

import (
	"fmt"
	"sync"
	"time"
)

// State is where a Client's link is.
type State int

// Link states, reported in EventState events and by Client.Status.
const (
	StateIdle       State = iota // Run not called yet
	StateConnecting              // dialing, upgrading, waiting for connected
	StateConnected               // connected: messages flow
	StateWaiting                 // offline, next try at Event.NextTry
	StateClosed                  // Run returned
)

func (s State) String() string {
	switch s {
	case StateIdle:
		return "idle"
	case StateConnecting:
		return "connecting"
	case StateConnected:
		return "connected"
	case StateWaiting:
		return "waiting"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventState: the link changed state (State, and Attempt, NextTry,
	// Reason, SessionID, Heartbeat as they apply).
	EventState EventKind = iota + 1
	// EventReply: the final reply to a message (Reply). Delivered once
	// per message id for the life of the Client; after the caller has
	// received it the message leaves the outbox.
	EventReply
	// EventProgress: progress of a run (Text); only from servers that got
	// the "progress" capability.
	EventProgress
	// EventAck: the server acknowledged a message (Ack); a duplicate ack
	// with a reply is followed by an EventReply.
	EventAck
	// EventError: an error frame from the server, or a frame that did not
	// decode (Err, Code, MessageID when the error is about a message). A
	// message the server refuses for good (blank, too long: code
	// "bad_message") leaves the outbox after this event.
	EventError
)

func (k EventKind) String() string {
	switch k {
	case EventState:
		return "state"
	case EventReply:
		return "reply"
	case EventProgress:
		return "progress"
	case EventAck:
		return "ack"
	case EventError:
		return "error"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is what a Client tells its caller, in order, on Client.Events.
type Event struct {
	Kind EventKind
	Time time.Time

	// EventState.
	State State
	// Attempt counts dial attempts since the last session that reached
	// connected (StateConnecting, StateWaiting).
	Attempt int
	// NextTry is when the next dial starts (StateWaiting).
	NextTry time.Time
	// Reason says why the link is offline (StateWaiting, StateClosed).
	Reason string
	// SessionID and Heartbeat of the session (StateConnected).
	SessionID string
	Heartbeat time.Duration

	// MessageID is the message a reply, progress, ack or error is about.
	MessageID string
	Reply     *Message // EventReply
	Text      string   // EventProgress
	Ack       *Ack     // EventAck
	Err       error    // EventError
	Code      string   // EventError: the error frame's code

	// doneID is marked answered in the outbox once the caller has the
	// event.
	doneID string
}

func (e Event) String() string {
	switch e.Kind {
	case EventState:
		s := "state " + e.State.String()
		switch e.State {
		case StateConnecting:
			s += fmt.Sprintf(" (attempt %d)", e.Attempt)
		case StateConnected:
			s += " " + e.SessionID
		case StateWaiting:
			s += fmt.Sprintf(" until %s: %s", e.NextTry.Format("15:04:05.000"), e.Reason)
		case StateClosed:
			s += ": " + e.Reason
		}
		return s
	case EventReply:
		return fmt.Sprintf("reply %s: %q", e.MessageID, e.Reply.Text)
	case EventProgress:
		return fmt.Sprintf("progress %s: %q", e.MessageID, e.Text)
	case EventAck:
		return fmt.Sprintf("ack %s duplicate=%t pending=%t", e.MessageID, e.Ack.Duplicate, e.Ack.Pending)
	case EventError:
		return fmt.Sprintf("error %s [%s]: %v", e.MessageID, e.Code, e.Err)
	}
	return e.Kind.String()
}

// eventQueue is unbounded, so the connection never waits for the caller;
// a single dispatcher hands its events to the Events channel in order.
type eventQueue struct {
	mu     sync.Mutex
	q      []Event
	notify chan struct{} // cap 1
}

func newEventQueue() *eventQueue { return &eventQueue{notify: make(chan struct{}, 1)} }

func (q *eventQueue) push(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	q.mu.Lock()
	q.q = append(q.q, e)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *eventQueue) pop() (Event, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.q) == 0 {
		return Event{}, false
	}
	e := q.q[0]
	q.q[0] = Event{}
	q.q = q.q[1:]
	if len(q.q) == 0 {
		q.q = nil
	}
	return e, true
}
