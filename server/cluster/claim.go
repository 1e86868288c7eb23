package cluster

import "errors"

// The claim's state machine, as pure functions: given the claim read
// from the dedupe bucket, who asks and what the last write returned,
// they say what to do. Package server performs the I/O (reads, writes,
// pauses, the run itself) and calls them; claim_test.go has a table of
// every transition.

// MaxRunAttempts: a run cut short (its worker died) is run again once;
// a third start answers the message with an error instead.
const MaxRunAttempts = maxRunAttempt

// UnknownWorker is the worker of a claim a new owner of a partition
// writes for a message an earlier owner process was given and may have
// started (hot-path runs write no claim before they finish): its run is
// counted as attempt 1, possibly cut short.
const UnknownWorker = "(an earlier owner of the partition)"

// MaxClaimConflicts: a worker that loses this many compare-and-sets in
// a row on one claim gives the message back (it comes again).
const MaxClaimConflicts = 8

// Answered reports a claim that holds its message's reply.
func (c Claim) Answered() bool { return c.State == StateDone && c.Reply != nil }

// StartAction is what a worker does with the claim of a message it is
// about to run.
type StartAction uint8

const (
	// StartWrite: write StartStep.Claim (compare-and-set on the
	// revision read; a create when there was none), then ask
	// AfterStartWrite.
	StartWrite StartAction = iota
	// StartStarted: the claim says this worker process runs it with
	// this run id: its own write, whose answer was lost. Started.
	StartStarted
	// StartCached: answered before (a partition moved after the reply):
	// answer with the claim's reply, run nothing.
	StartCached
	// StartCancelled: cancelled before it started: answer cancelled.
	StartCancelled
)

func (a StartAction) String() string {
	switch a {
	case StartWrite:
		return "write"
	case StartStarted:
		return "started"
	case StartCached:
		return "cached"
	case StartCancelled:
		return "cancelled"
	}
	return "?"
}

// StartStep is DecideStart's answer.
type StartStep struct {
	Action StartAction
	// Claim: for StartWrite the claim to write; for StartStarted the
	// claim as read.
	Claim Claim
	// Attempt: which run this is (StartWrite, StartStarted); above 1
	// the run before was cut short and is recorded as interrupted.
	Attempt int
	// Unsure: the run before was an earlier owner's that may not have
	// started at all (UnknownWorker).
	Unsure bool
}

// Interrupted reports a start that answers the message with an error
// instead of running it: its runs were cut short MaxRunAttempts times.
func (s StartStep) Interrupted() bool { return s.Attempt > MaxRunAttempts }

// DecideStart decides a message's turn from its claim cl (when the
// bucket has none, the pending claim the worker would create), for
// worker process me (its node name and run prefix: a worker restarted
// under the same name is not its predecessor) starting run runID.
//
//	running, me, runID   -> started (own write, answer lost)
//	done                 -> answer from the cache
//	cancel               -> answer cancelled
//	running, other       -> write running, attempt+1 (cut short there)
//	pending (or none)    -> write running, attempt 1
func DecideStart(cl Claim, me, runID string) StartStep {
	attempt, unsure := 1, false
	switch {
	case cl.State == StateRunning && cl.Worker == me && cl.RunID == runID:
		return StartStep{Action: StartStarted, Claim: cl, Attempt: cl.Attempt}
	case cl.State == StateDone:
		return StartStep{Action: StartCached, Claim: cl}
	case cl.State == StateCancel:
		return StartStep{Action: StartCancelled, Claim: cl}
	case cl.State == StateRunning:
		attempt = cl.Attempt + 1 // cut short where it ran
		unsure = cl.Worker == UnknownWorker
	}
	next := cl
	next.State, next.Worker, next.Attempt, next.RunID = StateRunning, me, attempt, runID
	return StartStep{Action: StartWrite, Claim: next, Attempt: attempt, Unsure: unsure}
}

// WriteResult is what a claim write returned.
type WriteResult uint8

const (
	WriteOK       WriteResult = iota // stored
	WriteConflict                    // ErrConflict: the claim changed since it was read
	WriteFailed                      // no answer, or an error: it may have been stored
)

// WriteResultOf classifies a claim write's error.
func WriteResultOf(err error) WriteResult {
	switch {
	case err == nil:
		return WriteOK
	case errors.Is(err, ErrConflict):
		return WriteConflict
	}
	return WriteFailed
}

// AfterWrite is what a worker does after writing a start's claim.
type AfterWrite uint8

const (
	AfterStarted   AfterWrite = iota // the claim is written: run
	AfterReread                      // lost a compare-and-set: read the claim again and decide
	AfterPauseRead                   // the write may or may not be stored: pause, read it again and decide
	AfterGiveUp                      // the claim keeps changing: give the message back (it comes again)
)

func (a AfterWrite) String() string {
	switch a {
	case AfterStarted:
		return "started"
	case AfterReread:
		return "reread"
	case AfterPauseRead:
		return "pause+reread"
	case AfterGiveUp:
		return "give up"
	}
	return "?"
}

// AfterStartWrite decides what follows a start's claim write that
// returned r, after conflicts earlier lost compare-and-sets of this
// start; it returns the conflicts counted so far. A write whose answer
// was lost is read again: DecideStart then finds it started (this
// worker's own claim) or changed by another node.
func AfterStartWrite(r WriteResult, conflicts int) (AfterWrite, int) {
	switch r {
	case WriteOK:
		return AfterStarted, conflicts
	case WriteConflict:
		conflicts++
		if conflicts >= MaxClaimConflicts {
			return AfterGiveUp, conflicts
		}
		return AfterReread, conflicts
	}
	return AfterPauseRead, conflicts
}

// FinishAction is what a worker does when writing a reply's done claim
// lost its compare-and-set and it has read the claim again.
type FinishAction uint8

const (
	// FinishWritten: the claim is this worker's done with this run's
	// reply: its own write went through, its answer was lost.
	FinishWritten FinishAction = iota
	// FinishDropped: another worker took the message over (or answered
	// it): the reply is dropped here, that one answers.
	FinishDropped
	// FinishRetry: still this worker's to answer (cancelled or pending
	// meanwhile: a cancel that lost the race): write done again on the
	// claim as read now.
	FinishRetry
	// FinishReread: the write lost its compare-and-set, yet the read
	// found no claim: the read is behind the write (a NATS leader that
	// has not applied what it already checks writes against; jepsen
	// seed 21). Read again after a pause; never drop on it.
	FinishReread
)

func (a FinishAction) String() string {
	switch a {
	case FinishWritten:
		return "written"
	case FinishDropped:
		return "dropped"
	case FinishRetry:
		return "retry"
	case FinishReread:
		return "reread"
	}
	return "?"
}

// DecideFinishConflict decides a finish whose done write lost: cur is
// the claim read again (found false: none), held the claim this worker
// wrote or read when it started (running: it marked the run its own),
// me and runID as for DecideStart.
func DecideFinishConflict(cur Claim, found bool, held Claim, me, runID string) FinishAction {
	mine := held.State == StateRunning
	switch {
	case found && cur.State == StateDone && cur.Worker == me && cur.Reply != nil && cur.Reply.RunID == runID:
		return FinishWritten
	case !found:
		return FinishReread
	case cur.State == StateDone,
		cur.State == StateRunning && (!mine || cur.Worker != me || cur.Attempt != held.Attempt):
		return FinishDropped
	}
	return FinishRetry
}

// Done is the claim cl answered by worker me with reply r.
func Done(cl Claim, me string, r Reply) Claim {
	cl.State, cl.Worker, cl.Reply = StateDone, me, &r
	return cl
}

// EdgeAction is what an edge does with a message a device sent, by its
// claim.
type EdgeAction uint8

const (
	EdgePublish EdgeAction = iota // no claim: admit it and publish it
	EdgeCached                    // answered: the cached reply answers the resend
	EdgePending                   // started, or cancelled and not answered yet: wait for its reply
)

// DecideAccept decides an edge's accept from the message's claim.
func DecideAccept(cl Claim, found bool) EdgeAction {
	switch {
	case !found:
		return EdgePublish
	case cl.Answered():
		return EdgeCached
	}
	return EdgePending
}

// CancelAction is what an edge does to cancel a message, by its claim.
type CancelAction uint8

const (
	CancelUnknown CancelAction = iota // no claim, not waited on here: not a message known
	CancelWrite                       // not started: write the claim in state cancel (conflict: look again)
	CancelTell                        // running: tell the workers
	CancelNone                        // answered or cancelled already: nothing to cancel
)

// DecideCancel decides a cancel from the message's claim; waited: the
// edge waits on the message (acked it, no reply yet). For CancelWrite it
// returns the claim to write (created when none was found).
func DecideCancel(cl Claim, found, waited bool, session, messageID string) (CancelAction, Claim) {
	if !found {
		if !waited {
			return CancelUnknown, Claim{}
		}
		// Queued: a cancel claim, created only if no worker has
		// claimed it meanwhile, answers it cancelled.
		cl = Claim{State: StatePending, Session: session, MessageID: messageID}
	}
	switch cl.State {
	case StatePending:
		cl.State = StateCancel
		return CancelWrite, cl
	case StateRunning:
		return CancelTell, cl
	}
	return CancelNone, cl
}
