package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/metrics"
	"termlink/server/record"
	"termlink/server/session"
)

// Store is the store of record in cluster mode (record.Store, with the
// parts record.Edge, record.Lifecycle and record.StatusReporter):
// JetStream instead of the workspace. It has no record.Recoverer (what
// a worker took and did not answer, JetStream gives to the next owner of
// its partition), no record.Joiner (a message a running turn took is
// recorded with the turn's reply) and no record.InFlight (a worker's
// router is given a message by its partition, never by an accept here). An edge claims and publishes what devices
// send and delivers what workers answer; a worker runs what its
// partitions deliver through the same router as the embedded server.
type Store struct {
	host Host
	log  *slog.Logger
	node *Node
	cfg  config.Cluster

	edge    *Waits   // edge: what it acked and has not answered yet
	tickets *Tickets // worker: deliveries held until answered
	claims  *Claimer // worker: starts and finishes them

	swept atomic.Uint64             // for /metrics (Metrics)
	watch atomic.Pointer[EdgeWatch] // cut off from NATS? (edgewatch.go)
}

var (
	_ record.Store          = (*Store)(nil)
	_ record.Edge           = (*Store)(nil)
	_ record.Lifecycle      = (*Store)(nil)
	_ record.StatusReporter = (*Store)(nil)
)

// Host is what the cluster's store needs of the server beyond the local
// router's queue (record.Queue), and no more.
type Host interface {
	record.Queue
	// ReplaceElsewhere closes the connection here of a peer that
	// connected to another edge.
	ReplaceElsewhere(channel, peer, edge string)
	// Unclaimed records a final reply no edge took (its channel's
	// metric and event).
	Unclaimed(out bus.Outbound, detail string)
}

// StoreOptions configure OpenStore.
type StoreOptions struct {
	Logger *slog.Logger
	// Process names this worker process in claims: with the node name,
	// a worker restarted under the same name tells its predecessor's runs
	// (cut short) from its own.
	Process string
	// ClaimHook, if set, runs at each Start and before each claim write
	// of a Start; an error stands for NATS trouble there (tests: a NATS
	// leader election).
	ClaimHook func(in bus.Inbound) error
	// Joins reports whether a channel's runner takes a session's next
	// message into its running turn (agent.Injector). A message given to
	// a dead worker is suspect (it may have started there) only if it is
	// the first of its session not answered then, or if its runner
	// joins; nil: every runner may join (every such message is suspect).
	Joins func(channelID string) bool
}

// OpenStore connects the node to NATS (waiting up to a minute for
// JetStream) and returns its store of record.
func OpenStore(cfg config.Cluster, host Host, opt StoreOptions) (*Store, error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := Open(ctx, cfg, opt.Logger)
	if err != nil {
		return nil, err
	}
	c := &Store{host: host, log: opt.Logger, node: n, cfg: n.Config(), edge: NewWaits(), tickets: NewTickets()}
	c.claims = NewClaimer(n, c.tickets, n.Name()+"#"+opt.Process, opt.Logger, func(in bus.Inbound) error {
		if hook := opt.ClaimHook; hook != nil {
			return hook(in)
		}
		return nil
	})
	c.claims.joins = opt.Joins
	return c, nil
}

// Node is the store's NATS node (tests; the server opens identity's
// stores on it, server/identity.go).
func (c *Store) Node() *Node { return c.node }

// Held is the ticket the worker holds for a message, nil for none (tests).
func (c *Store) Held(session, messageID string) *Ticket {
	return c.tickets.Held(Key{Session: session, MessageID: messageID})
}

// Metrics adds the cluster's series to /metrics.
func (c *Store) Metrics(r *metrics.Registry) {
	r.NewGaugeFunc("termlink_cluster_partitions_owned", "Session partitions this worker owns.", func() float64 { return float64(c.node.Owned()) })
	r.NewGaugeFunc("termlink_cluster_messages_held", "Messages of owned partitions this worker holds (queued or running, unacked in JetStream).", func() float64 {
		return float64(c.tickets.Len())
	})
	r.NewGaugeFunc("termlink_cluster_replies_awaited", "Messages this edge acked and has not answered yet.", func() float64 {
		return float64(c.edge.Len())
	})
	r.NewCounterFunc("termlink_cluster_reruns_total", "Runs started again because the worker running them died.", func() float64 { return float64(c.claims.Reruns.Load()) })
	r.NewCounterFunc("termlink_cluster_claim_conflicts_total", "Claim compare-and-sets another node won (read again and decided).", func() float64 { return float64(c.claims.Conflicts.Load()) })
	r.NewCounterFunc("termlink_cluster_swept_replies_total", "Replies an edge found in the dedupe bucket after the worker's send was lost.", func() float64 { return float64(c.swept.Load()) })
	c.node.healMetrics(r)
	r.NewCounterFunc("termlink_cluster_replies_resent_total", "Answered messages a worker got again (a partition moved) and answered from the claim.", func() float64 { return float64(c.claims.Resent.Load()) })
}

// Run subscribes and starts the node's loops: an edge takes replies and
// watches presence, a worker takes partitions and cancels (cancel
// interrupts a message of the local router).
func (c *Store) Run(cancel func(sessionKey, messageID string) bool, devices func() int) error {
	if c.cfg.Edge() {
		if err := c.node.SubscribeOut(c.reply); err != nil {
			return err
		}
		c.node.WatchPresence(c.presenceMoved)
		c.loop(2*time.Second, c.sweep)
	}
	if c.cfg.Worker() {
		if err := c.node.SubscribeCancel(func(key, id string) {
			c.claims.Cancelled(Key{Session: key, MessageID: id})
			cancel(key, id)
		}); err != nil {
			return err
		}
		// Lost: the queued copies of a partition this worker no longer owns
		// are not run (Start), and a later delivery queues its own.
		c.node.MirrorPresence() // replies find their edge without a read
		c.node.RunWorker(WorkerHooks{Me: c.claims.Me(), Deliver: c.deliver, Unfinished: c.tickets.Unfinished, Lost: c.tickets.Lost})
		c.loop(c.cfg.AckWait/3, c.keepInProgress)
	}
	c.node.Heartbeat(devices, c.node.Owned)
	c.watch.Store(c.watchNATS())
	return nil
}

// loop runs fn every d on a goroutine the node stops at close.
func (c *Store) loop(d time.Duration, fn func(ctx context.Context)) {
	c.node.Go(func(ctx context.Context) {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn(ctx)
			}
		}
	})
}

// Advertise implements record.Lifecycle: the address in the node's heartbeat.
func (c *Store) Advertise(url string) { c.node.SetURL(url) }

// StopRuns gives the partitions up (after the router has stopped).
func (c *Store) StopRuns() { c.node.StopWorker() }

// Close closes the node.
func (c *Store) Close() error { c.node.Close(); return nil }

// Health implements record.Store: a node NATS has not answered for
// longer than a lease says so (edgewatch.go); JetStream's other trouble
// shows in Status.
func (c *Store) Health() (bool, string) {
	if r := c.watch.Load().Lost(); r != "" {
		return false, r
	}
	return true, ""
}

// Refuses implements record.Edge: a node that is not an edge takes no
// devices, nor does an edge cut off from NATS (edgewatch.go).
func (c *Store) Refuses() string {
	if c.cfg.Edge() {
		return c.watch.Load().Lost()
	}
	return fmt.Sprintf("this termserver is cluster node %q with role %q: it runs agents and takes no devices; connect to an edge", c.cfg.Name, c.cfg.Role)
}

// ---- edge ----

// Accept implements record.Store in the cluster: claim the message id in
// the dedupe bucket (create-only), store the message in the inbound
// stream, then ack. A known id is answered from its claim. A session's
// later messages wait for one whose accept failed above the store (the
// runtime's package record/holdback): a failed publish may still be
// stored, so it is resent first.
func (c *Store) Accept(ctx context.Context, in bus.Inbound, perSession int, ack func(record.Accepted)) error {
	k := KeyOf(in)
	// Any replica's copy: a claim it has not applied yet is a resend
	// published again (PeekClaim says why that is safe).
	prior, _, found, err := c.node.PeekClaim(ctx, in.SessionKey, in.MessageID)
	if err != nil {
		return err
	}
	switch DecideAccept(prior, found) {
	case EdgeCached:
		ack(record.Accepted{RunID: prior.RunID, Duplicate: true, Reply: replyMessage(prior), Detail: "done: cached reply sent"})
		return nil
	case EdgePending: // a worker has started it, or it was cancelled
		c.edge.Wait(in, false) // its reply comes here now
		ack(record.Accepted{RunID: prior.RunID, Duplicate: true, Pending: true, Detail: "pending: run still in progress"})
		return nil
	}
	// The channel's bounds and the start of the wait (its ack not
	// written yet) in one step: two accepts cannot both take the last
	// place. A resend of a message waited on here (again) passes them:
	// the stream answers it as a duplicate.
	again, refused := c.edge.Admit(in, perSession, c.host.MaxWaiting())
	if refused != "" {
		return fmt.Errorf("%w: %s", record.ErrBusy, refused)
	}
	stored, last, err := c.node.publishInbound(ctx, in, c.edge.LastStored(in.SessionKey))
	if err != nil {
		// Not stored, or not known to be: the device resends it, and the
		// same Nats-Msg-Id keeps a second copy out of the stream. (A
		// resend's first copy is stored and still waited on.)
		if !again {
			c.edge.Done(k)
		}
		return err
	}
	c.edge.Stored(in.SessionKey, last)
	if stored.Duplicate {
		// In the stream already (a resend before a worker started it,
		// or a second edge): the first copy answers it.
		ack(record.Accepted{RunID: in.RunID, Duplicate: true, Pending: true, Detail: "pending: queued, not started yet"})
		c.acked(k)
		return nil
	}
	ack(record.Accepted{RunID: in.RunID})
	c.acked(k)
	return nil
}

// acked says the ack is written: a reply that came first goes now.
func (c *Store) acked(k Key) {
	if parked := c.edge.Acked(k); parked != nil {
		c.reply(*parked)
	}
}

// Disconnected forgets what a peer's connection waited on: the device
// resends it wherever it reconnects.
func (c *Store) Disconnected(channel, peer string) {
	c.edge.Disconnected(channel, peer)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.node.ClearPresence(ctx, channel, peer)
}

// Connected records that this edge holds the peer now (before the
// device reads connected: replies find this edge).
func (c *Store) Connected(channel, peer string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev, err := c.node.SetPresence(ctx, channel, peer)
	if err != nil {
		c.log.Warn("cluster: presence not recorded; replies find the peer when it resends", "peer_id", peer, "err", err)
		return
	}
	c.edge.Present(channel, peer, rev)
}

// presenceMoved closes this edge's connection of a peer that connected
// to another edge (close code 4001, as for a newer connection here).
func (c *Store) presenceMoved(channel, peer, edge string, rev uint64) {
	if edge == c.node.Name() {
		return
	}
	if !c.edge.Newer(channel, peer, rev) {
		return // older than the connection held here (a watch running late)
	}
	c.host.ReplaceElsewhere(channel, peer, edge)
}

// reply takes a reply, progress update or delta a worker sent here. A
// final is sent only if this edge waits on it: a second copy (a worker
// re-sent it after a partition moved) or one whose device left is
// dropped, and the device gets it from its claim when it resends. A
// final or a delta that comes before its message's ack is written
// waits for it (the worker may start before the edge writes the ack).
func (c *Store) reply(out bus.Outbound) {
	if out.Kind == bus.Final {
		for _, k := range c.edge.Before(Key{out.SessionKey, out.MessageID}) {
			c.sendFromClaim(context.Background(), k) // a reply lost on its way: see Waits.Before
		}
	}
	c.forward(out)
}

// forward sends a reply, progress update or delta on to its device (see
// reply).
func (c *Store) forward(out bus.Outbound) {
	if out.Kind == bus.Final && !c.edge.Final(out) {
		return // parked until its ack is written, or not waited on here
	}
	if out.Kind == bus.Delta && !c.edge.Delta(out) {
		return // parked until its ack is written
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.host.Dispatch(ctx, out); err != nil && out.Kind == bus.Final {
		c.log.Warn("cluster: reply not dispatched; the device gets it when it resends", "message_id", out.MessageID, "err", err)
	}
}

// sweep looks up the claims of messages waited on for a while: a reply
// lost on its way here (this edge was reconnecting to NATS, or the peer
// moved here just as its reply went to the old edge) is sent from there.
func (c *Store) sweep(ctx context.Context) {
	for _, k := range c.edge.Due(time.Now(), 3*time.Second, 256) {
		c.sendFromClaim(ctx, k)
	}
}

// sendFromClaim sends the device the reply of message k from its claim,
// if it is answered and this edge still waits on it.
func (c *Store) sendFromClaim(ctx context.Context, k Key) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cl, _, found, err := c.node.GetClaim(ctx, k.Session, k.MessageID)
	if err != nil || !found || !cl.Answered() {
		return
	}
	w, ok := c.edge.Waiting(k)
	if !ok {
		return
	}
	c.swept.Add(1)
	c.forward(bus.Outbound{Kind: bus.Final, ChannelID: w.Channel, PeerID: w.Peer, SessionKey: k.Session,
		MessageID: k.MessageID, RunID: cl.Reply.RunID, Text: cl.Reply.Text, FinishReason: cl.Reply.FinishReason,
		Media: cl.Reply.Media, Started: w.Since})
}

// Cancel interrupts a message wherever it is: not started, its claim
// says so (the worker answers it cancelled); running, the workers are
// told. It reports whether the message is queued or running.
func (c *Store) Cancel(ctx context.Context, key, messageID string) bool {
	for range 3 {
		cl, rev, found, err := c.node.GetClaim(ctx, key, messageID)
		if err != nil {
			return false
		}
		_, waited := c.edge.Waiting(Key{Session: key, MessageID: messageID})
		act, cl := DecideCancel(cl, found, waited, key, messageID)
		switch act {
		case CancelWrite:
			if _, err := c.node.UpdateClaim(ctx, cl, rev); errors.Is(err, ErrConflict) {
				continue // started meanwhile: look again
			} else if err != nil {
				return false
			}
			// A worker may hold it queued: tell it too.
			_ = c.node.Cancel(key, messageID)
			return true
		case CancelTell:
			return c.node.Cancel(key, messageID) == nil
		default: // unknown here, answered or cancelled already
			return false
		}
	}
	return false
}

func replyMessage(cl Claim) *link.Message {
	return &link.Message{Role: link.RoleAssistant, MessageID: cl.MessageID, RunID: cl.Reply.RunID,
		Text: cl.Reply.Text, FinishReason: cl.Reply.FinishReason}
}

// ---- worker ----

// deliver takes a message of an owned partition to the router. What its
// claim says (new, answered, cancelled, cut short on a worker that died)
// is decided when its run starts (Start).
func (c *Store) deliver(ctx context.Context, d *Delivery) {
	in := d.In
	k := KeyOf(in)
	if c.attach(k, d) {
		return
	}
	if in.RunID == "" {
		in.RunID = c.host.NewRunID()
	}
	if err := c.host.ReserveWait(ctx, in.SessionKey, math.MaxInt); err != nil {
		return // stopping: unacked, the next owner runs it
	}
	t, in := c.tickets.Add(d, in)
	if t == nil {
		c.host.Release(in.SessionKey)
		c.attach(k, d)
		return
	}
	if err := c.host.Put(ctx, in); err != nil {
		c.host.Release(in.SessionKey)
		c.tickets.Forget(k, t)
	}
}

// attach gives a ticket held for k the delivery d: JetStream sent the
// message again while this worker holds it (an in-progress ack was
// lost, or this worker took its partition again and the consumer was
// made again). The copy already queued or running answers it.
func (c *Store) attach(k Key, d *Delivery) bool {
	if !c.tickets.Attach(k, d) {
		return false
	}
	_ = d.InProgress()
	return true
}

// ticket is the ticket of the router's copy in: nil for a copy left
// queued from an earlier delivery (its ticket was dropped when the
// partition moved, and a later delivery has its own ticket and copy).
func (c *Store) ticket(in bus.Inbound) *Ticket {
	return c.tickets.Of(KeyOf(in), in.Delivery)
}

// interruptedTwice answers a message whose run two workers' deaths cut
// short.
const interruptedTwice = "interrupted twice by a worker failure; not run again - send it again"

// Start decides, by the message's claim, what its turn is, and marks the
// claim running (compare-and-set: one worker starts a message). New:
// run. Cut short on a worker that died: run again, recorded as
// interrupted; cut short twice: answered with an error. Answered
// already (a partition moved after the reply): answered with the cached
// reply. Cancelled before it started: answered cancelled. ok false: not
// to be run here (NATS trouble: it comes again).
//
// A copy whose ticket was dropped (its partition moved while it waited
// in the queue) is not run, even if a later delivery of the message has a
// ticket: that delivery has its own copy, queued behind the copies of
// the session's earlier messages, so it runs in stream order. From here
// on the ticket is starting: a partition lost while its claim is being
// written keeps it, so a delivery after the partition came back finds
// it, and the run's reply is recorded and acked through it.
func (c *Store) Start(ctx, _ context.Context, in bus.Inbound) (answer *agent.Result, ok bool) {
	t := c.ticket(in)
	if t == nil || !c.tickets.SetState(KeyOf(in), t, TicketStarting) {
		return nil, false // a copy from before the partition moved
	}
	step, ok := c.claims.Start(ctx, t, in)
	if !ok {
		return nil, false
	}
	switch step.Action {
	case StartCached:
		r := t.Claim.Reply
		return &agent.Result{Text: r.Text, FinishReason: r.FinishReason, Media: r.Media}, true
	case StartCancelled:
		t.Recs = []session.Record{userRecord(in)}
		res := record.CancelledBeforeStart
		return &res, true
	}
	return c.started(t, in, step), true
}

// started records the turn's first records (step: which run); the
// answer is non-nil for a message cut short too often.
func (c *Store) started(t *Ticket, in bus.Inbound, step StartStep) *agent.Result {
	t.Recs = []session.Record{userRecord(in)}
	if step.Attempt > 1 {
		what := fmt.Sprintf("the run of message %s was cut short; run %d of at most %d", in.MessageID, step.Attempt, MaxRunAttempts)
		if step.Unsure {
			what = fmt.Sprintf("the worker that held message %s stopped or lost its partition before answering it, and may have been running it; run %d of at most %d",
				in.MessageID, step.Attempt, MaxRunAttempts)
		}
		t.Recs = append(t.Recs, session.Record{Role: "system", MessageID: in.MessageID, RunID: in.RunID, Content: what,
			Extra: map[string]any{"event": record.EventInterrupted, "attempt": step.Attempt}})
	}
	if step.Interrupted() {
		return &agent.Result{Text: interruptedTwice, FinishReason: link.FinishError}
	}
	return nil
}

func userRecord(in bus.Inbound) session.Record {
	return session.Record{Role: "user", Content: in.Text, MessageID: in.MessageID, RunID: in.RunID,
		Timestamp: in.Received.Format(session.TimeLayout)}
}

// Finish records a reply: the claim set to done with the cached reply
// and the turn's records (the history), stored before it is sent. ok
// false: another worker took the message over meanwhile and answers it.
// The session's next message records its own start (Start).
func (c *Store) Finish(ctx context.Context, in bus.Inbound, reply *link.Message, media []string, _ *bus.Inbound) bool {
	t := c.ticket(in)
	if t == nil {
		return false
	}
	if t.Cached {
		return true // answered before: stored already
	}
	recs := t.Recs
	if len(recs) == 0 { // cancelled while queued: never started
		recs = []session.Record{userRecord(in)}
	}
	recs = append(recs, session.Record{Role: "assistant", Content: reply.Text, MessageID: in.MessageID, RunID: in.RunID,
		FinishReason: reply.FinishReason, Media: media})
	return c.claims.Finish(ctx, t, in, recs, Reply{Text: reply.Text, FinishReason: reply.FinishReason, RunID: in.RunID, Media: media})
}

// Deliver sends a reply or progress to the edge of its peer; a final
// reply's message is acked then: it is answered.
func (c *Store) Deliver(ctx context.Context, in bus.Inbound, out bus.Outbound) {
	c.send(ctx, out)
	if out.Kind != bus.Final {
		return
	}
	if t := c.ticket(in); t != nil {
		_ = c.tickets.Delivery(t).Ack()
		c.tickets.Forget(KeyOf(in), t)
	}
}

func (c *Store) send(ctx context.Context, out bus.Outbound) {
	edge, err := c.node.SendOut(ctx, out)
	if out.Kind != bus.Final {
		return
	}
	if err != nil || edge == "" {
		detail := "no edge holds the peer; the device gets the reply when it resends the message"
		if err != nil {
			detail = err.Error() + "; the device gets the reply when it resends the message"
		}
		c.host.Unclaimed(out, detail)
	}
}

// keepInProgress tells JetStream that every message held is still being
// worked on, so none is redelivered while its run goes on.
func (c *Store) keepInProgress(context.Context) {
	for _, d := range c.tickets.Deliveries() {
		_ = d.InProgress()
	}
}

// Status is /api/status's "cluster" object.
type Status struct {
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	Partitions int        `json:"partitions"`
	Nodes      []NodeInfo `json:"nodes"`
	Problem    string     `json:"problem,omitempty"`
	// Owned are the partitions this worker owns; a stuck one says why
	// and since when (its consumer is recreated after
	// cluster.consumerStuckSeconds).
	Owned []PartitionState `json:"owned,omitempty"`
}

// Status implements record.StatusReporter: this node, its role and the nodes it
// sees.
func (c *Store) Status(ctx context.Context) any {
	st := Status{Name: c.cfg.Name, Role: c.cfg.Role, Partitions: c.cfg.Partitions, Nodes: []NodeInfo{}}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	nodes, err := c.node.Nodes(ctx)
	if err != nil {
		st.Problem = err.Error()
	}
	if nodes != nil {
		st.Nodes = nodes
	}
	st.Owned = c.node.Partitions()
	return st
}
