package cluster

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

const (
	me          = "w1#aaaa"
	predecessor = "w1#bbbb" // the same node name, an earlier process
	other       = "w2#cccc"
	runID       = "aaaa-7"
)

func claim(state, worker, run string, attempt int) Claim {
	return Claim{State: state, Session: "s", MessageID: "m", RunID: run, Worker: worker, Attempt: attempt}
}

func TestDecideStart(t *testing.T) {
	t.Parallel()
	reply := &Reply{Text: "hi", FinishReason: "stop", RunID: "old-1"}
	done := claim(StateDone, other, "old-1", 1)
	done.Reply = reply
	running := func(worker, run string, attempt int) Claim { return claim(StateRunning, worker, run, attempt) }
	for _, tc := range []struct {
		name        string
		read        Claim
		want        StartAction
		wantClaim   Claim
		attempt     int
		interrupted bool
	}{
		{"absent (the pending claim to create)", claim(StatePending, "", runID, 0),
			StartWrite, running(me, runID, 1), 1, false},
		{"pending", claim(StatePending, "", "edge-run", 0),
			StartWrite, running(me, runID, 1), 1, false},
		{"running here with this run id: own write, answer lost", running(me, runID, 1),
			StartStarted, running(me, runID, 1), 1, false},
		{"own write of a second run, answer lost", running(me, runID, 2),
			StartStarted, running(me, runID, 2), 2, false},
		{"own write of a third run, answer lost: interrupted twice", running(me, runID, 3),
			StartStarted, running(me, runID, 3), 3, true},
		{"running here with another run id: an earlier delivery cut short", running(me, "aaaa-3", 1),
			StartWrite, running(me, runID, 2), 2, false},
		{"a predecessor's claim (same name, other process): cut short", running(predecessor, runID, 1),
			StartWrite, running(me, runID, 2), 2, false},
		{"running on another worker: cut short there", running(other, "cccc-1", 1),
			StartWrite, running(me, runID, 2), 2, false},
		{"cut short twice: interrupted twice", running(other, "cccc-1", 2),
			StartWrite, running(me, runID, 3), 3, true},
		{"given to an earlier owner that may have started it (no claim, suspect)", running(UnknownWorker, runID, 1),
			StartWrite, running(me, runID, 2), 2, false},
		{"done: answer from the cache", done, StartCached, done, 0, false},
		{"done by this worker: answer from the cache", func() Claim { c := done; c.Worker, c.RunID = me, runID; return c }(),
			StartCached, func() Claim { c := done; c.Worker, c.RunID = me, runID; return c }(), 0, false},
		{"cancelled before it started", claim(StateCancel, "", "", 0),
			StartCancelled, claim(StateCancel, "", "", 0), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideStart(tc.read, me, runID)
			if got.Action != tc.want || got.Attempt != tc.attempt || got.Interrupted() != tc.interrupted {
				t.Fatalf("DecideStart(%+v) = %v attempt %d interrupted %v; want %v attempt %d interrupted %v",
					tc.read, got.Action, got.Attempt, got.Interrupted(), tc.want, tc.attempt, tc.interrupted)
			}
			if !reflect.DeepEqual(got.Claim, tc.wantClaim) {
				t.Fatalf("claim %+v; want %+v", got.Claim, tc.wantClaim)
			}
		})
	}
}

// Only a run before by an unknown earlier owner is unsure: the record
// says it may not have started.
func TestDecideStartUnsure(t *testing.T) {
	t.Parallel()
	if st := DecideStart(claim(StateRunning, UnknownWorker, "", 1), me, runID); !st.Unsure || st.Attempt != 2 {
		t.Errorf("after an unknown owner: unsure %v attempt %d, want true 2", st.Unsure, st.Attempt)
	}
	if st := DecideStart(claim(StateRunning, other, "cccc-1", 1), me, runID); st.Unsure {
		t.Error("after a known owner's claim: unsure, want sure (it wrote running)")
	}
}

func TestDecideStartKeepsTheClaimsOtherFields(t *testing.T) {
	t.Parallel()
	cl := claim(StateRunning, other, "cccc-1", 1)
	cl.Edge = "e1"
	got := DecideStart(cl, me, runID).Claim
	if got.Edge != "e1" || got.Session != "s" || got.MessageID != "m" {
		t.Fatalf("claim to write %+v lost the edge, session or message id", got)
	}
}

func TestAfterStartWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r             WriteResult
		conflicts     int
		want          AfterWrite
		wantConflicts int
	}{
		{WriteOK, 0, AfterStarted, 0},
		{WriteOK, 5, AfterStarted, 5},
		{WriteConflict, 0, AfterReread, 1},
		{WriteConflict, MaxClaimConflicts - 2, AfterReread, MaxClaimConflicts - 1},
		{WriteConflict, MaxClaimConflicts - 1, AfterGiveUp, MaxClaimConflicts},
		// A write whose answer was lost: read again, not counted (NATS
		// trouble holds the session's turn for as long as it lasts).
		{WriteFailed, 0, AfterPauseRead, 0},
		{WriteFailed, MaxClaimConflicts - 1, AfterPauseRead, MaxClaimConflicts - 1},
	} {
		got, n := AfterStartWrite(tc.r, tc.conflicts)
		if got != tc.want || n != tc.wantConflicts {
			t.Errorf("AfterStartWrite(%d, %d) = %v, %d; want %v, %d", tc.r, tc.conflicts, got, n, tc.want, tc.wantConflicts)
		}
	}
}

func TestWriteResultOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want WriteResult
	}{
		{nil, WriteOK},
		{ErrConflict, WriteConflict},
		{fmt.Errorf("wrapped: %w", ErrConflict), WriteConflict},
		{errors.New("nats: timeout"), WriteFailed},
	} {
		if got := WriteResultOf(tc.err); got != tc.want {
			t.Errorf("WriteResultOf(%v) = %d; want %d", tc.err, got, tc.want)
		}
	}
}

// TestStartLostAnswer walks the transitions of a start whose write was
// stored but whose answer was lost: the claim read again is this
// worker's own, and the message is started, not run a second time.
func TestStartLostAnswer(t *testing.T) {
	t.Parallel()
	step := DecideStart(claim(StatePending, "", runID, 0), me, runID)
	if step.Action != StartWrite {
		t.Fatalf("first step %v; want write", step.Action)
	}
	next, _ := AfterStartWrite(WriteResultOf(errors.New("nats: timeout")), 0)
	if next != AfterPauseRead {
		t.Fatalf("after a lost answer %v; want pause+reread", next)
	}
	again := DecideStart(step.Claim, me, runID) // what the bucket holds
	if again.Action != StartStarted || again.Attempt != 1 {
		t.Fatalf("reread %v attempt %d; want started attempt 1", again.Action, again.Attempt)
	}
}

func TestDecideFinishConflict(t *testing.T) {
	t.Parallel()
	mine := claim(StateRunning, me, runID, 1)
	doneBy := func(worker, run string) Claim {
		return Done(claim(StateRunning, worker, run, 1), worker, Reply{Text: "r", RunID: run})
	}
	for _, tc := range []struct {
		name  string
		cur   Claim
		found bool
		held  Claim
		want  FinishAction
	}{
		{"done by this worker and run: own write, answer lost", doneBy(me, runID), true, mine, FinishWritten},
		{"done by this worker, another run", doneBy(me, "aaaa-1"), true, mine, FinishDropped},
		{"done by another worker", doneBy(other, "cccc-1"), true, mine, FinishDropped},
		{"done by a predecessor", doneBy(predecessor, runID), true, mine, FinishDropped},
		{"no claim read after a lost compare-and-set: the read is behind, read again", Claim{}, false, mine, FinishReread},
		{"running on another worker: taken over", claim(StateRunning, other, "cccc-1", 2), true, mine, FinishDropped},
		{"running by a predecessor", claim(StateRunning, predecessor, runID, 1), true, mine, FinishDropped},
		{"running here, another attempt: taken over again", claim(StateRunning, me, runID, 2), true, mine, FinishDropped},
		{"running here, same attempt: retry", claim(StateRunning, me, runID, 1), true, mine, FinishRetry},
		{"running, but this worker never marked it running (cancelled while queued)",
			claim(StateRunning, me, runID, 1), true, claim(StatePending, "", runID, 0), FinishDropped},
		{"cancelled meanwhile (a cancel that lost the race): retry", claim(StateCancel, "", runID, 0), true, mine, FinishRetry},
		{"pending meanwhile: retry", claim(StatePending, "", runID, 0), true, mine, FinishRetry},
		{"cancelled, held cancelled: retry", claim(StateCancel, "", runID, 0), true, claim(StateCancel, "", runID, 0), FinishRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecideFinishConflict(tc.cur, tc.found, tc.held, me, runID); got != tc.want {
				t.Fatalf("DecideFinishConflict(%+v, %v, held %+v) = %v; want %v", tc.cur, tc.found, tc.held, got, tc.want)
			}
		})
	}
}

func TestDone(t *testing.T) {
	t.Parallel()
	cl := claim(StateRunning, predecessor, runID, 2)
	cl.Edge = "e1"
	got := Done(cl, me, Reply{Text: "r", FinishReason: "stop", RunID: runID})
	want := cl
	want.State, want.Worker, want.Reply = StateDone, me, &Reply{Text: "r", FinishReason: "stop", RunID: runID}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Done = %+v; want %+v", got, want)
	}
	if !got.Answered() {
		t.Fatal("a done claim with a reply is not Answered")
	}
}

func TestDecideAccept(t *testing.T) {
	t.Parallel()
	answered := Done(claim(StateRunning, other, "r", 1), other, Reply{Text: "x", RunID: "r"})
	doneNoReply := claim(StateDone, other, "r", 1)
	for _, tc := range []struct {
		name  string
		cl    Claim
		found bool
		want  EdgeAction
	}{
		{"absent: publish", Claim{}, false, EdgePublish},
		{"answered: cached reply", answered, true, EdgeCached},
		{"done without a reply: wait", doneNoReply, true, EdgePending},
		{"running: wait", claim(StateRunning, other, "r", 1), true, EdgePending},
		{"pending: wait", claim(StatePending, "", "r", 0), true, EdgePending},
		{"cancelled: wait for the cancelled answer", claim(StateCancel, "", "r", 0), true, EdgePending},
	} {
		if got := DecideAccept(tc.cl, tc.found); got != tc.want {
			t.Errorf("%s: DecideAccept = %d; want %d", tc.name, got, tc.want)
		}
	}
}

func TestDecideCancel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		cl            Claim
		found, waited bool
		want          CancelAction
		wantClaim     Claim
	}{
		{"unknown: no claim, not waited on", Claim{}, false, false, CancelUnknown, Claim{}},
		{"queued: create a cancel claim", Claim{}, false, true, CancelWrite, Claim{State: StateCancel, Session: "s", MessageID: "m"}},
		{"pending: write cancel", claim(StatePending, "", "r", 0), true, false, CancelWrite, claim(StateCancel, "", "r", 0)},
		{"running: tell the workers", claim(StateRunning, other, "r", 1), true, true, CancelTell, claim(StateRunning, other, "r", 1)},
		{"done: nothing", claim(StateDone, other, "r", 1), true, true, CancelNone, claim(StateDone, other, "r", 1)},
		{"cancelled: nothing", claim(StateCancel, "", "r", 0), true, true, CancelNone, claim(StateCancel, "", "r", 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cl := DecideCancel(tc.cl, tc.found, tc.waited, "s", "m")
			if got != tc.want || !reflect.DeepEqual(cl, tc.wantClaim) {
				t.Fatalf("DecideCancel = %d %+v; want %d %+v", got, cl, tc.want, tc.wantClaim)
			}
		})
	}
}
