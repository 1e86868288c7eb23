package server

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
	"termlink/server/cluster"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/session"
)

// clusterNode is the server's side of the cluster mode (package
// server/cluster has the NATS side). With it the runtime's store of
// record is JetStream instead of the workspace: an edge claims and
// publishes what devices send and delivers what workers answer; a worker
// runs what its partitions deliver through the same router as the
// embedded server.
type clusterNode struct {
	host    clusterHost
	log     *slog.Logger
	metrics *serverMetrics
	node    *cluster.Node
	cfg     config.Cluster

	edge    *cluster.Waits   // edge: what it acked and has not answered yet
	tickets *cluster.Tickets // worker: deliveries held until answered
	claims  *cluster.Claimer // worker: starts and finishes them

	swept atomic.Uint64 // for /metrics (registerMetrics)
}

// registerMetrics adds the cluster's series to /metrics.
func (c *clusterNode) registerMetrics(m *serverMetrics) {
	r := &m.reg
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
	r.NewCounterFunc("termlink_cluster_replies_resent_total", "Answered messages a worker got again (a partition moved) and answered from the claim.", func() float64 { return float64(c.claims.Resent.Load()) })
}

// clusterHost is what the cluster glue needs of the runtime, and no
// more: the local router's queue and admission, run ids, the way out
// to the devices connected here, and the channels' records.
type clusterHost interface {
	// reserve takes a place in the router's admission for a session
	// (waiting while the server is full); release gives it back.
	reserve(ctx context.Context, session string) error
	release(session string)
	// maxWaiting is the server's bound on the messages waiting
	// (maxWaitingRuns).
	maxWaiting() int
	// queue puts a delivery in the local router's queue.
	queue(ctx context.Context, in bus.Inbound) error
	// dispatch sends a reply or progress to a device connected here.
	dispatch(ctx context.Context, out bus.Outbound) error
	newRunID() string
	// replaceElsewhere closes the connection here of a peer that
	// connected to another edge.
	replaceElsewhere(channel, peer, edge string)
	// unclaimed records a final reply no edge took (its channel's
	// metric and event).
	unclaimed(out bus.Outbound, detail string)
}

// runtimeHost is the runtime's clusterHost: the one place the cluster
// glue reaches into the runtime.
type runtimeHost struct{ rt *Runtime }

func (h runtimeHost) reserve(ctx context.Context, session string) error {
	return h.rt.admission.reserveWait(ctx, session, math.MaxInt)
}
func (h runtimeHost) release(session string) { h.rt.admission.release(session, 1) }
func (h runtimeHost) maxWaiting() int        { return h.rt.admission.maxTotal }
func (h runtimeHost) queue(ctx context.Context, in bus.Inbound) error {
	return h.rt.bus.PublishInbound(ctx, in)
}
func (h runtimeHost) dispatch(ctx context.Context, out bus.Outbound) error {
	return h.rt.bus.PublishOutbound(ctx, out)
}
func (h runtimeHost) newRunID() string { return h.rt.newRunID() }
func (h runtimeHost) replaceElsewhere(channel, peer, edge string) {
	if ch := h.rt.channels[channel]; ch != nil {
		if a, ok := ch.adapter.(*terminalAdapter); ok {
			a.replaceElsewhere(peer, edge)
		}
	}
}
func (h runtimeHost) unclaimed(out bus.Outbound, detail string) {
	ch := h.rt.channels[out.ChannelID]
	if ch == nil {
		return
	}
	h.rt.metrics.unclaimed.Inc(ch.id)
	ch.events.Add(events.Event{Event: events.OutboundUnclaimed, PeerID: out.PeerID, SessionID: out.SessionKey,
		MessageID: out.MessageID, RunID: out.RunID, Preview: out.Text, Detail: detail})
}

func openClusterNode(rt *Runtime, cfg config.Cluster) (*clusterNode, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := cluster.Open(ctx, cfg, rt.log)
	if err != nil {
		return nil, err
	}
	c := &clusterNode{host: runtimeHost{rt}, log: rt.log, metrics: rt.metrics, node: n, cfg: cfg,
		edge: cluster.NewWaits(), tickets: cluster.NewTickets()}
	// Claims name the worker process: the node name and the process's
	// run prefix, so a worker restarted under the same name tells its
	// predecessor's runs (cut short) from its own.
	c.claims = cluster.NewClaimer(n, c.tickets, n.Name()+"#"+rt.runPrefix, rt.log, func(in bus.Inbound) error {
		if hook := testHookClaimWrite; hook != nil {
			return hook(in)
		}
		return nil
	})
	return c, nil
}

// start subscribes and starts the node's loops: an edge takes replies and
// watches presence, a worker takes partitions and cancels.
func (c *clusterNode) start(r *router, devices func() int) error {
	if c.cfg.Edge() {
		if err := c.node.SubscribeOut(c.reply); err != nil {
			return err
		}
		c.node.WatchPresence(c.presenceMoved)
		c.loop(2*time.Second, c.sweep)
	}
	if c.cfg.Worker() {
		if err := c.node.SubscribeCancel(func(key, id string) { r.cancel(key, id) }); err != nil {
			return err
		}
		// Lost: the queued copies of a partition this worker no longer owns
		// are not run (startRun), and a later delivery queues its own.
		c.node.RunWorker(cluster.WorkerHooks{Deliver: c.deliver, Unfinished: c.tickets.Unfinished, Lost: c.tickets.Lost})
		c.loop(c.cfg.AckWait/3, c.keepInProgress)
	}
	c.node.Heartbeat(devices, c.node.Owned)
	return nil
}

// loop runs fn every d on a goroutine the node stops at close.
func (c *clusterNode) loop(d time.Duration, fn func(ctx context.Context)) {
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

// stopWorker gives the partitions up (after the router has stopped).
func (c *clusterNode) stopWorker() { c.node.StopWorker() }

func (c *clusterNode) close() { c.node.Close() }

// ---- edge ----

// accept is AcceptInbound in the cluster: claim the message id in the
// dedupe bucket (create-only), store the message in the inbound stream,
// then ack. A known id is answered from its claim.
func (c *clusterNode) accept(ctx context.Context, ch *channel, in bus.Inbound, ack func(AcceptResult)) error {
	if err := c.holdBack(in); err != nil {
		return err
	}
	err := c.acceptInOrder(ctx, ch, in, ack)
	// Busy too: nothing was sent to NATS, but a place may free before
	// the next message of the session, which the device has sent
	// already (its window): it must not go first.
	c.edge.Accepted(in, err)
	return err
}

// holdBack refuses a session's messages after one whose accept failed,
// until that one is accepted (cluster.Waits.HoldBack says why). The
// refusal is busy: the device puts the message back in send order,
// after the failed one, and resends both in order.
func (c *clusterNode) holdBack(in bus.Inbound) error {
	if id := c.edge.HoldBack(in); id != "" {
		return fmt.Errorf("%w: message %s of this session is not accepted yet; messages are taken in order: resend %s first", ErrBusy, id, id)
	}
	return nil
}

func (c *clusterNode) acceptInOrder(ctx context.Context, ch *channel, in bus.Inbound, ack func(AcceptResult)) error {
	k := cluster.KeyOf(in)
	prior, _, found, err := c.node.GetClaim(ctx, in.SessionKey, in.MessageID)
	if err != nil {
		return err
	}
	duplicate := func(runID string, detail string, res AcceptResult) {
		c.metrics.duplicates.Inc(ch.id)
		ch.events.Add(events.Event{Event: events.InboundDuplicate, PeerID: in.PeerID, SessionID: in.SessionKey,
			MessageID: in.MessageID, RunID: runID, Preview: in.Text, Detail: detail})
		ack(res)
	}
	switch cluster.DecideAccept(prior, found) {
	case cluster.EdgeCached:
		duplicate(prior.RunID, "done: cached reply sent", AcceptResult{RunID: prior.RunID, Duplicate: true, Reply: replyMessage(prior)})
		return nil
	case cluster.EdgePending: // a worker has started it, or it was cancelled
		c.edge.Wait(in, false) // its reply comes here now
		duplicate(prior.RunID, "pending: run still in progress", AcceptResult{RunID: prior.RunID, Duplicate: true, Pending: true})
		return nil
	}
	// The channel's bounds and the start of the wait (its ack not
	// written yet) in one step: two accepts cannot both take the last
	// place.
	if refused := c.edge.Admit(in, ch.maxWaitingPerSession(), c.host.maxWaiting()); refused != "" {
		c.metrics.busy.Inc(ch.id)
		return fmt.Errorf("%w: %s", ErrBusy, refused)
	}
	stored, err := c.node.PublishInbound(ctx, in)
	if err != nil {
		// Not stored, or not known to be: the device resends it, and the
		// same Nats-Msg-Id keeps a second copy out of the stream.
		c.edge.Done(k)
		return err
	}
	if stored.Duplicate {
		// In the stream already (a resend before a worker started it,
		// or a second edge): the first copy answers it.
		duplicate(in.RunID, "pending: queued, not started yet", AcceptResult{RunID: in.RunID, Duplicate: true, Pending: true})
		c.acked(k)
		return nil
	}
	c.metrics.inbound.Inc(ch.id)
	ch.events.Add(events.Event{Event: events.InboundAccepted, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Preview: in.Text})
	ack(AcceptResult{RunID: in.RunID})
	c.acked(k)
	return nil
}

// acked says the ack is written: a reply that came first goes now.
func (c *clusterNode) acked(k cluster.Key) {
	if parked := c.edge.Acked(k); parked != nil {
		c.reply(*parked)
	}
}

// disconnected forgets what a peer's connection waited on: the device
// resends it wherever it reconnects.
func (c *clusterNode) disconnected(channel, peer string) {
	c.edge.Disconnected(channel, peer)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.node.ClearPresence(ctx, channel, peer)
}

// connected records that this edge holds the peer now.
func (c *clusterNode) connected(channel, peer string) {
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
func (c *clusterNode) presenceMoved(channel, peer, edge string, rev uint64) {
	if edge == c.node.Name() {
		return
	}
	if !c.edge.Newer(channel, peer, rev) {
		return // older than the connection held here (a watch running late)
	}
	c.host.replaceElsewhere(channel, peer, edge)
}

// reply takes a reply or progress update a worker sent here. A final is
// sent only if this edge waits on it: a second copy (a worker re-sent it
// after a partition moved) or one whose device left is dropped, and the
// device gets it from its claim when it resends.
func (c *clusterNode) reply(out bus.Outbound) {
	if out.Kind == bus.Final && !c.edge.Final(out) {
		return // parked until its ack is written, or not waited on here
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.host.dispatch(ctx, out); err != nil && out.Kind == bus.Final {
		c.log.Warn("cluster: reply not dispatched; the device gets it when it resends", "message_id", out.MessageID, "err", err)
	}
}

// sweep looks up the claims of messages waited on for a while: a reply
// lost on its way here (this edge was reconnecting to NATS, or the peer
// moved here just as its reply went to the old edge) is sent from there.
func (c *clusterNode) sweep(ctx context.Context) {
	for _, k := range c.edge.Due(time.Now(), 3*time.Second, 256) {
		cl, _, found, err := c.node.GetClaim(ctx, k.Session, k.MessageID)
		if err != nil || !found || !cl.Answered() {
			continue
		}
		w, ok := c.edge.Waiting(k)
		if !ok {
			continue
		}
		c.swept.Add(1)
		c.reply(bus.Outbound{Kind: bus.Final, ChannelID: w.Channel, PeerID: w.Peer, SessionKey: k.Session,
			MessageID: k.MessageID, RunID: cl.Reply.RunID, Text: cl.Reply.Text, FinishReason: cl.Reply.FinishReason,
			Media: cl.Reply.Media, Started: w.Since})
	}
}

// cancel interrupts a message wherever it is: not started, its claim
// says so (the worker answers it cancelled); running, the workers are
// told. It reports whether the message is queued or running.
func (c *clusterNode) cancel(ctx context.Context, key, messageID string) bool {
	for range 3 {
		cl, rev, found, err := c.node.GetClaim(ctx, key, messageID)
		if err != nil {
			return false
		}
		_, waited := c.edge.Waiting(cluster.Key{Session: key, MessageID: messageID})
		act, cl := cluster.DecideCancel(cl, found, waited, key, messageID)
		switch act {
		case cluster.CancelWrite:
			if _, err := c.node.UpdateClaim(ctx, cl, rev); errors.Is(err, cluster.ErrConflict) {
				continue // started meanwhile: look again
			} else if err != nil {
				return false
			}
			// A worker may hold it queued: tell it too.
			_ = c.node.Cancel(key, messageID)
			return true
		case cluster.CancelTell:
			return c.node.Cancel(key, messageID) == nil
		default: // unknown here, answered or cancelled already
			return false
		}
	}
	return false
}

func replyMessage(cl cluster.Claim) *link.Message {
	return &link.Message{Role: link.RoleAssistant, MessageID: cl.MessageID, RunID: cl.Reply.RunID,
		Text: cl.Reply.Text, FinishReason: cl.Reply.FinishReason}
}

// ---- worker ----

// deliver takes a message of an owned partition to the router. What its
// claim says (new, answered, cancelled, cut short on a worker that died)
// is decided when its run starts (startRun).
func (c *clusterNode) deliver(ctx context.Context, d *cluster.Delivery) {
	in := d.In
	k := cluster.KeyOf(in)
	if c.attach(k, d) {
		return
	}
	if in.RunID == "" {
		in.RunID = c.host.newRunID()
	}
	if err := c.host.reserve(ctx, in.SessionKey); err != nil {
		return // stopping: unacked, the next owner runs it
	}
	t, in := c.tickets.Add(d, in)
	if t == nil {
		c.host.release(in.SessionKey)
		c.attach(k, d)
		return
	}
	if err := c.host.queue(ctx, in); err != nil {
		c.host.release(in.SessionKey)
		c.tickets.Forget(k, t)
	}
}

// attach gives a ticket held for k the delivery d: JetStream sent the
// message again while this worker holds it (an in-progress ack was
// lost, or this worker took its partition again and the consumer was
// made again). The copy already queued or running answers it.
func (c *clusterNode) attach(k cluster.Key, d *cluster.Delivery) bool {
	if !c.tickets.Attach(k, d) {
		return false
	}
	_ = d.InProgress()
	return true
}

// ticket is the ticket of the router's copy in: nil for a copy left
// queued from an earlier delivery (its ticket was dropped when the
// partition moved, and a later delivery has its own ticket and copy).
func (c *clusterNode) ticket(in bus.Inbound) *cluster.Ticket {
	return c.tickets.Of(cluster.KeyOf(in), in.Delivery)
}

// interruptedTwiceCluster answers a message whose run two workers' deaths
// cut short.
const interruptedTwiceCluster = "interrupted twice by a worker failure; not run again - send it again"

// startRun decides, by the message's claim, what its turn is, and marks
// the claim running (compare-and-set: one worker starts a message). New:
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
func (c *clusterNode) startRun(ctx context.Context, in bus.Inbound) (answer *agent.Result, ok bool) {
	t := c.ticket(in)
	if t == nil || !c.tickets.SetState(cluster.KeyOf(in), t, cluster.TicketStarting) {
		return nil, false // a copy from before the partition moved
	}
	step, ok := c.claims.Start(ctx, t, in)
	if !ok {
		return nil, false
	}
	switch step.Action {
	case cluster.StartCached:
		r := t.Claim.Reply
		return &agent.Result{Text: r.Text, FinishReason: r.FinishReason, Media: r.Media}, true
	case cluster.StartCancelled:
		t.Recs = []session.Record{userRecord(in)}
		res := cancelledBeforeStart
		return &res, true
	}
	return c.started(t, in, step), true
}

// testHookClaimWrite, set by tests before the node starts, runs before
// each claim write of startRun; an error stands for a write that failed
// (a NATS leader election).
var testHookClaimWrite func(in bus.Inbound) error

// started records the turn's first records (step: which run); the
// answer is non-nil for a message cut short too often.
func (c *clusterNode) started(t *cluster.Ticket, in bus.Inbound, step cluster.StartStep) *agent.Result {
	t.Recs = []session.Record{userRecord(in)}
	if step.Attempt > 1 {
		t.Recs = append(t.Recs, session.Record{Role: "system", MessageID: in.MessageID, RunID: in.RunID,
			Content: fmt.Sprintf("the run of message %s was cut short; run %d of at most %d", in.MessageID, step.Attempt, cluster.MaxRunAttempts),
			Extra:   map[string]any{"event": interruptedEvent, "attempt": step.Attempt}})
	}
	if step.Interrupted() {
		return &agent.Result{Text: interruptedTwiceCluster, FinishReason: link.FinishError}
	}
	return nil
}

func userRecord(in bus.Inbound) session.Record {
	return session.Record{Role: "user", Content: in.Text, MessageID: in.MessageID, RunID: in.RunID,
		Timestamp: in.Received.Format(session.TimeLayout)}
}

// finish records a reply: the turn's records in the history and the claim
// set to done with the cached reply, both stored before it is sent. ok
// false: another worker took the message over meanwhile and answers it.
func (c *clusterNode) finish(ctx context.Context, in bus.Inbound, reply *link.Message, media []string) bool {
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
	return c.claims.Finish(ctx, t, in, recs, cluster.Reply{Text: reply.Text, FinishReason: reply.FinishReason, RunID: in.RunID, Media: media})
}

// send dispatches a final reply to the edge of its peer and acks the
// message: it is answered.
func (c *clusterNode) sendFinal(ctx context.Context, in bus.Inbound, out bus.Outbound) {
	c.send(ctx, in, out)
	if t := c.ticket(in); t != nil {
		_ = c.tickets.Delivery(t).Ack()
		c.tickets.Forget(cluster.KeyOf(in), t)
	}
}

func (c *clusterNode) send(ctx context.Context, in bus.Inbound, out bus.Outbound) {
	edge, err := c.node.SendOut(ctx, out)
	if out.Kind != bus.Final {
		return
	}
	if err != nil || edge == "" {
		detail := "no edge holds the peer; the device gets the reply when it resends the message"
		if err != nil {
			detail = err.Error() + "; the device gets the reply when it resends the message"
		}
		c.host.unclaimed(out, detail)
	}
}

// keepInProgress tells JetStream that every message held is still being
// worked on, so none is redelivered while its run goes on.
func (c *clusterNode) keepInProgress(context.Context) {
	for _, d := range c.tickets.Deliveries() {
		_ = d.InProgress()
	}
}

// clusterStatus is /api/status's "cluster" object.
type clusterStatus struct {
	Name       string             `json:"name"`
	Role       string             `json:"role"`
	Partitions int                `json:"partitions"`
	Nodes      []cluster.NodeInfo `json:"nodes"`
	Problem    string             `json:"problem,omitempty"`
}

func (c *clusterNode) status(ctx context.Context) clusterStatus {
	st := clusterStatus{Name: c.cfg.Name, Role: c.cfg.Role, Partitions: c.cfg.Partitions, Nodes: []cluster.NodeInfo{}}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	nodes, err := c.node.Nodes(ctx)
	if err != nil {
		st.Problem = err.Error()
	}
	if nodes != nil {
		st.Nodes = nodes
	}
	return st
}
