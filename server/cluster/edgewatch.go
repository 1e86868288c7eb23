package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// CloseTryElsewhere is the WebSocket close code an edge cut off from
// NATS closes its device connections with: RFC 6455's 1013 "Try Again
// Later". A device with more URLs (link.ClientConfig.Fallbacks) dials
// the next one; this edge answers new connections HTTP 503 meanwhile.
const CloseTryElsewhere = 1013

// DeviceCloser is what the edge watchdog needs of the server (the Host
// implements it): close every device connection of this node with a
// close code and reason.
type DeviceCloser interface {
	CloseDevices(code int, reason string)
}

// EdgeWatch is a node's watchdog on its link to NATS. It asks the NATS
// server for a round trip every lease/5; when none has answered for
// longer than one lease (the cluster has given this node up: its lease
// in termlink_nodes expired), the node says so (Refuses, Health) until
// one answers again, and an edge closes its device connections with
// CloseTryElsewhere so that they move to another edge instead of waiting
// on one that acks nothing. While cut off it closes again every lease/5
// what connected meanwhile (a connection upgraded just before).
//
// A node unanswered for half a lease moves its connection to another
// NATS server (reconnect), again a lease later, then two leases, two
// leases apart while none answers.
//
// Only NATS itself not answering counts: a JetStream leader election
// (the NATS server answers, a stream does not for a few seconds) is the
// same on every edge and is waited out, not fled.
type EdgeWatch struct {
	what  string // "edge edge-1": how the reason names this node
	edge  bool   // close device connections while cut off
	lease time.Duration
	probe func(ctx context.Context) error // one round trip to NATS
	drop  func(code int, reason string)   // nil: nothing to close
	// reconnect moves the connection to another NATS server (nil:
	// none). A server cut off by the network drops packets silently:
	// the connection does not break, and the client's own pings take
	// minutes to give it up.
	reconnect func() error
	log       *slog.Logger

	mu     sync.Mutex
	seen   time.Time // the last round trip that was answered
	since  time.Time // cut off since (zero: not cut off)
	kicked time.Time // the last reconnect asked for while unanswered
	// kickWait is how long after that reconnect the next one is asked
	// for while none answers: half a lease, doubled at each reconnect up
	// to two leases, back to half a lease at the next answer. A NATS
	// server cut off answers at once on another; a machine so busy that
	// every server answers late (make test at load 40: a round trip past
	// half a lease) is not made busier by a reconnect every half lease,
	// each dropping the requests in flight, so that nothing was ever
	// answered again.
	kickWait time.Duration
}

// NewEdgeWatch returns the watchdog of node n; drop (may be nil) closes
// the node's device connections.
func NewEdgeWatch(n *Node, drop func(code int, reason string), log *slog.Logger) *EdgeWatch {
	cfg := n.Config()
	role := "node"
	switch {
	case cfg.Edge():
		role = "edge"
	case cfg.Worker():
		role = "worker"
	}
	if log == nil {
		log = slog.Default()
	}
	return &EdgeWatch{what: role + " " + cfg.Name, edge: cfg.Edge(), lease: cfg.Lease, drop: drop, log: log,
		probe:     func(ctx context.Context) error { return n.Conn().FlushWithContext(ctx) },
		reconnect: func() error { return n.Conn().ForceReconnect() }, seen: time.Now()}
}

// check asks NATS for one round trip and takes the answer; the store's
// loop runs it every lease/5 (watchNATS). A round trip may take up to
// half a lease: a NATS server slow under load (a busy machine, a
// JetStream election) answers late but answers, and is not fled.
func (w *EdgeWatch) check(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, w.lease/2)
	err := w.probe(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	w.observe(time.Now(), err)
}

// observe takes one probe's result at now.
func (w *EdgeWatch) observe(now time.Time, err error) {
	w.mu.Lock()
	if err == nil {
		was := w.since
		w.seen, w.since, w.kickWait = now, time.Time{}, 0
		w.mu.Unlock()
		if !was.IsZero() {
			w.log.Info("cluster: NATS answers again; taking devices", "node", w.what, "cut_off_for", now.Sub(was).Round(time.Millisecond))
		}
		return
	}
	// Unanswered for half a lease: the NATS server this node talks to
	// may be the one cut off, and another may answer. Asked again while
	// none does, less and less often (kickWait).
	wait := w.kickWait
	if wait == 0 {
		wait = w.lease / 2
	}
	kick := w.reconnect != nil && now.Sub(w.seen) > w.lease/2 && now.Sub(w.kicked) > wait
	if kick {
		w.kicked, w.kickWait = now, min(2*wait, 2*w.lease)
	}
	if now.Sub(w.seen) <= w.lease {
		w.mu.Unlock()
		w.kick(kick, err)
		return
	}
	first := w.since.IsZero()
	if first {
		w.since = w.seen
	}
	reason := w.reasonLocked()
	w.mu.Unlock()
	w.kick(kick, err)
	if first {
		w.log.Warn("cluster: NATS has not answered for longer than a lease; closing device connections and refusing new ones until it answers",
			"node", w.what, "lease", w.lease, "err", err)
	}
	if w.edge && w.drop != nil {
		w.drop(CloseTryElsewhere, reason)
	}
}

// kick moves the connection to another NATS server, if asked to.
func (w *EdgeWatch) kick(kick bool, err error) {
	if !kick {
		return
	}
	w.log.Warn("cluster: the NATS server has not answered for half a lease; reconnecting to another", "node", w.what, "err", err)
	_ = w.reconnect()
}

// Lost says why this node is cut off from NATS, "" while it is not.
func (w *EdgeWatch) Lost() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since.IsZero() {
		return ""
	}
	return w.reasonLocked()
}

func (w *EdgeWatch) reasonLocked() string {
	r := fmt.Sprintf("%s has lost the NATS cluster since %s", w.what, w.since.UTC().Format(time.RFC3339))
	if w.edge {
		r += "; connect to another edge"
	}
	return r
}

// watchNATS starts the node's EdgeWatch on a loop the node owns (Run
// calls it); the Host closes the devices if it can (DeviceCloser).
func (c *Store) watchNATS() *EdgeWatch {
	var drop func(int, string)
	if dc, ok := c.host.(DeviceCloser); ok {
		drop = dc.CloseDevices
	}
	w := NewEdgeWatch(c.node, drop, c.log)
	c.loop(c.cfg.Lease/5, w.check)
	return w
}
