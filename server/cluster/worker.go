package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"termlink/server/bus"
	"termlink/server/session"
)

// Claimer is a worker's side of the claims: it starts and finishes the
// messages its partitions deliver. The claim's state machine (claim.go)
// decides; the Claimer does the reads, writes and pauses it names.
type Claimer struct {
	node    *Node
	tickets *Tickets
	me      string
	log     *slog.Logger
	hook    func(bus.Inbound) error
	// joins reports whether a channel's runner takes a session's next
	// message into its running turn (agent.Injector); nil: every one may.
	joins func(channelID string) bool

	// recent: messages this worker answered lately; cancelled: cancels
	// it was told of lately. A delivery of either reads its claim.
	recent, cancelled *KeySet

	// waiting, if not nil, is told each time a start waits for its
	// partition (tests: the lease is stale, or the take not done).
	waiting func(p int, st LeaseState)

	// For /metrics: runs started again (their worker died), lost
	// compare-and-sets, answered messages answered again from the claim.
	Reruns, Conflicts, Resent atomic.Uint64
}

// NewClaimer makes the claimer of worker process me (its node name and
// run prefix: see DecideStart) holding tickets. writeHook, if not nil,
// runs at each start and before each claim write of a start; an error
// stands for NATS trouble there (tests: a NATS leader election).
func NewClaimer(n *Node, tickets *Tickets, me string, log *slog.Logger, writeHook func(bus.Inbound) error) *Claimer {
	return &Claimer{node: n, tickets: tickets, me: me, log: log, hook: writeHook,
		recent: NewKeySet(recentAnswered), cancelled: NewKeySet(recentCancels)}
}

// Me names this worker process in claims.
func (w *Claimer) Me() string { return w.me }

// mayJoin reports whether channelID's runner may take a message into a
// running turn (without Joins set: yes).
func (w *Claimer) mayJoin(channelID string) bool { return w.joins == nil || w.joins(channelID) }

// Start decides, by the message's claim, what the turn of in (held by
// ticket t, starting) is. The step's action is StartStarted (run it: t
// is running), StartCached (t.Claim has the reply) or StartCancelled.
// ok false: not to be run here (stopping, the partition moved, or its
// claim keeps changing: it comes again).
//
// The hot path writes nothing and reads nothing: a message delivered
// past its partition's fence (what an earlier owner of the partition may
// have been given, Node.Fence), that this worker has not answered or
// been told to cancel lately, is new; its one write is the done claim
// (Finish, create-only). Any other reads its claim first: found, it is
// decided by it (DecideStart); not found and delivered to an earlier
// owner process, it may have started there (that one died or lost the
// partition), so it is claimed running as the next attempt
// (compare-and-set: one worker starts it) and recorded as interrupted.
func (w *Claimer) Start(ctx context.Context, t *Ticket, in bus.Inbound) (step StartStep, ok bool) {
	k := KeyOf(in)
	wait := 100 * time.Millisecond
	for w.hook != nil && ctx.Err() == nil {
		// Tests: NATS trouble at the start; it is looked at again.
		err := w.hook(in)
		if err == nil {
			break
		}
		w.log.Warn("cluster: cannot start a message; retrying", "message_id", in.MessageID, "err", err)
		wait = pause(ctx, wait)
	}
	// The delivery now (a partition taken again delivers it again, to
	// the same ticket) and the partition's fence now.
	d, fence, suspect, ok := w.owned(ctx, t)
	if !ok {
		w.tickets.Forget(k, t)
		return StartStep{}, false
	}
	if d.Seq > fence && !w.recent.Has(k) && !w.cancelled.Has(k) {
		w.started(t, t.Claim, 0)
		return StartStep{Action: StartStarted, Claim: t.Claim, Attempt: 1}, true
	}
	cl, rev := t.Claim, t.Rev
	read := true
	conflicts := 0
	for {
		if _, _, _, ok := w.owned(ctx, t); !ok {
			// Stopping, or the partition moved while the claim could
			// not be written: the next owner runs it (and finds it
			// running here, cut short, if a write that failed was
			// stored after all).
			w.tickets.Forget(k, t)
			return StartStep{}, false
		}
		if read {
			cur, crev, found, err := w.node.GetClaim(ctx, in.SessionKey, in.MessageID)
			if err != nil {
				// NATS trouble: this session waits here (its later
				// messages must not overtake this one); the message
				// stays in progress meanwhile.
				w.log.Warn("cluster: cannot read a claim; retrying", "message_id", in.MessageID, "err", err)
				wait = pause(ctx, wait)
				continue
			}
			read = false
			switch {
			case found:
				cl, rev = cur, crev
			case d.Seq <= suspect && (w.mayJoin(in.ChannelID) || w.node.FirstUndone(d.Partition, in.SessionKey, d.Seq)):
				// Given to an earlier owner, which may have started it:
				// unless an earlier one of its session was found
				// unanswered (run again here: NoteUndone), when the owner
				// never came to this one; any when the runner takes
				// messages into a turn.
				cl, rev = t.Claim, 0
				cl.State, cl.Worker, cl.Attempt = StateRunning, UnknownWorker, 1
			default:
				// Not started by an earlier owner. Its claim is created
				// before it runs, unlike on the hot path: this delivery
				// may be a message answered here already whose done
				// claim a read missed (a NATS leader behind the write:
				// jepsen seed 21 ran three messages twice), and the
				// create-only write finds it.
				cl, rev = t.Claim, 0
			}
		}
		step := DecideStart(cl, w.me, in.RunID)
		switch step.Action {
		case StartStarted: // our own write, whose answer was lost
			w.started(t, step.Claim, rev)
			return step, true
		case StartCached:
			w.Resent.Add(1)
			w.recent.Add(k) // a later copy reads its claim too
			t.Claim, t.Rev, t.Cached = cl, rev, true
			return step, true
		case StartCancelled:
			t.Claim, t.Rev = cl, rev
			return step, true
		}
		var nrev uint64
		var err error
		if w.hook != nil {
			err = w.hook(in)
		}
		if err == nil {
			nrev, err = w.node.UpdateClaim(ctx, step.Claim, rev)
		}
		var next AfterWrite
		next, conflicts = AfterStartWrite(WriteResultOf(err), conflicts)
		switch next {
		case AfterReread: // changed since read: read it again
			w.Conflicts.Add(1)
			read = true
			continue
		case AfterGiveUp:
			w.Conflicts.Add(1)
			w.log.Warn("cluster: message not started: its claim keeps changing; it comes again", "message_id", in.MessageID)
			w.tickets.Forget(k, t)
			_ = d.Nak()
			return StartStep{}, false
		case AfterPauseRead:
			w.log.Warn("cluster: cannot write a claim; retrying", "message_id", in.MessageID, "err", err)
			wait = pause(ctx, wait)
			read = true // it may have been written: see
			continue
		}
		if step.Attempt > 1 {
			w.Reruns.Add(1)
			if d.Seq <= suspect {
				// Written: it was unanswered where it was given before, so
				// the earlier owner started nothing after it in its session.
				w.node.NoteUndone(d.Partition, in.SessionKey, d.Seq)
			}
		}
		w.started(t, step.Claim, nrev)
		step.Action = StartStarted
		return step, true
	}
}

// owned waits while t's partition's lease is stale (this worker cannot
// reach NATS to renew it) or its take is not done, and reports its
// delivery and fence once the lease is renewed; ok false when the
// partition is lost or ctx ends. It looks every ownedPoll: the look is
// this worker's memory, and a wait that grew to seconds, as NATS
// retries do, held every start that long past the renewal.
func (w *Claimer) owned(ctx context.Context, t *Ticket) (d *Delivery, fence, suspect uint64, ok bool) {
	for ctx.Err() == nil {
		d = w.tickets.Delivery(t)
		var st LeaseState
		fence, suspect, st = w.node.Fence(d.Partition)
		switch st {
		case Owned:
			return d, fence, suspect, true
		case NotOwned:
			return d, 0, 0, false
		}
		if w.waiting != nil {
			w.waiting(d.Partition, st)
		}
		pause(ctx, ownedPoll)
	}
	return d, 0, 0, false
}

// ownedPoll is how often a start waiting for its partition looks again.
const ownedPoll = 50 * time.Millisecond

// started records that this worker runs t's message under claim cl.
func (w *Claimer) started(t *Ticket, cl Claim, rev uint64) {
	t.Claim, t.Rev = cl, rev
	w.tickets.Running(t)
}

// Finish records a reply: the claim set to done with the reply and the
// turn's records (the session history), one write, stored before it is
// sent. On the hot path it creates the claim (none may exist: a cancel
// or a new owner's claim since makes it a conflict, read and decided);
// else it is a compare-and-set on the claim this worker wrote or read.
// ok false: not stored, or another worker took the message over
// meanwhile and answers it.
func (w *Claimer) Finish(ctx context.Context, t *Ticket, in bus.Inbound, recs []session.Record, reply Reply) bool {
	k := KeyOf(in)
	for i := range recs {
		if recs[i].Timestamp == "" {
			recs[i].Timestamp = session.Now()
		}
	}
	cl, rev := t.Claim, t.Rev
	for {
		done := Done(cl, w.me, reply)
		done.Records = recs
		nrev, err := w.node.UpdateClaim(ctx, done, rev)
		if err == nil {
			t.Claim, t.Rev = done, nrev
			w.recent.Add(k)
			return true
		}
		if ctx.Err() != nil {
			w.tickets.Forget(k, t)
			return false
		}
		if errors.Is(err, ErrConflict) {
			cur, crev, found, gerr := w.node.GetClaim(ctx, in.SessionKey, in.MessageID)
			if gerr == nil {
				switch DecideFinishConflict(cur, found, t.Claim, w.me, in.RunID) {
				case FinishWritten: // our write went through; its answer was lost
					t.Claim, t.Rev = cur, crev
					w.recent.Add(k)
					return true
				case FinishDropped:
					w.log.Warn("cluster: reply dropped: another worker took the message over",
						"message_id", in.MessageID, "claim", cur.State, "worker", cur.Worker)
					w.tickets.Forget(k, t)
					return false
				case FinishRetry: // cancelled or pending meanwhile (a cancel that lost the race): ours to answer
					cl, rev = cur, crev
					continue
				case FinishReread: // the read is behind the write that won: pause, write and read again
					err = fmt.Errorf("cluster: the claim of message %s changed, and a read found none yet: %w", in.MessageID, err)
				}
			}
		}
		w.log.Warn("cluster: claim not updated; retrying", "message_id", in.MessageID, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Cancelled notes a cancel sent to the workers: the message, if it comes
// later, reads its claim before it starts (the cancel claim answers it).
func (w *Claimer) Cancelled(k Key) { w.cancelled.Add(k) }

// pause waits d (or until ctx ends) and returns the next, longer wait.
func pause(ctx context.Context, d time.Duration) time.Duration {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return min(2*d, 2*time.Second)
}
