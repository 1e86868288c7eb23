package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/metrics"
	"termlink/server/notices"
	"termlink/server/session"
	"termlink/server/wal"
)

// Adapter is a channel transport the runtime dispatches replies to.
type Adapter interface {
	// Send hands out to the device's live connection without blocking and
	// reports whether one took it; false means unclaimed.
	Send(out bus.Outbound) bool
	// ConnectedPeers is the number of live, connected peers.
	ConnectedPeers() int
	// Close drops every connection and refuses new ones.
	Close()
}

// channel is the runtime's view of one configured channel.
type channel struct {
	id      string
	cfg     config.Channel
	events  *events.Log
	adapter Adapter    // nil when disabled
	creds   *credStore // device tokens learnt (credentials.go)
	// pushNotices is the adapter's push of a peer's due notices
	// (notices_conn.go); nil when disabled.
	pushNotices func(peerID string) bool
}

// serverMetrics are the series /metrics serves.
type serverMetrics struct {
	reg         metrics.Registry
	connections *metrics.GaugeVec
	connects    *metrics.CounterVec
	inbound     *metrics.CounterVec
	duplicates  *metrics.CounterVec
	rejected    *metrics.CounterVec
	delivered   *metrics.CounterVec
	unclaimed   *metrics.CounterVec
	dropped     *metrics.CounterVec
	runs        *metrics.CounterVec
	runSeconds  *metrics.HistogramVec
	replySecs   *metrics.HistogramVec
	running     *metrics.GaugeVec

	busy        *metrics.CounterVec
	logFailures *metrics.CounterVec
	websockets  *metrics.GaugeVec   // open WebSockets, connected or not (the connection cap counts these)
	overCap     *metrics.CounterVec // upgrades refused with 503 at the connection cap
	paused      *metrics.CounterVec // times a reader stopped reading because its send queue was full
	deferred    *metrics.CounterVec // replies a full reply queue could not take (the device is told to resend)
}

func newServerMetrics() *serverMetrics {
	m := &serverMetrics{}
	r := &m.reg
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	m.connections = r.NewGaugeVec("termlink_connections", "Live terminal WebSocket connections that completed connect.", "channel")
	m.connects = r.NewCounterVec("termlink_connects_total", "connect frames answered with connected.", "channel")
	m.inbound = r.NewCounterVec("termlink_inbound_total", "Messages accepted and published to the bus.", "channel")
	m.duplicates = r.NewCounterVec("termlink_inbound_duplicates_total", "Messages answered from the dedupe table instead of run again.", "channel")
	m.rejected = r.NewCounterVec("termlink_frames_rejected_total", "Frames answered with an error frame.", "channel")
	m.delivered = r.NewCounterVec("termlink_outbound_delivered_total", "Final replies handed to a live connection.", "channel")
	m.unclaimed = r.NewCounterVec("termlink_outbound_unclaimed_total", "Final replies with no live connection to take them.", "channel")
	m.dropped = r.NewCounterVec("termlink_slow_clients_dropped_total", "Connections dropped because a write made no progress within the write timeout.", "channel")
	m.runs = r.NewCounterVec("termlink_runs_total", "Agent runs finished, by finish reason.", "finish_reason")
	m.runSeconds = r.NewHistogramVec("termlink_run_seconds", "Agent run time.", "channel", latency)
	m.replySecs = r.NewHistogramVec("termlink_reply_seconds", "Time from accepting a message to dispatching its reply.", "channel", latency)
	m.running = r.NewGaugeVec("termlink_runs_running", "Agent runs in progress.", "")
	m.busy = r.NewCounterVec("termlink_inbound_busy_total", "Messages refused as busy: their session or the server had the most messages waiting.", "channel")
	m.logFailures = r.NewCounterVec("termlink_session_log_failures_total", "Session log writes that failed (disk full, I/O error).", "")
	m.websockets = r.NewGaugeVec("termlink_websockets_open", "Open WebSocket connections, before and after connect.", "")
	m.overCap = r.NewCounterVec("termlink_websockets_refused_total", "WebSocket upgrades refused with HTTP 503 at the connection cap.", "")
	m.paused = r.NewCounterVec("termlink_reader_paused_total", "Times a connection's reader stopped reading because its send queue was full (backpressure).", "channel")
	m.deferred = r.NewCounterVec("termlink_replies_deferred_total", "Replies a connection's full reply queue could not take; the device was told to resend the message.", "channel")
	return m
}

// walSeries registers the write-ahead log's counters, read from stats at
// each scrape: records made durable, batches written, fdatasyncs (their
// ratio to records is the group commit's batching) and segments on disk.
func (m *serverMetrics) walSeries(stats func() wal.Stats) {
	r := &m.reg
	r.NewCounterFunc("termlink_wal_records_total", "Records made durable in the write-ahead log.", func() float64 { return float64(stats().Appends) })
	r.NewCounterFunc("termlink_wal_batches_total", "Write-ahead log batches written (one write each).", func() float64 { return float64(stats().Batches) })
	r.NewCounterFunc("termlink_wal_syncs_total", "Write-ahead log fdatasyncs; records/syncs is the group commit's batch size.", func() float64 { return float64(stats().Syncs) })
	r.NewGaugeFunc("termlink_wal_segments", "Write-ahead log segments on disk.", func() float64 { return float64(stats().Segments) })
}

// Runtime is the channel runtime: it accepts inbound messages (session id,
// dedupe, session log, events), records finished runs, and dispatches
// outbound messages to the adapters.
type Runtime struct {
	log      *slog.Logger
	bus      *bus.Bus
	store    *session.Store // read here; written through journal
	journal  *journal
	dedupe   *dedupe
	channels map[string]*channel
	order    []string // channel ids, sorted
	metrics  *serverMetrics
	notices  notices.Mailboxes // the notice mailboxes (package notices; notices_conn.go wires them)
	fleet    *fleet            // device registry, peers API, live streams (fleet.go)

	runPrefix string
	runSeq    atomic.Uint64

	// admission counts the messages accepted and not yet started (queued,
	// on the bus, offered to a running turn), per session and in all.
	admission *admission
	// cluster is the NATS side in cluster mode (cluster.go); nil: the
	// embedded server, whose store of record is the workspace.
	cluster *clusterNode
	// unwritable is the last session-log write failure, nil once a write
	// succeeds again; /healthz reports it.
	unwritable atomic.Pointer[string]
	// startsAtOnce (the router's) tells AcceptInbound whether a message
	// of an idle session would start without waiting; then its start is
	// recorded with it. A busy session's next message, taken with a run
	// slot as a run ends, has its start recorded with that run's reply
	// (recordReply). Such messages are premarked (session key + "\x00" +
	// message id), and beforeRun writes nothing for them.
	startsAtOnce func(key string) bool
	premarked    sync.Map
	// reruns holds the messages rebuild found started and cut short once
	// (session key + "\x00" + message id): their next start is recorded
	// run_interrupted instead of run_started (beforeRun).
	reruns sync.Map
}

// SessionKey builds the spec's session id.
func SessionKey(channelID, accountID, peerID, threadID string) string {
	key := channelID + ":" + accountID + ":" + peerID
	if threadID != "" {
		key += ":" + threadID
	}
	return key
}

// parseSessionKey splits a session id; ids, accounts, peers and threads
// contain no ':' (the adapter and the config refuse it).
func parseSessionKey(key string) (channelID, accountID, peerID, threadID string, ok bool) {
	parts := strings.Split(key, ":")
	switch len(parts) {
	case 3:
		return parts[0], parts[1], parts[2], "", true
	case 4:
		return parts[0], parts[1], parts[2], parts[3], true
	}
	return "", "", "", "", false
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
type AcceptResult struct {
	RunID     string
	Duplicate bool
	Pending   bool          // duplicate whose run is still going
	Reply     *link.Message // duplicate whose run is done
}

// AcceptInbound takes a message from a device. A new message id is written
// to the session log (durably) and then ack is called, before the message
// is published to the bus, so the ack always precedes the reply on the
// wire. A known id calls ack with the duplicate status and publishes
// nothing (also when the server is busy). An error means the message was
// not taken and ack was not called; the device may resend. When the
// session already has its channel's maxWaitingPerSession messages waiting,
// or the server its maxWaitingRuns, the error wraps [ErrBusy]; nothing is
// written then.
func (rt *Runtime) AcceptInbound(ctx context.Context, in bus.Inbound, ack func(AcceptResult)) error {
	ch := rt.channels[in.ChannelID]
	if ch == nil {
		return fmt.Errorf("unknown channel %q", in.ChannelID)
	}
	in.RunID = rt.newRunID()
	if in.Received.IsZero() {
		in.Received = time.Now()
	}
	if rt.cluster != nil {
		return rt.cluster.accept(ctx, ch, in, ack)
	}
	prior, fresh, err := rt.dedupe.claim(in.SessionKey, in.MessageID, in.RunID)
	if err != nil {
		return fmt.Errorf("reading the session log for duplicates: %w", err)
	}
	if !fresh {
		res := AcceptResult{RunID: prior.runID, Duplicate: true, Reply: prior.reply, Pending: prior.reply == nil}
		rt.metrics.duplicates.Inc(ch.id)
		detail := "done: cached reply sent"
		if res.Pending {
			detail = "pending: run still in progress"
		}
		ch.events.Add(events.Event{Event: events.InboundDuplicate, PeerID: in.PeerID, SessionID: in.SessionKey,
			MessageID: in.MessageID, RunID: prior.runID, Preview: in.Text, Detail: detail})
		ack(res)
		return nil
	}
	first, err := rt.admission.reserveFirst(in.SessionKey, ch.maxWaitingPerSession())
	if err != nil {
		rt.dedupe.forget(in.SessionKey, in.MessageID)
		rt.metrics.busy.Inc(ch.id)
		return err
	}
	recs := []session.Record{{Role: "user", Content: in.Text, MessageID: in.MessageID, RunID: in.RunID,
		Timestamp: in.Received.Format(session.TimeLayout)}}
	// A message that starts at once gets its start recorded with it: one
	// log append (one group commit) instead of a second before its run.
	premark := first && rt.startsAtOnce != nil && rt.startsAtOnce(in.SessionKey)
	if premark {
		recs = append(recs, startRecord(in, false))
		rt.premarked.Store(in.SessionKey+"\x00"+in.MessageID, true)
	}
	if err := rt.appendLog(ctx, in.SessionKey, recs...); err != nil {
		rt.premarked.Delete(in.SessionKey + "\x00" + in.MessageID)
		rt.admission.release(in.SessionKey, 1)
		rt.dedupe.forget(in.SessionKey, in.MessageID)
		return fmt.Errorf("recording message: %w", err)
	}
	rt.metrics.inbound.Inc(ch.id)
	ch.events.Add(events.Event{Event: events.InboundAccepted, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Preview: in.Text})
	ack(AcceptResult{RunID: in.RunID})
	if err := rt.bus.PublishInbound(ctx, in); err != nil {
		rt.admission.release(in.SessionKey, 1)
		// It is in the session log: the next start runs it.
		rt.log.Warn("message recorded but not queued; it runs at the next start",
			"session", in.SessionKey, "message_id", in.MessageID, "err", err)
	}
	return nil
}

// maxWaitingPerSession is the channel's bound on messages waiting in one
// session.
func (ch *channel) maxWaitingPerSession() int {
	if n := ch.cfg.Config.MaxWaitingPerSession; n > 0 {
		return n
	}
	return config.DefaultMaxWaitingPerSession
}

// appendLog makes records durable in the write-ahead log and writes them
// to the session file (journal.append), and keeps /healthz's view of the
// workspace: a write failure marks it unwritable until a write succeeds.
// A cancelled ctx or a closed store or log says nothing about the disk.
func (rt *Runtime) appendLog(ctx context.Context, key string, recs ...session.Record) error {
	err := rt.journal.append(ctx, key, recs)
	switch {
	case err == nil:
		if rt.unwritable.Load() != nil {
			rt.unwritable.Store(nil)
			rt.log.Info("session log writable again")
		}
	case ctx.Err() != nil, errors.Is(err, session.ErrClosed), errors.Is(err, wal.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	default:
		msg := err.Error()
		rt.unwritable.Store(&msg)
		rt.metrics.logFailures.Inc("")
	}
	return err
}

// appendLogRetrying appends like appendLog, retrying a failed write with
// a capped, jittered exponential backoff until it succeeds, the store is
// closed or ctx ends. It is for records that must not be lost while the
// server runs (replies): a full disk holds the run's session, it does not
// drop the reply.
func (rt *Runtime) appendLogRetrying(ctx context.Context, key string, recs ...session.Record) error {
	err := rt.appendLog(ctx, key, recs...)
	if err == nil || errors.Is(err, session.ErrClosed) || ctx.Err() != nil {
		return err // the common case needs no backoff state
	}
	rt.log.Error("session log write failed; retrying", "session", key, "err", err)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = 0 // until it works or ctx ends
	return backoff.Retry(func() error {
		err := rt.appendLog(ctx, key, recs...)
		if err != nil && (errors.Is(err, session.ErrClosed) || ctx.Err() != nil) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx))
}

// health reports whether the workspace takes writes, and why not.
func (rt *Runtime) health() (ok bool, reason string) {
	if msg := rt.unwritable.Load(); msg != nil {
		return false, "workspace unwritable: the last session log write failed: " + *msg
	}
	return true, ""
}

// runStarted records direct_run_started.
func (rt *Runtime) runStarted(in bus.Inbound) {
	rt.metrics.running.Add("", 1)
	if ch := rt.channels[in.ChannelID]; ch != nil {
		ch.events.Add(events.Event{Event: events.DirectRunStarted, PeerID: in.PeerID, SessionID: in.SessionKey,
			MessageID: in.MessageID, RunID: in.RunID})
	}
}

// runFinished writes the reply to the session log, completes the dedupe
// entry and publishes the reply to the bus. A reply the log refuses is
// retried until it is written or ctx ends; one never written is not sent
// (a restart runs the message again, once), so no device sees a reply the
// server does not remember.
func (rt *Runtime) runFinished(ctx context.Context, in bus.Inbound, res agent.Result, took time.Duration) {
	rt.runFinishedThen(ctx, in, res, took, nil)
}

// runFinishedThen is runFinished that, with next (the session's next
// message, taken to start right after this reply), records next's start
// in the same log append as the reply (premarked: beforeRun writes
// nothing for it then).
func (rt *Runtime) runFinishedThen(ctx context.Context, in bus.Inbound, res agent.Result, took time.Duration, next *bus.Inbound) {
	rt.metrics.running.Add("", -1)
	if res.FinishReason == "" {
		res.FinishReason = link.FinishStop
	}
	reply := &link.Message{Role: link.RoleAssistant, MessageID: in.MessageID, RunID: in.RunID,
		Text: res.Text, FinishReason: res.FinishReason}
	if !rt.recordReply(ctx, in, reply, res.Media, next) {
		return
	}
	rt.metrics.runs.Inc(res.FinishReason)
	rt.metrics.runSeconds.Observe(in.ChannelID, took.Seconds())
	if ch := rt.channels[in.ChannelID]; ch != nil {
		ch.events.Add(events.Event{Event: events.DirectRunFinished, PeerID: in.PeerID, SessionID: in.SessionKey,
			MessageID: in.MessageID, RunID: in.RunID, Preview: res.Text,
			Detail: "finish_reason=" + res.FinishReason + " took=" + took.Round(time.Microsecond).String()})
	}
	out := bus.Outbound{Kind: bus.Final, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: res.Text, FinishReason: res.FinishReason,
		Media: res.Media, Started: in.Received}
	if rt.cluster != nil {
		rt.cluster.sendFinal(ctx, in, out)
		return
	}
	if err := rt.bus.PublishOutbound(ctx, out); err != nil {
		rt.log.Warn("reply not dispatched; the device gets it from dedupe when it resends",
			"session", in.SessionKey, "message_id", in.MessageID, "err", err)
	}
}

// recordReply makes a reply the store of record's before it is sent: the
// session log and the dedupe table, or in the cluster the history and the
// message's claim. A reply the log refuses is retried until it is written
// or ctx ends; false means it was not recorded and is not to be sent.
func (rt *Runtime) recordReply(ctx context.Context, in bus.Inbound, reply *link.Message, media []string, next *bus.Inbound) bool {
	if rt.cluster != nil {
		return rt.cluster.finish(ctx, in, reply, media)
	}
	recs := []session.Record{{Role: "assistant", Content: reply.Text, MessageID: in.MessageID, RunID: in.RunID,
		FinishReason: reply.FinishReason, Media: media}}
	var nextKey string
	if next != nil && next.SessionKey == in.SessionKey {
		_, rerun := rt.reruns.Load(next.SessionKey + "\x00" + next.MessageID)
		if !rerun || !next.Recovered { // a re-run records run_interrupted itself (beforeRun)
			nextKey = next.SessionKey + "\x00" + next.MessageID
			recs = append(recs, startRecord(*next, false))
			rt.premarked.Store(nextKey, true)
		}
	}
	if err := rt.appendLogRetrying(ctx, in.SessionKey, recs...); err != nil {
		if nextKey != "" {
			rt.premarked.Delete(nextKey)
		}
		rt.log.Error("reply not written to the session log; not sent, the next start runs the message again",
			"session", in.SessionKey, "message_id", in.MessageID, "err", err)
		return false
	}
	rt.dedupe.finish(in.SessionKey, in.MessageID, reply)
	rt.premarked.Delete(in.SessionKey + "\x00" + in.MessageID) // answered without starting (cancelled)
	return true
}

// beforeRun is what happens before a message's run starts. Embedded: the
// start is made durable before the agent gets the message: a run_started
// record, or for a message whose earlier run a restart cut short (rebuild
// found its run_started), a run_interrupted record. Cluster: the claim is
// marked running (clusterNode.startRun). ok false: not to be run (nothing
// recorded); answer non-nil: answer with it instead of running. ctx is
// the run's (a cancel ends it), stopCtx the router's (a hard stop ends
// it): the start record is written under stopCtx, because a cancel
// answers the run (the runner sees ctx done) but does not undo its start.
func (rt *Runtime) beforeRun(ctx, stopCtx context.Context, in bus.Inbound) (answer *agent.Result, ok bool) {
	if rt.cluster != nil {
		return rt.cluster.startRun(ctx, in)
	}
	rerunKey := in.SessionKey + "\x00" + in.MessageID
	if _, ok := rt.premarked.LoadAndDelete(rerunKey); ok {
		return nil, true // recorded with the message (AcceptInbound)
	}
	_, rerun := rt.reruns.Load(rerunKey)
	rerun = rerun && in.Recovered
	if err := rt.recordStart(stopCtx, in, rerun); err != nil {
		// Not recorded, not run: the next start finds it unanswered.
		rt.log.Error("cannot record the start of a run; not run now",
			"session", in.SessionKey, "message_id", in.MessageID, "err", err)
		return nil, false
	}
	if rerun {
		rt.reruns.Delete(rerunKey)
	}
	return nil, true
}

// agentEvent records an event a runner reports (tool results and the like).
func (rt *Runtime) agentEvent(in bus.Inbound, name, detail string) {
	if ch := rt.channels[in.ChannelID]; ch != nil {
		ch.events.Add(events.Event{Event: name, PeerID: in.PeerID, SessionID: in.SessionKey,
			MessageID: in.MessageID, RunID: in.RunID, Preview: detail})
	}
}

// progress publishes an interim update for a run.
func (rt *Runtime) progress(ctx context.Context, in bus.Inbound, text string) {
	out := bus.Outbound{Kind: bus.Progress, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: text}
	if rt.cluster != nil {
		rt.cluster.send(ctx, in, out)
		return
	}
	_ = rt.bus.PublishOutbound(ctx, out) // progress is best effort
}

// dispatch hands outbound messages to their adapters until the bus is
// closed, then dispatches what is still queued and returns. It does not
// watch a context: stopping is closing the bus, so every reply published
// before Close is dispatched (or recorded unclaimed), whatever the timing.
func (rt *Runtime) dispatch() {
	for {
		select {
		case out := <-rt.bus.Outbound():
			rt.dispatchOne(out)
		case <-rt.bus.Done():
			for { // drain what is queued, then stop
				select {
				case out := <-rt.bus.Outbound():
					rt.dispatchOne(out)
				default:
					return
				}
			}
		}
	}
}

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

// startupTail is how many records with a message id rebuild reads at most
// from the end of each session file. The walk usually stops earlier, after
// session.TailSettled answered messages in a row (all it needs to find
// the unanswered ones); dedupe completes such a partial session from the
// log (its last DedupePerSession messages) on its first unknown id.
const startupTail = 1024

// startedEvent marks the session-log record written (durably) before a
// message's first run starts (a "system" record: not a reply, so dedupe
// and nanobot readers do not take it for an answer). Found at a later
// start with the message unanswered, it means that run was cut short; a
// message without it only waited, and no restart counts against it.
const startedEvent = "run_started"

// interruptedEvent marks the session-log record written when the run of a
// message whose first run a server restart cut short starts again.
// Found at a later start with the message still unanswered, it means the
// re-run was cut short too.
const interruptedEvent = "run_interrupted"

// interruptedTwice answers a message whose run two restarts cut short.
const interruptedTwice = "interrupted twice by a server restart; not run again - send it again"

// rebuild reads the tail of every session file (not every record: see
// startupTail), fills the dedupe table with their replies and returns the
// messages accepted but never answered, oldest first per session, to be
// run (Recovered). A message whose run started (run_started) was cut short
// once: its re-run is recorded run_interrupted when it starts
// (rt.reruns). One that has run_interrupted (its re-run was cut short
// too) is answered with an error reply instead of a third run. A message
// that was only waiting when the server stopped has neither record, so
// restarts before its run never count against it.
func (rt *Runtime) rebuild(ctx context.Context) ([]bus.Inbound, error) {
	var unanswered []bus.Inbound
	var toMark []interruptedRuns
	sessions, records, twice := 0, 0, 0
	err := rt.store.ScanTails(startupTail, func(s *session.Session) error {
		sessions++
		records += len(s.Records)
		key := s.Meta.Key
		channelID, accountID, peerID, threadID, ok := parseSessionKey(key)
		if !ok {
			rt.log.Warn("session log with a key that is not a terminal session id; skipped for dedupe", "key", key)
			return nil
		}
		asked := map[string]session.Record{}
		answered := map[string]bool{}
		interrupted := map[string]bool{}
		started := map[string]bool{}
		var order []string
		for _, r := range s.Records {
			if r.MessageID == "" {
				continue
			}
			switch {
			case r.Role == "user":
				if _, seen := asked[r.MessageID]; !seen {
					order = append(order, r.MessageID)
				}
				asked[r.MessageID] = r
			case r.Role == "assistant":
				answered[r.MessageID] = true
			case r.Role == "system" && r.Extra["event"] == interruptedEvent:
				interrupted[r.MessageID] = true
			case r.Role == "system" && r.Extra["event"] == startedEvent:
				started[r.MessageID] = true
			}
		}
		var marks []session.Record
		var again []bus.Inbound
		for _, id := range order {
			if answered[id] {
				continue
			}
			if ch := rt.channels[channelID]; ch == nil || ch.adapter == nil {
				rt.log.Warn("unanswered message of a channel that is gone or disabled; not run", "session", key, "message_id", id)
				continue
			}
			r := asked[id]
			if interrupted[id] {
				twice++
				marks = append(marks, session.Record{Role: "assistant", Content: interruptedTwice, MessageID: id,
					RunID: r.RunID, FinishReason: link.FinishError})
				continue
			}
			if started[id] {
				rt.reruns.Store(key+"\x00"+id, true)
			}
			received, _ := time.ParseInLocation(session.TimeLayout, r.Timestamp, time.Local)
			again = append(again, bus.Inbound{ChannelID: channelID, AccountID: accountID, PeerID: peerID,
				ThreadID: threadID, SessionKey: key, MessageID: id, RunID: r.RunID, Text: r.Content,
				Received: received, Recovered: true})
		}
		// The messages to run again are pending from the start, so the
		// byte bound cannot drop the session before they are answered.
		d := rt.dedupe
		d.mu.Lock()
		sess := d.insert(key, s.Records)
		sess.partial = s.Partial // completed from the log on its first unknown id
		for _, in := range again {
			d.addPending(sess, in.MessageID, in.RunID)
		}
		d.trim(sess)
		d.mu.Unlock()
		if len(marks) == 0 && len(again) == 0 {
			return nil
		}
		toMark = append(toMark, interruptedRuns{key: key, marks: marks, again: again})
		return nil
	})
	if err == nil {
		unanswered = rt.markInterrupted(ctx, toMark)
	}
	if err != nil {
		return nil, fmt.Errorf("rebuilding dedupe from the session log: %w", err)
	}
	rt.log.Info("dedupe rebuilt from the session log tails", "sessions", sessions, "records", records,
		"unanswered", len(unanswered), "interrupted_twice", twice)
	return unanswered, nil
}

// interruptedRuns are one session's messages found unanswered at start-up:
// the error replies of those cut short twice, and the messages to run again.
type interruptedRuns struct {
	key   string
	marks []session.Record
	again []bus.Inbound
	err   error
}

// markInterrupted writes the error replies of every session (in parallel,
// so the session log commits them together) and returns the messages to
// run again, in order. A session whose records cannot be written is not
// run again now: the next start finds it unanswered again.
func (rt *Runtime) markInterrupted(ctx context.Context, sessions []interruptedRuns) []bus.Inbound {
	var wg sync.WaitGroup
	work := make(chan *interruptedRuns)
	for range min(len(sessions), 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ir := range work {
				if len(ir.marks) > 0 {
					ir.err = rt.appendLog(ctx, ir.key, ir.marks...)
				}
			}
		}()
	}
	for i := range sessions {
		work <- &sessions[i]
	}
	close(work)
	wg.Wait()

	var again []bus.Inbound
	for _, ir := range sessions {
		if ir.err != nil {
			rt.log.Error("cannot record interrupted runs; not run again until a later start", "session", ir.key, "err", ir.err)
			for _, in := range ir.again {
				rt.dedupe.forget(ir.key, in.MessageID)
			}
			continue
		}
		for _, m := range ir.marks {
			if m.Role == "assistant" {
				rt.dedupe.finish(ir.key, m.MessageID, &link.Message{Role: link.RoleAssistant, MessageID: m.MessageID,
					RunID: m.RunID, Text: m.Content, FinishReason: m.FinishReason})
			}
		}
		again = append(again, ir.again...)
	}
	return again
}

// dedupeReadBytes bounds how much of a session file dedupe reads when it
// completes or reloads a session: the last DedupePerSession messages, or
// as many as the last 4 MiB hold (1,024 messages of up to ~1 KiB of text
// each way fit; sessions of long messages keep fewer ids, never fewer
// than the start-up tail's). Reading the whole of a session of 20 KB
// messages (20 MB) for the first message after a restart is what it
// saves: no device resends an id that old (link.Client resends only its
// unanswered messages).
const dedupeReadBytes = 4 << 20

// loadRecent reads the records of a session's last n messages for dedupe
// (at most dedupeReadBytes of them); a session the log does not have has
// none.
func (rt *Runtime) loadRecent(key string, n int) ([]session.Record, error) {
	s, err := rt.store.TailMessages(key, n, dedupeReadBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.Records, nil
}

var errShuttingDown = errors.New("server is shutting down")

// injected records the start of a message a running turn took
// (agent.Injector). The turn has it already, so the record follows the
// start instead of preceding it: a crash in between lets it run once more
// than counted. Best effort: a failure is logged.
func (rt *Runtime) injected(ctx context.Context, in bus.Inbound) {
	if rt.cluster != nil {
		return
	}
	if err := rt.recordStart(ctx, in, false); err != nil {
		rt.log.Warn("cannot record the start of a message a running turn took", "session", in.SessionKey,
			"message_id", in.MessageID, "err", err)
	}
}

// recordStart makes a run's start durable before the agent gets the
// message: run_started, or for the re-run of a run a restart cut short
// (rerun), the run_interrupted record that keeps it from a third run. It
// is one write-ahead log append, group-committed with everything else
// being appended.
func (rt *Runtime) recordStart(ctx context.Context, in bus.Inbound, rerun bool) error {
	return rt.appendLog(ctx, in.SessionKey, startRecord(in, rerun))
}

// startRecord is the record of a run's start: run_started, or
// run_interrupted for the re-run of a run a restart cut short.
func startRecord(in bus.Inbound, rerun bool) session.Record {
	if rerun {
		return session.Record{Role: "system", MessageID: in.MessageID, RunID: in.RunID,
			Content: "the run of message " + in.MessageID + " was cut short by a server restart; it runs again once",
			Extra:   map[string]any{"event": interruptedEvent}}
	}
	return session.Record{Role: "system", MessageID: in.MessageID, RunID: in.RunID,
		Content: "the run of message " + in.MessageID + " started",
		Extra:   map[string]any{"event": startedEvent}}
}

// ErrBusy is wrapped by AcceptInbound's error when a bound of the delivery
// contract refused the message (session queue full, server-wide waiting
// runs): the message was not accepted and not acked; the adapter answers
// with an error frame of code link.CodeBusy and the device resends it
// after a backoff.
var ErrBusy = errors.New("busy")
