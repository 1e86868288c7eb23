// Package record is the contract of termserver's store of record: what
// the runtime asks of the place a message lives from the moment it is
// accepted until its reply is sent (DESIGN.md, "the path of one
// message"). The server picks the implementation where it is built:
//
//   - server/record/local: the workspace (write-ahead log + session
//     files, the dedupe table rebuilt from them at start-up); one node.
//   - server/cluster (cluster.Store): JetStream (the inbound stream, the
//     claims bucket, the history stream); edges and workers.
//
// Store is the message path, which every store implements for real: it
// takes a message (dedupe + durable record, then the ack, then the run
// queue), decides and records the start of its run (the claim), records
// the reply before it is sent, and delivers replies and progress to
// wherever the device is connected. What only some stores have is a
// small interface of its own, implemented only by a store that really
// does it, and gathered with the Store in Parts (nil: the store has
// none): Joiner, InFlight and Recoverer (the local store: its router's
// messages are its own), Edge, Lifecycle and StatusReporter (the
// cluster's: presence, its loops, its nodes). Events and metrics are the
// runtime's: a Store reports what happened through Accepted and errors.
// The contract suite, package recordtest, runs against both stores.
package record

import (
	"context"
	"errors"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/metrics"
)

// Store is the store of record's message path.
type Store interface {
	// Accept takes in (its RunID and Received set): a message id seen
	// before calls ack with the duplicate's state and queues nothing; a
	// new one is made durable, then ack is called, then it is queued to
	// run. perSession is the channel's bound on a session's waiting
	// messages, checked after the dedupe: a duplicate is answered past
	// it, and TakeNone takes no new message at all. An error means in
	// was not taken and ack was not called (the device resends it); a
	// bound's refusal wraps ErrBusy. The order of a session's messages
	// across refusals is the runtime's (package record/holdback), the
	// same for every store.
	Accept(ctx context.Context, in bus.Inbound, perSession int, ack func(Accepted)) error
	// Start is called before in's run starts and records its start (the
	// claim). ok false: not to be run now (nothing recorded; it comes
	// again). answer non-nil: answer with it instead of running. ctx is
	// the run's (a cancel ends it), stopCtx the router's (a hard stop).
	Start(ctx, stopCtx context.Context, in bus.Inbound) (answer *agent.Result, ok bool)
	// Finish records in's reply before it is sent (and, with next, may
	// record the start of the session's next message, taken to run
	// right after it). false: not recorded, so not to be sent. A
	// duplicate of in accepted afterwards is answered with this reply.
	Finish(ctx context.Context, in bus.Inbound, reply *link.Message, media []string, next *bus.Inbound) bool
	// Deliver sends a reply (recorded by Finish), a progress update or a
	// delta (bus.Delta: the text streamed so far) to the device's
	// connection, wherever it is. Progress and deltas are best effort:
	// never recorded, never kept for a device that is not connected.
	Deliver(ctx context.Context, in bus.Inbound, out bus.Outbound)
	// Cancel interrupts a message queued or running, wherever it is, and
	// reports whether it found it. One not started yet is answered
	// record.CancelledBeforeStart (by the router, or by Start).
	Cancel(ctx context.Context, sessionKey, messageID string) bool
	// Health reports whether the store takes writes, and why not.
	Health() (ok bool, reason string)
	// Metrics registers the store's series.
	Metrics(reg *metrics.Registry)
	// Close closes the store; what it took and did not answer is
	// answered after it is opened again (Recoverer) or by another node.
	Close() error
}

// Joiner is a store that records the start of a message a running turn
// took (agent.Injector) apart from its reply. A store without one
// records such a message with the turn's reply.
type Joiner interface {
	// Joined records the start of a message a running turn took; best
	// effort.
	Joined(ctx context.Context, in bus.Inbound)
}

// InFlight is a store whose accepted messages go to this node's router
// and can be on their way there when a cancel comes.
type InFlight interface {
	// Pending reports whether a message is accepted here and not
	// answered yet (a cancel for one still on its way to the router is
	// answered when it arrives).
	Pending(sessionKey, messageID string) bool
}

// Recoverer is a store whose unanswered messages wait for this node to
// start again (a store without one has them taken by another node).
type Recoverer interface {
	// Recover returns the messages accepted before a restart and never
	// answered, to be queued again (Recovered), oldest first per
	// session. A message whose run was cut short once runs again
	// (its start recorded EventInterrupted); one cut short twice is
	// answered with an error instead.
	Recover(ctx context.Context) ([]bus.Inbound, error)
}

// Edge is a store that keeps where each device is connected (a
// cluster's edge: replies find the node that holds the peer), and may
// refuse devices.
type Edge interface {
	// Connected and Disconnected say a device's connection here came and
	// went.
	Connected(channelID, peerID string)
	Disconnected(channelID, peerID string)
	// Refuses says why this node takes no device connections ("": it
	// takes them).
	Refuses() string
}

// Lifecycle is a store with loops of its own beside the message path.
type Lifecycle interface {
	// Run starts the store's own loops (cancel interrupts a message of
	// the local router; devices counts the devices connected here).
	Run(cancel func(sessionKey, messageID string) bool, devices func() int) error
	// Advertise says the address devices reach this server at.
	Advertise(url string)
	// StopRuns is called once the router has stopped (no run is left),
	// before Close.
	StopRuns()
}

// StatusReporter is a store with a part of its own in /api/status.
type StatusReporter interface {
	Status(ctx context.Context) any
}

// Parts is a store of record as the server composes it: the message
// path, and each other part the store has (nil: it has none).
type Parts struct {
	Store
	Joiner    Joiner
	InFlight  InFlight
	Recoverer Recoverer
	Edge      Edge
	Lifecycle Lifecycle
	Status    StatusReporter
}

// Accepted tells the adapter how to acknowledge a message.
type Accepted struct {
	RunID     string
	Duplicate bool
	Pending   bool          // duplicate whose run is still going
	Reply     *link.Message // duplicate whose run is done
	// Detail is the inbound_duplicate event's detail.
	Detail string
}

// Queue is what a Store needs of the local router: a bounded queue of
// messages to run, one FIFO per session.
type Queue interface {
	// ReserveFirst takes a waiting place for a session (bounded by
	// perSession and the server's bound: an error wraps ErrBusy) and
	// reports whether the session had nothing waiting or running.
	ReserveFirst(session string, perSession int) (first bool, err error)
	// ReserveWait takes a place, waiting while the server is full.
	ReserveWait(ctx context.Context, session string, perSession int) error
	Release(session string)
	// MaxWaiting is the server's bound on the messages waiting.
	MaxWaiting() int
	// StartsAtOnce reports whether a message of an idle session would
	// start without waiting (its start is then recorded with it).
	StartsAtOnce(session string) bool
	// Put queues a message (a place reserved).
	Put(ctx context.Context, in bus.Inbound) error
	// Dispatch hands a reply or progress to a device connected here.
	Dispatch(ctx context.Context, out bus.Outbound) error
	// Cancel interrupts a message of the local router.
	Cancel(sessionKey, messageID string) bool
	NewRunID() string
}

// ErrBusy is wrapped by Accept's error when a bound of the delivery
// contract refused the message (session queue full, server-wide waiting
// runs, an earlier message of the session not taken yet: the last is the
// runtime's, package record/holdback): it was not accepted and not
// acked; the adapter answers with an error frame of code link.CodeBusy
// and the device resends it after a backoff.
var ErrBusy = errors.New("busy")

// TakeNone is the bound on a session's waiting messages under which
// Accept takes no new message (its refusal wraps ErrBusy) and still
// answers a duplicate, as past any bound: what the runtime gives for a
// session whose earlier message is not taken yet (package
// record/holdback).
const TakeNone = 0

// The session-history records that mark a run's start.
const (
	// EventStarted marks the record written (durably) before a
	// message's first run starts (a "system" record: not a reply, so
	// dedupe and nanobot readers do not take it for an answer). Found at
	// a later start with the message unanswered, it means that run was
	// cut short; a message without it only waited.
	EventStarted = "run_started"
	// EventInterrupted marks the record written when the run of a
	// message whose earlier run was cut short starts again.
	EventInterrupted = "run_interrupted"
)

// CancelledBeforeStart answers a message cancelled before its run began.
var CancelledBeforeStart = agent.Result{Text: "cancelled before it started", FinishReason: link.FinishCancelled}
