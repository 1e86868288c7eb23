package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/identity"
	"termlink/server/metrics"
	"termlink/server/notices"
	"termlink/server/record"
	"termlink/server/record/holdback"
	"termlink/server/router"
	"termlink/server/session"
	"termlink/server/throttle"
	"termlink/server/wschannel"
)

// channel is the runtime's view of one configured channel.
type channel struct {
	id      string
	cfg     config.Channel
	events  *events.Log
	adapter wschannel.Adapter // nil when disabled
	creds   identity.Bindings // device tokens learnt (package identity)
}

// serverMetrics are the series /metrics serves.
type serverMetrics struct {
	reg        metrics.Registry
	ws         wschannel.Metrics // the channel adapters' series, shared by every channel's
	inbound    *metrics.CounterVec
	duplicates *metrics.CounterVec
	delivered  *metrics.CounterVec
	unclaimed  *metrics.CounterVec
	runs       *metrics.CounterVec
	runSeconds *metrics.HistogramVec
	replySecs  *metrics.HistogramVec
	running    *metrics.GaugeVec

	logFailures *metrics.CounterVec
}

// newServerMetrics registers the series; their order is /metrics' order
// (the adapters' series among the runtime's).
func newServerMetrics() *serverMetrics {
	m := &serverMetrics{}
	r := &m.reg
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	m.ws.Connections = r.NewGaugeVec("termlink_connections", "Live terminal WebSocket connections that completed connect.", "channel")
	m.ws.Connects = r.NewCounterVec("termlink_connects_total", "connect frames answered with connected.", "channel")
	m.inbound = r.NewCounterVec("termlink_inbound_total", "Messages accepted and published to the bus.", "channel")
	m.duplicates = r.NewCounterVec("termlink_inbound_duplicates_total", "Messages answered from the dedupe table instead of run again.", "channel")
	m.ws.Rejected = r.NewCounterVec("termlink_frames_rejected_total", "Frames answered with an error frame.", "channel")
	m.delivered = r.NewCounterVec("termlink_outbound_delivered_total", "Final replies handed to a live connection.", "channel")
	m.unclaimed = r.NewCounterVec("termlink_outbound_unclaimed_total", "Final replies with no live connection to take them.", "channel")
	m.ws.Dropped = r.NewCounterVec("termlink_slow_clients_dropped_total", "Connections dropped because a write made no progress within the write timeout.", "channel")
	m.runs = r.NewCounterVec("termlink_runs_total", "Agent runs finished, by finish reason.", "finish_reason")
	m.runSeconds = r.NewHistogramVec("termlink_run_seconds", "Agent run time.", "channel", latency)
	m.replySecs = r.NewHistogramVec("termlink_reply_seconds", "Time from accepting a message to dispatching its reply.", "channel", latency)
	m.running = r.NewGaugeVec("termlink_runs_running", "Agent runs in progress.", "")
	m.ws.Busy = r.NewCounterVec("termlink_inbound_busy_total", "Messages refused as busy: their session or the server had the most messages waiting (a message held for room counts only if its hold runs out).", "channel")
	m.ws.Held = r.NewCounterVec("termlink_reader_held_total", "Messages a full waiting bound refused that their connection held, not reading the device, until a place freed (backpressure instead of a busy answer).", "channel")
	m.logFailures = r.NewCounterVec("termlink_session_log_failures_total", "Session log writes that failed (disk full, I/O error).", "")
	m.ws.WebSockets = r.NewGaugeVec("termlink_websockets_open", "Open WebSocket connections, before and after connect.", "")
	m.ws.OverCap = r.NewCounterVec("termlink_websockets_refused_total", "WebSocket upgrades refused with HTTP 503 at the connection cap.", "")
	m.ws.Paused = r.NewCounterVec("termlink_reader_paused_total", "Times a connection's reader stopped reading because its send queue was full (backpressure).", "channel")
	m.ws.Deferred = r.NewCounterVec("termlink_replies_deferred_total", "Replies a connection's full reply queue could not take; the device was told to resend the message.", "channel")
	m.ws.Deltas = r.NewCounterVec("termlink_deltas_sent_total", "Delta frames (streamed reply text) written to devices that listed stream.", "channel")
	return m
}

// Runtime is the channel runtime: it accepts inbound messages through the
// store of record (session id, dedupe, durable record, events), records
// finished runs there, and dispatches outbound messages to the adapters.
type Runtime struct {
	log      *slog.Logger
	sessions *session.Store // the workspace's session files: metadata, conversations
	backend  backend        // local or cluster, chosen once; opens every store (backend.go)
	records  record.Parts   // the store of record and its parts (opened with the backend)
	// heldBack keeps a session's later messages from overtaking one whose
	// accept failed, for every store (package record/holdback; a device's
	// disconnect clears its entries: devicePresence).
	heldBack *holdback.Book
	channels channels
	order    []string // channel ids, sorted
	metrics  *serverMetrics
	notices  notices.Mailboxes // the notice mailboxes (package notices; notices.go wires them)
	fleet    *fleet            // device registry and the fleet API (fleet.go, package fleet)
	fleetOps *fleetOps         // fleet operations' side of the device connections (fleetops.go)
	// outside admits every log line and event a device, a stranger or a
	// bad request can trigger (package throttle: per source and kind, a
	// burst then a summary; fields cut to their bound). Every part that
	// logs or records what came from outside takes it.
	outside *throttle.Gate

	runPrefix string
	runSeq    atomic.Uint64

	// eventFeed publishes the channels' events in cluster mode (events.go).
	eventFeed eventFeed

	// admission counts the messages accepted and not yet started (queued,
	// on the bus, offered to a running turn), per session and in all.
	admission *router.Admission
	// router runs what is queued (it tells the store whether a message of
	// an idle session would start without waiting).
	router *router.Router
}

// SessionKey builds the spec's session id.
func SessionKey(channelID, accountID, peerID, threadID string) string {
	key := channelID + ":" + accountID + ":" + peerID
	if threadID != "" {
		key += ":" + threadID
	}
	return key
}

func newRunPrefix() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return hex.EncodeToString(b[:])
}

func (rt *Runtime) newRunID() string {
	return "run-" + rt.runPrefix + "-" + strconv.FormatUint(rt.runSeq.Add(1), 10)
}

// AcceptResult tells the adapter how to acknowledge a message.
type AcceptResult = record.Accepted

// ErrBusy is wrapped by AcceptInbound's error when a bound of the delivery
// contract refused the message (record.ErrBusy).
var ErrBusy = record.ErrBusy

// AcceptInbound takes a message from a device through the store of
// record: a new message id is recorded (durably) and then ack is called,
// before the message is queued to run, so the ack always precedes the
// reply on the wire. A known id calls ack with the duplicate status and
// queues nothing (also when the server is busy). An error means the
// message was not taken and ack was not called; the device may resend.
// When the session already has its channel's maxWaitingPerSession
// messages waiting, or the server its maxWaitingRuns, the error wraps
// [ErrBusy]; nothing is written then. That refusal is a
// *router.BusyError: the caller may wait for room (WaitRoom) and offer
// the message again, as the terminal adapter does (it holds the message
// and stops reading the device) before it answers busy; the adapter
// counts the busy answers (termlink_inbound_busy_total). Once a
// message's accept failed, the session's later messages are refused
// busy too, naming it, until it is accepted or its device disconnects
// (package record/holdback): a device's messages are taken in the order
// it sent them, whatever the store.
func (rt *Runtime) AcceptInbound(ctx context.Context, in bus.Inbound, ack func(AcceptResult)) error {
	ch := rt.channels[in.ChannelID]
	if ch == nil {
		return fmt.Errorf("unknown channel %q", in.ChannelID)
	}
	in.RunID = rt.newRunID()
	if in.Received.IsZero() {
		in.Received = time.Now()
	}
	// The ack's events name the message: the closure takes copies of
	// those fields, not in (which would then live on the heap).
	peer, key, id, runID, text := in.PeerID, in.SessionKey, in.MessageID, in.RunID, in.Text
	err := rt.heldBack.Accept(ctx, rt.records.Store, in, ch.maxWaitingPerSession(), func(res record.Accepted) {
		if res.Duplicate {
			rt.metrics.duplicates.Inc(ch.id)
			ch.events.Add(events.Event{Event: events.InboundDuplicate, PeerID: peer, SessionID: key,
				MessageID: id, RunID: res.RunID, Preview: text, Detail: res.Detail})
		} else {
			rt.metrics.inbound.Inc(ch.id)
			ch.events.Add(events.Event{Event: events.InboundAccepted, PeerID: peer, SessionID: key,
				MessageID: id, RunID: runID, Preview: text})
		}
		ack(res)
	})
	return err
}

// devicePresence is told that a device connection came and went
// (wschannel.Presence): a device gone no longer holds back its sessions'
// later messages (it resends what is unanswered, in order, wherever it
// connects again), and a store that keeps where devices are
// (record.Edge) is told too.
type devicePresence struct{ rt *Runtime }

func (p devicePresence) Connected(channelID, peerID string) {
	p.rt.heldBack.Connected(channelID, peerID)
	if e := p.rt.records.Edge; e != nil {
		e.Connected(channelID, peerID)
	}
}

func (p devicePresence) Disconnected(channelID, peerID string) {
	p.rt.heldBack.Disconnected(channelID, peerID)
	if e := p.rt.records.Edge; e != nil {
		e.Disconnected(channelID, peerID)
	}
}

// maxWaitingPerSession is the channel's bound on messages waiting in one
// session.
func (ch *channel) maxWaitingPerSession() int {
	if n := ch.cfg.Config.MaxWaitingPerSession; n > 0 {
		return n
	}
	return config.DefaultMaxWaitingPerSession
}

// health reports whether the store of record takes writes, and why not.
func (rt *Runtime) health() (ok bool, reason string) { return rt.records.Health() }

// Started records direct_run_started (router.Host).
func (rt *Runtime) Started(in bus.Inbound) {
	rt.metrics.running.Add("", 1)
	rt.channels.event(in.ChannelID, events.Event{Event: events.DirectRunStarted, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID})
}

// Finished records the reply in the store of record and sends it
// (router.Host). A reply the store refuses is retried until it is written
// or ctx ends; one never written is not sent (a restart runs the message
// again, once), so no device sees a reply the server does not remember.
// With next (the session's next message, taken to start right after this
// reply) the store may record next's start with the reply.
func (rt *Runtime) Finished(ctx context.Context, in bus.Inbound, res agent.Result, took time.Duration, next *bus.Inbound) {
	rt.metrics.running.Add("", -1)
	if res.FinishReason == "" {
		res.FinishReason = link.FinishStop
	}
	reply := &link.Message{Role: link.RoleAssistant, MessageID: in.MessageID, RunID: in.RunID,
		Text: res.Text, FinishReason: res.FinishReason}
	if !rt.records.Finish(ctx, in, reply, res.Media, next) {
		return
	}
	rt.metrics.runs.Inc(res.FinishReason)
	rt.metrics.runSeconds.Observe(in.ChannelID, took.Seconds())
	rt.channels.event(in.ChannelID, events.Event{Event: events.DirectRunFinished, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Preview: res.Text,
		Detail: "finish_reason=" + res.FinishReason + " took=" + took.Round(time.Microsecond).String()})
	rt.records.Deliver(ctx, in, bus.Outbound{Kind: bus.Final, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: res.Text, FinishReason: res.FinishReason,
		Media: res.Media, Started: in.Received})
}

// Start is what happens before a message's run starts (router.Host): the
// store of record decides and records it (record.Store.Start).
func (rt *Runtime) Start(ctx, stopCtx context.Context, in bus.Inbound) (answer *agent.Result, ok bool) {
	return rt.records.Start(ctx, stopCtx, in)
}

// Joined records the start of a message a running turn took
// (router.Host; record.Joiner: a store without one records it with the
// turn's reply).
func (rt *Runtime) Joined(ctx context.Context, in bus.Inbound) {
	if j := rt.records.Joiner; j != nil {
		j.Joined(ctx, in)
	}
}

// Event records an event a runner reports (tool results and the like).
func (rt *Runtime) Event(in bus.Inbound, name, detail string) {
	rt.channels.event(in.ChannelID, events.Event{Event: name, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Preview: detail})
}

// Progress sends an interim update for a run (router.Host).
func (rt *Runtime) Progress(ctx context.Context, in bus.Inbound, text string) {
	out := bus.Outbound{Kind: bus.Progress, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: text}
	rt.records.Deliver(ctx, in, out) // progress is best effort
}

// Delta sends the reply text a run has streamed so far (router.Host):
// all of it, for the adapter to send a connection only what it lacks.
// Like progress it is best effort and never recorded.
func (rt *Runtime) Delta(ctx context.Context, in bus.Inbound, text string) {
	out := bus.Outbound{Kind: bus.Delta, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: text}
	rt.records.Deliver(ctx, in, out)
}

// dispatchOne hands a reply or progress to its channel's adapter (Send
// never blocks) and records a reply delivered or unclaimed.
func (rt *Runtime) dispatchOne(out bus.Outbound) {
	ch := rt.channels[out.ChannelID]
	if ch == nil || ch.adapter == nil {
		rt.log.Warn("outbound for unknown or disabled channel", "channel", out.ChannelID, "message_id", out.MessageID)
		return
	}
	delivered := ch.adapter.Send(out)
	if out.Kind != bus.Final {
		return
	}
	ev := events.Event{PeerID: out.PeerID, SessionID: out.SessionKey, MessageID: out.MessageID, RunID: out.RunID, Preview: out.Text}
	if delivered {
		ev.Event = events.OutboundDelivered
		rt.metrics.delivered.Inc(ch.id)
		if !out.Started.IsZero() {
			rt.metrics.replySecs.Observe(ch.id, time.Since(out.Started).Seconds())
		}
	} else {
		ev.Event = events.OutboundUnclaimed
		ev.Detail = "no live connection for the peer; the device gets the reply when it resends the message"
		rt.metrics.unclaimed.Inc(ch.id)
	}
	ch.events.Add(ev)
}

// Dropped says n started runs ended without a result (router.Host).
func (rt *Runtime) Dropped(n int) { rt.metrics.running.Add("", -int64(n)) }

// UpdateMeta changes a session's metadata (router.Host).
func (rt *Runtime) UpdateMeta(ctx context.Context, key string, update func(map[string]any)) error {
	return rt.sessions.UpdateMetadata(ctx, key, update)
}

// Pending reports whether a message is accepted and not answered
// (router.Host): on its way to the router (record.InFlight; a store
// without one never hands the router a message from an accept).
func (rt *Runtime) Pending(key, messageID string) bool {
	return rt.records.InFlight != nil && rt.records.InFlight.Pending(key, messageID)
}

var _ router.Host = (*Runtime)(nil)

var errShuttingDown = errors.New("server is shutting down")

// channels are the configured channels by id, and what the capabilities
// ask of them: whether one exists, its live adapter (enabled), adding to
// its event log. "Does the channel exist" means one thing everywhere.
type channels map[string]*channel

// exists reports whether id is configured (enabled or not).
func (cs channels) exists(id string) bool { return cs[id] != nil }

// adapter is id's adapter: nil when id is not configured or disabled.
func (cs channels) adapter(id string) wschannel.Adapter {
	if ch := cs[id]; ch != nil && ch.adapter != nil {
		return ch.adapter
	}
	return nil
}

// event adds e to id's event log (none when id is not configured).
func (cs channels) event(id string, e events.Event) {
	if ch := cs[id]; ch != nil {
		ch.events.Add(e)
	}
}
