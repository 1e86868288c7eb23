package recordtest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"termlink/server/bus"
	"termlink/server/record"
)

// Queue is the contract's record.Queue: the router's side of a store, as
// small as the contract needs and as honest as the router. It keeps one
// FIFO per session, bounded per session (perSession) and in all
// (MaxWaiting); a place is taken when a message is accepted or delivered
// (ReserveFirst, ReserveWait) and given back when it is taken to run
// (Next), cancelled while queued, or released. Nothing runs by itself:
// the test takes a session's next message with Next, as a router's
// session worker would. A message cancelled while queued stays in line,
// marked cancelled, for the test to answer cancelled, as the router
// answers one (without a start). Safe for concurrent use.
type Queue struct {
	max    int
	runSeq atomic.Uint64

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every change
	places   map[string]int
	total    int
	queued   map[string][]item
	running  map[string]string // session -> message id taken by Next
	takers   map[string]int    // sessions a Next waits on
	puts     map[string]int    // message id -> times Put
	asked    map[string]bool   // message ids Cancel was called for
	finals   []bus.Outbound    // dispatched, not taken by Final yet
	progress int               // progress and deltas dispatched
}

type item struct {
	in        bus.Inbound
	cancelled bool
}

var _ record.Queue = (*Queue)(nil)

// NewQueue makes a queue holding at most maxWaiting messages waiting.
func NewQueue(maxWaiting int) *Queue {
	return &Queue{max: maxWaiting, changed: make(chan struct{}), places: map[string]int{}, queued: map[string][]item{},
		running: map[string]string{}, takers: map[string]int{}, puts: map[string]int{}, asked: map[string]bool{}}
}

// changedLocked wakes every waiter; q.mu is held.
func (q *Queue) changedLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// wait waits, q.mu held, for the next change or ctx's end; q.mu is held
// again when it returns.
func (q *Queue) wait(ctx context.Context) error {
	ch := q.changed
	q.mu.Unlock()
	defer q.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ReserveFirst implements record.Queue.
func (q *Queue) ReserveFirst(session string, perSession int) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fullLocked(session, perSession); err != nil {
		return false, err
	}
	first := q.places[session] == 0 && len(q.queued[session]) == 0 && q.running[session] == ""
	q.places[session]++
	q.total++
	return first, nil
}

func (q *Queue) fullLocked(session string, perSession int) error {
	if q.places[session] >= perSession {
		return fmt.Errorf("%w: session %s has %d messages waiting", record.ErrBusy, session, q.places[session])
	}
	if q.total >= q.max {
		return fmt.Errorf("%w: %d messages waiting", record.ErrBusy, q.total)
	}
	return nil
}

// ReserveWait implements record.Queue: it waits for a place.
func (q *Queue) ReserveWait(ctx context.Context, session string, perSession int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.fullLocked(session, perSession) != nil {
		if err := q.wait(ctx); err != nil {
			return err
		}
	}
	q.places[session]++
	q.total++
	return nil
}

// Release implements record.Queue.
func (q *Queue) Release(session string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.releaseLocked(session)
}

func (q *Queue) releaseLocked(session string) {
	if q.places[session] > 0 {
		q.places[session]--
		q.total--
	}
	if q.places[session] == 0 {
		delete(q.places, session)
	}
	q.changedLocked()
}

// MaxWaiting implements record.Queue.
func (q *Queue) MaxWaiting() int { return q.max }

// StartsAtOnce implements record.Queue: a message of session would start
// without waiting only if a Next waits for it now and nothing of the
// session is queued or running.
func (q *Queue) StartsAtOnce(session string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.takers[session] > 0 && len(q.queued[session]) == 0 && q.running[session] == ""
}

// Put implements record.Queue.
func (q *Queue) Put(_ context.Context, in bus.Inbound) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queued[in.SessionKey] = append(q.queued[in.SessionKey], item{in: in})
	q.puts[in.MessageID]++
	q.changedLocked()
	return nil
}

// Dispatch implements record.Queue: finals wait for Final.
func (q *Queue) Dispatch(_ context.Context, out bus.Outbound) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if out.Kind != bus.Final {
		q.progress++
		return nil
	}
	q.finals = append(q.finals, out)
	q.changedLocked()
	return nil
}

// Cancel implements record.Queue: a queued message is marked cancelled
// (its place given back), a running one found. Every call is noted
// (CancelAsked).
func (q *Queue) Cancel(session, messageID string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.asked[messageID] = true
	defer q.changedLocked()
	if q.running[session] == messageID {
		return true
	}
	for i, it := range q.queued[session] {
		if it.in.MessageID == messageID && !it.cancelled {
			q.queued[session][i].cancelled = true
			q.releaseLocked(session)
			return true
		}
	}
	return false
}

// NewRunID implements record.Queue.
func (q *Queue) NewRunID() string { return "run-" + strconv.FormatUint(q.runSeq.Add(1), 10) }

// Next takes session's next message to run, waiting for one until ctx
// ends. cancelled: it was cancelled while queued, and is to be answered
// record.CancelledBeforeStart without a start. The message runs until
// Done.
func (q *Queue) Next(ctx context.Context, session string) (in bus.Inbound, cancelled bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.takers[session]++
	defer func() { q.takers[session]-- }()
	for len(q.queued[session]) == 0 {
		if err := q.wait(ctx); err != nil {
			return bus.Inbound{}, false, err
		}
	}
	it := q.queued[session][0]
	q.queued[session] = q.queued[session][1:]
	if !it.cancelled {
		q.releaseLocked(session)
		q.running[session] = it.in.MessageID
	}
	q.changedLocked()
	return it.in, it.cancelled, nil
}

// Done says session's message taken by Next is answered.
func (q *Queue) Done(session string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.running, session)
	q.changedLocked()
}

// Final waits for the final reply of messageID dispatched here and takes
// it.
func (q *Queue) Final(ctx context.Context, messageID string) (bus.Outbound, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for i, out := range q.finals {
			if out.MessageID == messageID {
				q.finals = append(q.finals[:i], q.finals[i+1:]...)
				return out, nil
			}
		}
		if err := q.wait(ctx); err != nil {
			return bus.Outbound{}, fmt.Errorf("no final reply of %s dispatched: %w", messageID, err)
		}
	}
}

// CancelAsked waits until Cancel was called for messageID.
func (q *Queue) CancelAsked(ctx context.Context, messageID string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.asked[messageID] {
		if err := q.wait(ctx); err != nil {
			return fmt.Errorf("the queue was never told to cancel %s: %w", messageID, err)
		}
	}
	return nil
}

// Puts is how many times messageID was queued.
func (q *Queue) Puts(messageID string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.puts[messageID]
}

// Waiting is the places taken in all.
func (q *Queue) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.total
}
