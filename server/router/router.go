// Package router runs what the store of record accepted: the store hands
// it each message (Put) and it hands each to its channel's agent.Runner, one
// at a time and in order within a session, sessions in parallel up to a
// limit, offering a message to a running turn when the runner takes
// injections (agent.Injector). Admission bounds the messages accepted and
// not yet started. What happens around a run (recording its start and
// reply, events, metrics, progress) is the Host's: the server's runtime.
// A run of a message whose device listed "stream" gets a Request.Stream
// that writes into an agent.Stream, whose coalesced updates go to
// Host.Delta; it is closed when the run returns, before its reply.
package router

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"termlink/internal/warm"
	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/record"
)

// Router runs the messages put to it: one at a time and in order within
// a session, sessions in parallel up to a limit. A session's worker
// exists only while the session has work (on a warm goroutine).
type Router struct {
	host      Host
	admission *Admission
	runners   map[string]agent.Runner // by channel id
	workspace string
	slots     chan struct{} // one token per run allowed at once

	runCtx    context.Context // parent of every run; cancelled at hard stop
	cancelRun context.CancelFunc
	// goroutines runs the session workers and injections on warm
	// goroutines: a session of one device sending one message at a time
	// empties its queue after each, and a cold goroutine per message
	// grew its stack anew each time.
	goroutines *warm.Pool[job]

	mu      sync.Mutex
	stopped bool       // stop has begun: no new workers
	cond    *sync.Cond // on mu: an injection settled
	queues  map[string]*sessionQueue
	// spare are queues of sessions whose work ended, kept (with their
	// waiting slices) for the next sessions that get work: a session of
	// a device with one message at a time gets and loses a queue per
	// message.
	spare []*sessionQueue
	wg    sync.WaitGroup
	// precancelled holds cancels for messages that were accepted (acked)
	// but had not reached the router yet (between the ack and Put; in a
	// cluster, in the inbound stream), or are offered to a running turn:
	// the message is answered cancelled when it arrives.
	// Its size is bounded by the accepted-not-started messages
	// (maxWaitingRuns); stop clears it.
	precancelled map[cancelKey]bool
	// questions are the questions open (Request.Ask), by id; closedQs
	// the ids of the last closed ones (questions.go).
	questions map[string]*openQuestion
	closedQs  closedQuestions
}

type cancelKey struct{ session, messageID string }

// job is what a warm goroutine of the router runs: a session's worker
// (worker set: no closure to allocate for the commonest job) or f.
type job struct {
	worker *sessionQueue
	r      *Router
	f      func()
}

func (j job) run() {
	if j.worker != nil {
		j.r.work(j.worker.key, j.worker)
		return
	}
	j.f()
}

// The warm goroutines kept for session workers and injections: idle
// ones beyond maxIdleSessionWorkers exit, and each exits after
// sessionWorkerIdle without work. As many spare queues are kept, each
// with a waiting slice of at most maxSpareWaiting places.
const (
	maxIdleSessionWorkers = 128
	sessionWorkerIdle     = 30 * time.Second
	maxSpareWaiting       = 16
)

type sessionQueue struct {
	key     string // the session's
	waiting []bus.Inbound
	// taken is the worker's next message (taken at a reply, its start
	// recorded with it); kept here, not allocated per message.
	taken   bus.Inbound
	running string // message id of the run in progress
	cancel  context.CancelFunc
	// Messages injected into the run in progress (agent.Injector): its
	// result answers them too. gen counts runs, so an injection that
	// lands just as its run ends is answered by that run's result.
	joined    []bus.Inbound
	injecting bool // an Inject call is in flight (at most one per session)
	gen       uint64
	lastGen   uint64
	lastRes   agent.Result
}

// Host is what happens around a run: the server's runtime (the store of
// record, events, metrics, progress).
type Host interface {
	// Start decides and records the start of in's run (record.Store.Start).
	Start(ctx, stopCtx context.Context, in bus.Inbound) (answer *agent.Result, ok bool)
	// Started says a run (or its answer without one) began.
	Started(in bus.Inbound)
	// Joined records the start of a message a running turn took.
	Joined(ctx context.Context, in bus.Inbound)
	// Finished records and sends a run's result; next, the session's next
	// message taken to start right after it, may be recorded with it.
	Finished(ctx context.Context, in bus.Inbound, res agent.Result, took time.Duration, next *bus.Inbound)
	// Dropped says n started runs end without a result (a hard stop).
	Dropped(n int)
	// Progress sends an interim update of a run.
	Progress(ctx context.Context, in bus.Inbound, text string)
	// Delta sends the reply text a run has streamed so far (all of it:
	// each call extends the one before), for a device that listed
	// "stream"; coalesced by an agent.Stream, at most one per
	// agent.StreamGap. None comes after the run's Finished.
	Delta(ctx context.Context, in bus.Inbound, text string)
	// Event records an event a runner reports.
	Event(in bus.Inbound, name, detail string)
	// Question sends a question of a run to its device (the "choice"
	// extension), the way progress goes; QuestionClosed tells the
	// device's adapter that it is no longer open. Both best effort.
	Question(ctx context.Context, in bus.Inbound, q link.Question)
	QuestionClosed(ctx context.Context, in bus.Inbound, questionID string)
	// UpdateMeta changes a session's metadata (agent.Request.UpdateMeta).
	UpdateMeta(ctx context.Context, sessionKey string, update func(map[string]any)) error
	// Pending reports whether a message is accepted and not answered
	// (record.InFlight.Pending; false for a store without one).
	Pending(sessionKey, messageID string) bool
}

// New returns a router that runs the messages put to it with the runners
// (by channel id), at most maxRuns at once; admission is where the
// messages it takes had their waiting places.
func New(host Host, admission *Admission, runners map[string]agent.Runner, workspace string, maxRuns int) *Router {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Router{host: host, admission: admission, runners: runners, workspace: workspace, slots: make(chan struct{}, maxRuns),
		runCtx: ctx, cancelRun: cancel, goroutines: warm.New(maxIdleSessionWorkers, sessionWorkerIdle, func(j job) { j.run() }), queues: map[string]*sessionQueue{}, precancelled: map[cancelKey]bool{},
		questions: map[string]*openQuestion{}}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// StartsAtOnce reports whether a message of session key accepted now
// would start without waiting: nothing of the session is queued or
// running (the caller checks that nothing is on its way either), a run
// slot is free and the router is not stopping. The store of record then records
// the start with the message (one log append instead of two); only if
// every slot fills in between does the message wait with its start
// recorded.
func (r *Router) StartsAtOnce(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.stopped && r.queues[key] == nil && len(r.slots) < cap(r.slots)
}

// Joins reports whether channelID's runner may take a session's next
// message into its running turn (agent.Injector): then a message can
// start before the one ahead of it is answered. The runners are fixed
// at New.
func (r *Router) Joins(channelID string) bool {
	_, ok := r.runners[channelID].(agent.Injector)
	return ok
}

// Put takes a message the store of record accepted (with its waiting
// place reserved in the admission) and queues it to run. It never blocks:
// the caller's goroutine (the connection's, or a cluster partition's
// consumer) goes on at once. After Stop the message is left unanswered in
// the store of record, which runs it at the next start.
func (r *Router) Put(in bus.Inbound) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.putLocked(in)
}

// putLocked is Put with r.mu held.
func (r *Router) putLocked(in bus.Inbound) {
	if r.stopped {
		r.admission.Release(in.SessionKey, 1)
		return // in the session log, unanswered: the next start runs it
	}
	if a := answerOf(&in); a != nil {
		r.takeAnswerLocked(in, *a) // never queued behind the session's run
		return
	}
	if k := (cancelKey{in.SessionKey, in.MessageID}); r.precancelled[k] {
		delete(r.precancelled, k)
		r.answerCancelled(in)
		return
	}
	q := r.queues[in.SessionKey]
	if q == nil {
		q = r.newQueue()
		key := in.SessionKey // the closure takes the key, not in (which would live on the heap)
		r.queues[key] = q
		r.wg.Add(1)
		q.key = key
		r.goroutines.Run(job{worker: q, r: r})
		q.waiting = append(q.waiting, in)
		return
	}
	// A busy session whose runner takes injections: offer the message to
	// the running turn, unless something is already waiting (it must not
	// be overtaken) or another offer is in flight.
	if inj, ok := r.runners[in.ChannelID].(agent.Injector); ok && !in.Recovered && q.running != "" && !q.injecting && len(q.waiting) == 0 {
		q.injecting = true
		r.wg.Add(1)
		gen := q.gen
		offered := new(bus.Inbound) // on the heap here only, not on every Put
		*offered = in
		r.goroutines.Run(job{f: func() { r.inject(inj, q, *offered, gen) }})
		return
	}
	q.waiting = append(q.waiting, in)
}

// newQueue is a spare queue or a new one; r.mu is held.
func (r *Router) newQueue() *sessionQueue {
	if n := len(r.spare); n > 0 {
		q := r.spare[n-1]
		r.spare[n-1] = nil
		r.spare = r.spare[:n-1]
		return q
	}
	return &sessionQueue{}
}

// keepQueue keeps the queue of a session whose worker has ended, if
// nothing refers to it any more (no injection in flight); r.mu is held.
func (r *Router) keepQueue(q *sessionQueue) {
	if q.injecting || len(r.spare) >= maxIdleSessionWorkers {
		return
	}
	waiting := q.waiting[:0]
	if cap(waiting) > maxSpareWaiting {
		waiting = nil
	}
	clear(waiting[:cap(waiting)])
	*q = sessionQueue{waiting: waiting}
	r.spare = append(r.spare, q)
}

// popWaiting removes the first waiting message of q and returns it; the
// rest move up, so the slice keeps its room for the next ones (re-slicing
// from the front gave it up: every later append allocated). r.mu is held.
func popWaiting(q *sessionQueue) bus.Inbound {
	in := q.waiting[0]
	n := copy(q.waiting, q.waiting[1:])
	q.waiting[n] = bus.Inbound{}
	q.waiting = q.waiting[:n]
	return in
}

// inject offers in to the running turn of its session (generation gen).
// Taken, the turn's result answers it; refused, it is first in line for
// the next turn.
func (r *Router) inject(inj agent.Injector, q *sessionQueue, in bus.Inbound, gen uint64) {
	defer r.wg.Done()
	taken := inj.Inject(r.runCtx, r.request(r.runCtx, &in))
	if taken {
		r.admission.Release(in.SessionKey, 1) // running now, in the turn it joined
		r.host.Started(in)
		r.host.Joined(r.runCtx, in)
	}
	r.mu.Lock()
	q.injecting = false
	r.cond.Broadcast()
	k := cancelKey{in.SessionKey, in.MessageID}
	cancelled := r.precancelled[k]
	delete(r.precancelled, k)
	switch {
	case taken && q.gen == gen && q.running != "":
		q.joined = append(q.joined, in)
		if cancelled && q.cancel != nil {
			q.cancel() // cancelled while offered: interrupt the turn it joined
		}
		// A message that came while this offer was in flight (its
		// run_started record is a durable write) waited behind it: offer
		// it to the same turn now, in order, rather than leave it for
		// the next turn.
		if len(q.waiting) > 0 && !q.waiting[0].Recovered && !r.stopped {
			next := popWaiting(q)
			q.injecting = true
			r.wg.Add(1)
			r.goroutines.Run(job{f: func() { r.inject(inj, q, next, gen) }})
		}
		r.mu.Unlock()
	case cancelled && !taken && !r.stopped:
		r.answerCancelled(in)
		r.mu.Unlock()
	case taken:
		// The turn it joined has just ended: answer with its result.
		res := q.lastRes
		r.mu.Unlock()
		r.host.Finished(r.runCtx, in, res, 0, nil)
	case r.stopped:
		r.mu.Unlock()
		r.admission.Release(in.SessionKey, 1) // unanswered in the log: the next start runs it
	default:
		q.waiting = append([]bus.Inbound{in}, q.waiting...)
		r.mu.Unlock()
	}
}

// request is in's agent.Request; its callbacks hold in (a copy of the
// message of its own: the caller's for the run).
func (r *Router) request(ctx context.Context, in *bus.Inbound) agent.Request {
	h := r.host
	return agent.Request{ChannelID: in.ChannelID, SessionKey: in.SessionKey, ChatID: in.ChatID(), PeerID: in.PeerID,
		MessageID: in.MessageID, RunID: in.RunID, Text: in.Text, Media: in.Media, Workspace: r.workspace,
		Capabilities: in.Capabilities,
		UpdateMeta: func(ctx context.Context, update func(map[string]any)) error {
			return h.UpdateMeta(ctx, in.SessionKey, update)
		},
		Event: func(name, detail string) { h.Event(*in, name, detail) },
	}
}

// work runs a session's queue until it is empty.
//
// When a run ends with the next message waiting, the next message is
// taken before the reply is recorded, and its start is recorded in the
// same log append as the reply: one group commit between two runs of a
// busy session instead of two. It takes a run slot then if one is free,
// else it waits for one with its start recorded, as a message accepted
// when every slot has just filled does (record/local's Accept): a restart
// in between counts it as cut short once.
func (r *Router) work(key string, q *sessionQueue) {
	defer r.wg.Done()
	var (
		next     *bus.Inbound // its start is recorded with the last reply
		nextSlot bool         // next was taken with a run slot
		nextCtx  context.Context
		nextStop context.CancelFunc
	)
	for {
		var (
			in       bus.Inbound
			ctx      context.Context
			cancel   context.CancelFunc
			haveSlot bool
		)
		if next != nil {
			in, ctx, cancel, haveSlot = *next, nextCtx, nextStop, nextSlot
			next, q.taken = nil, bus.Inbound{}
		} else {
			r.mu.Lock()
			for len(q.waiting) == 0 && q.injecting {
				r.cond.Wait() // a refused injection comes back to this queue
			}
			if len(q.waiting) == 0 || r.runCtx.Err() != nil {
				// Stopping leaves waiting messages in the session log,
				// unanswered: the next start runs them.
				delete(r.queues, key)
				if len(q.waiting) == 0 {
					r.keepQueue(q)
				}
				r.mu.Unlock()
				return
			}
			in = r.take(key, q)
			ctx, cancel = context.WithCancel(r.runCtx)
			q.running, q.cancel = in.MessageID, cancel
			r.mu.Unlock()
		}

		res, took, ok := r.runOne(ctx, in, haveSlot)
		cancel()

		r.mu.Lock()
		joined := q.joined
		q.running, q.cancel, q.joined = "", nil, nil
		q.lastGen, q.lastRes = q.gen, res
		if ok && !r.stopped && r.runCtx.Err() == nil && len(q.waiting) > 0 && !q.injecting {
			q.taken = r.take(key, q)
			next = &q.taken
			nextCtx, nextStop = context.WithCancel(r.runCtx)
			q.running, q.cancel = q.taken.MessageID, nextStop
			select {
			case r.slots <- struct{}{}:
				nextSlot = true
			default: // every slot is busy: it waits for one (runOne), its start recorded already
				nextSlot = false
			}
		}
		r.mu.Unlock()
		if ok {
			// runCtx: a reply the log refuses is retried until the hard stop.
			r.host.Finished(r.runCtx, in, res, took, next)
			for _, j := range joined {
				r.host.Finished(r.runCtx, j, res, took, nil)
			}
		} else {
			r.host.Dropped(len(joined))
		}
	}
}

// take removes the first waiting message of q, which starts now; r.mu is
// held.
func (r *Router) take(key string, q *sessionQueue) bus.Inbound {
	in := popWaiting(q)
	r.admission.Release(key, 1)
	q.gen++
	return in
}

// runOne runs one message (haveSlot: with a run slot taken for it); ok is
// false when nothing is to be recorded (a hard stop interrupted it: the
// next start runs it again).
func (r *Router) runOne(ctx context.Context, in bus.Inbound, haveSlot bool) (res agent.Result, took time.Duration, ok bool) {
	if !haveSlot {
		select {
		case r.slots <- struct{}{}:
			haveSlot = true
		default: // ctx.Done() only when waiting: it makes the context's channel
		}
	}
	if !haveSlot {
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			if r.runCtx.Err() != nil {
				return agent.Result{}, 0, false
			}
			r.host.Started(in)
			return record.CancelledBeforeStart, 0, true
		}
	}
	defer func() { <-r.slots }()
	runner := r.runners[in.ChannelID]
	if runner == nil {
		return agent.Result{}, 0, false
	}
	answer, run := r.host.Start(ctx, r.runCtx, in)
	if !run {
		return agent.Result{}, 0, false
	}
	if answer != nil {
		r.host.Started(in)
		return *answer, 0, true
	}
	r.host.Started(in)
	req := r.request(ctx, &in) // in is this run's copy (on the heap: the callbacks hold it)
	var stream *agent.Stream
	if slices.Contains(in.Capabilities, link.CapStream) {
		stream = agent.NewStream(agent.MaxStreamChars, func(text string) { r.host.Delta(ctx, in, text) })
		req.Stream = stream.Write
	}
	if slices.Contains(in.Capabilities, link.CapChoice) {
		var asked int
		req.Ask = func(actx context.Context, q agent.Question) (string, error) { return r.ask(ctx, actx, in, &asked, q) }
	}
	start := time.Now()
	res = runner.Run(ctx, req, func(text string) { r.host.Progress(ctx, in, text) })
	if stream != nil {
		stream.Close() // what is pending is dropped: the reply supersedes it, and goes after every delta
	}
	if r.runCtx.Err() != nil {
		r.host.Dropped(1)
		return agent.Result{}, 0, false
	}
	return res, time.Since(start), true
}

// Cancel interrupts the run of messageID in session key, or drops it from
// the queue with a cancelled reply. It reports whether it found it.
func (r *Router) Cancel(key, messageID string) bool {
	r.mu.Lock()
	q := r.queues[key]
	if q == nil {
		r.mu.Unlock()
		return r.cancelInFlight(key, messageID)
	}
	if q.cancel != nil && q.running == messageID {
		q.cancel()
		r.mu.Unlock()
		return true
	}
	for _, j := range q.joined { // injected into the running turn: interrupt it
		if j.MessageID == messageID && q.cancel != nil {
			q.cancel()
			r.mu.Unlock()
			return true
		}
	}
	for i, in := range q.waiting {
		if in.MessageID == messageID {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			r.answerCancelled(in)
			r.mu.Unlock()
			return true
		}
	}
	r.mu.Unlock()
	return r.cancelInFlight(key, messageID)
}

// cancelInFlight handles a cancel for a message the router does not hold:
// accepted and acked (dedupe has it pending) but not put to the router yet or being
// offered to a running turn. It is answered cancelled when it arrives.
func (r *Router) cancelInFlight(key, messageID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped || !r.host.Pending(key, messageID) {
		return false
	}
	if q := r.queues[key]; q != nil {
		// Arrived meanwhile: waiting now, or running.
		if q.running == messageID && q.cancel != nil {
			q.cancel()
			return true
		}
		for i, in := range q.waiting {
			if in.MessageID == messageID {
				q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
				r.answerCancelled(in)
				return true
			}
		}
	}
	r.precancelled[cancelKey{key, messageID}] = true
	return true
}

// answerCancelled answers a message that never started with a cancelled
// reply, from a goroutine of its own (the reply is logged; r.mu may be
// held by the caller). The waiting place it held is released.
func (r *Router) answerCancelled(in bus.Inbound) {
	r.admission.Release(in.SessionKey, 1)
	r.wg.Add(1)
	r.goroutines.Run(job{f: func() {
		defer r.wg.Done()
		r.host.Started(in)
		r.host.Finished(r.runCtx, in, record.CancelledBeforeStart, 0, nil)
	}})
}

// stop waits for the runs in progress until ctx ends, then cancels them.
// Waiting messages are not started.
func (r *Router) Stop(ctx context.Context) {
	r.mu.Lock()
	r.stopped = true // no wg.Add after this: Put checks it under mu
	clear(r.precancelled)
	for key, q := range r.queues {
		r.admission.Release(key, len(q.waiting))
		q.waiting = nil // left in the session log, unanswered
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.cancelRun()
		<-done
	}
	r.cancelRun()
	r.goroutines.Stop()
}

// IsStopped reports whether stop has begun.
func (r *Router) IsStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// Load reports runs in progress and messages waiting (accepted, not yet
// started: queued, on the way to Put or being offered to a running turn).
func (r *Router) Load() (running, waiting int) {
	r.mu.Lock()
	for _, q := range r.queues {
		if q.running != "" {
			running++
		}
	}
	r.mu.Unlock()
	return running, r.admission.Waiting()
}

// Run is a run in progress: its session and message.
type Run struct{ Session, MessageID string }

// PeerRuns lists the runs in progress in every session of the peer whose
// session id (thread-less) is base: its own and its threads'.
func (r *Router) PeerRuns(base string) []Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Run
	for key, q := range r.queues {
		if key != base && !strings.HasPrefix(key, base+":") {
			continue
		}
		if q.running != "" {
			out = append(out, Run{Session: key, MessageID: q.running})
		}
		for _, j := range q.joined {
			out = append(out, Run{Session: key, MessageID: j.MessageID})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MessageID < out[j].MessageID })
	return out
}

// PeerSessions lists the peer's sessions with queued or running work
// (base, the thread-less one, first).
func (r *Router) PeerSessions(base string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{base}
	for key := range r.queues {
		if strings.HasPrefix(key, base+":") {
			out = append(out, key)
		}
	}
	sort.Strings(out[1:])
	return out
}
