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
	// EventReply: the final reply to a message (Reply); Final is set.
	// Delivered once per message id for the life of the Client. The
	// message stays in the outbox until the caller confirms it with
	// Client.Delivered.
	EventReply
	// EventProgress: progress of a run (Text); only from servers that got
	// the "progress" capability. Coalesced per message: a caller that
	// reads slowly gets the latest text, not every line.
	EventProgress
	// EventAck: the server acknowledged a message (Ack); a duplicate ack
	// with a reply is followed by an EventReply.
	EventAck
	// EventError: an error frame from the server, or a frame that did not
	// decode (Err, Code, MessageID when the error is about a message). A
	// message the server refuses for good (blank, too long: code
	// "bad_message") is a final answer: Final is set, and the message
	// leaves the outbox when the caller confirms it with Client.Delivered.
	// A retryable refusal (code "busy") is no event: the client resends
	// the message after a backoff.
	EventError
	// EventStorage: the outbox's storage changed (Err: why the state dir
	// cannot be written and messages are kept in memory; nil: durable
	// again). See FallbackOutbox.
	EventStorage
	// EventNotice: the server pushed a notice (Notice; Expires is its
	// parsed expires_at, zero when it does not expire). Only from servers
	// that got the "notice" capability, never one past its expiry nor one
	// confirmed with Client.NoticeShown before (the client acks those
	// again itself). Call NoticeShown once it has been drawn: only then
	// does the server stop resending it. A notice resent while the event
	// waits in the queue replaces it there.
	EventNotice
	// EventDelta: reply text while the agent writes it, for a message
	// waiting for its answer; only from servers that got the "stream"
	// capability (ClientConfig.Stream). Text is ALL the text so far (the
	// client accumulates the deltas; the first delta of a connection
	// replaces what the connection before gave), Seq the delta's number
	// on this connection. Not final and not confirmed: the final reply
	// (EventReply) carries the whole text and supersedes the stream, and
	// no EventDelta of that message follows it. Coalesced per message in
	// the queue like progress (latest text wins). A delta with a gap or a
	// duplicate seq, for a message not waiting, or after the final reply
	// is ignored and logged with the reason (ClientStats.DeltasIgnored).
	EventDelta
	// EventQuestion: the server asks the person at the device to pick
	// one of a question's options (Question; capability "choice"). The
	// server sends an open question again after every reconnect: the
	// caller shows a question id once and answers it once (Client.Answer).
	// Coalesced per question id in the queue, at most maxQueuedPushes.
	EventQuestion
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
	case EventStorage:
		return "storage"
	case EventNotice:
		return "notice"
	case EventDelta:
		return "delta"
	case EventQuestion:
		return "question"
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
	// Reason says why the link is offline (StateWaiting, StateClosed);
	// ShortReason gives its short form for a small display.
	Reason string
	// SessionID and Heartbeat of the session (StateConnected).
	SessionID string
	Heartbeat time.Duration

	// MessageID is the message a reply, progress, ack or error is about.
	MessageID string
	Reply     *Message // EventReply
	Text      string   // EventProgress; EventDelta: all the text so far
	Seq       int64    // EventDelta: the delta's seq on this connection
	Ack       *Ack     // EventAck
	Err       error    // EventError; EventStorage (nil: storage works)
	Code      string   // EventError: the error frame's code

	// EventNotice: the notice, and its expiry (zero: none, or an
	// expires_at that did not parse, which the client logs).
	Notice  *Notice
	Expires time.Time

	// Question: EventQuestion. QuestionID: the question an answer's
	// final event is about (EventAck with Final: the server has the
	// answer; EventError with Final: it refused it, Code saying why).
	Question   *Question
	QuestionID string

	// Final marks the final answer to MessageID (EventReply, or an
	// EventError refusing the message for good). The message stays in
	// the outbox, and counts toward the client's Window, until the caller
	// has handled the event (drawn it, stored it) and calls
	// Client.Delivered(MessageID). Unconfirmed at exit, it is resent at
	// the next start and answered again from the server's dedupe cache.
	Final bool
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
	case EventDelta:
		return fmt.Sprintf("delta %s #%d: %d bytes so far", e.MessageID, e.Seq, len(e.Text))
	case EventAck:
		return fmt.Sprintf("ack %s duplicate=%t pending=%t", e.MessageID, e.Ack.Duplicate, e.Ack.Pending)
	case EventError:
		return fmt.Sprintf("error %s [%s]: %v", e.MessageID, e.Code, e.Err)
	case EventNotice:
		return fmt.Sprintf("notice %s [%s]: %q", e.Notice.NoticeID, e.Notice.Priority, e.Notice.Text)
	case EventQuestion:
		return fmt.Sprintf("question %s (%d options, %ds): %q", e.Question.QuestionID, len(e.Question.Options), e.Question.TimeoutSeconds, e.Question.Text)
	case EventStorage:
		if e.Err == nil {
			return "storage durable"
		}
		return fmt.Sprintf("storage in memory: %v", e.Err)
	}
	return e.Kind.String()
}

// Bounds of the event queue (besides final answers, see eventQueue).
const (
	maxQueuedStates  = 8  // state events; past it the oldest queued one goes
	maxQueuedNotices = 8  // non-final error events; past it the oldest goes
	maxQueuedPushes  = 32 // EventNotice; past it the oldest goes (the server resends it after a reconnect)
)

// eventQueue holds the events the caller has not read yet, in order, and
// never grows without bound, so the connection never waits for the caller
// and a slow caller cannot make the client eat memory. Per kind:
//
//   - final answers (Final: reply or refusal) are never dropped; there is
//     at most one per message in the outbox, and the client stops sending
//     while Window of them wait for Client.Delivered;
//   - progress is coalesced per message (latest text wins) and at most
//     window messages have one queued (the oldest goes first); so are
//     deltas (each carries all the text so far, so the latest loses
//     nothing), and a final answer removes its message's queued
//     progress and deltas;
//   - acks are coalesced per message, at most window queued;
//   - state events: at most maxQueuedStates queued (the oldest goes; the
//     caller always gets the latest state);
//   - other errors: at most maxQueuedNotices (the oldest goes);
//   - storage: only the latest;
//   - server notices (EventNotice): coalesced per notice id, at most
//     maxQueuedPushes (the oldest goes; not acked, the server resends it
//     after the next reconnect);
//   - questions (EventQuestion): coalesced per question id, at most
//     maxQueuedPushes (the oldest goes; the server resends an open
//     question after the next reconnect).
//
// So the queue holds at most 4*window + maxQueuedStates +
// maxQueuedNotices + 2*maxQueuedPushes + 1 events while the caller confirms its final answers.
// A single dispatcher hands the events to the Events channel in order.
type eventQueue struct {
	window int

	mu      sync.Mutex
	q       []Event
	high    int           // the most events queued at once
	dropped int64         // events dropped or coalesced away
	notify  chan struct{} // cap 1
}

func newEventQueue(window int) *eventQueue {
	return &eventQueue{window: window, notify: make(chan struct{}, 1)}
}

// eventClass groups the events that share a bound.
type eventClass int

const (
	classFinal eventClass = iota
	classProgress
	classDelta
	classAck
	classState
	classNotice
	classStorage
	classPush
	classQuestion
)

func classOf(e *Event) eventClass {
	switch {
	case e.Final:
		return classFinal
	case e.Kind == EventProgress:
		return classProgress
	case e.Kind == EventDelta:
		return classDelta
	case e.Kind == EventAck:
		return classAck
	case e.Kind == EventState:
		return classState
	case e.Kind == EventStorage:
		return classStorage
	case e.Kind == EventNotice:
		return classPush
	case e.Kind == EventQuestion:
		return classQuestion
	}
	return classNotice
}

func (q *eventQueue) limit(c eventClass) int {
	switch c {
	case classProgress, classDelta, classAck:
		return q.window
	case classState:
		return maxQueuedStates
	case classNotice:
		return maxQueuedNotices
	case classStorage:
		return 1
	case classPush, classQuestion:
		return maxQueuedPushes
	}
	return -1 // classFinal: bounded by the window through Client.Delivered
}

func (q *eventQueue) push(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	class := classOf(&e)
	q.mu.Lock()
	if q.coalesce(class, e) {
		q.mu.Unlock()
		return
	}
	if lim := q.limit(class); lim >= 0 {
		n, oldest := 0, -1
		for i := range q.q {
			if classOf(&q.q[i]) == class {
				if oldest < 0 {
					oldest = i
				}
				n++
			}
		}
		if n >= lim && oldest >= 0 {
			q.q = append(q.q[:oldest], q.q[oldest+1:]...)
			q.dropped++
		}
	}
	q.q = append(q.q, e)
	q.high = max(q.high, len(q.q))
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// coalesce replaces a queued progress, delta or ack event of the same message
// (a notice of the same id) by e, in place; false when there is none.
func (q *eventQueue) coalesce(class eventClass, e Event) bool {
	if class == classPush {
		for i := range q.q {
			if q.q[i].Kind == EventNotice && q.q[i].Notice.NoticeID == e.Notice.NoticeID {
				q.q[i] = e
				q.dropped++
				return true
			}
		}
		return false
	}
	if class == classQuestion {
		for i := range q.q {
			if q.q[i].Kind == EventQuestion && q.q[i].Question.QuestionID == e.Question.QuestionID {
				q.q[i] = e
				q.dropped++
				return true
			}
		}
		return false
	}
	if (class != classProgress && class != classDelta && class != classAck) || e.MessageID == "" {
		return false
	}
	for i := len(q.q) - 1; i >= 0; i-- {
		if q.q[i].Kind == e.Kind && !q.q[i].Final && q.q[i].MessageID == e.MessageID {
			q.q[i] = e
			q.dropped++
			return true
		}
	}
	return false
}

// dropProgress removes the queued progress and deltas of a message once
// its final answer is in: they are stale.
func (q *eventQueue) dropProgress(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kept := q.q[:0]
	for _, e := range q.q {
		if (e.Kind == EventProgress || e.Kind == EventDelta) && !e.Final && e.MessageID == id {
			q.dropped++
			continue
		}
		kept = append(kept, e)
	}
	clear(q.q[len(kept):])
	q.q = kept
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

// stats returns the queue's length now, its high-water mark and the
// events dropped or coalesced away.
func (q *eventQueue) stats() (queued, high int, dropped int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q), q.high, q.dropped
}
