package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/metrics"
	"termlink/server/session"
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
	adapter Adapter // nil when disabled
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
	m.websockets = r.NewGaugeVec("termlink_websockets_open", "Open WebSocket connections, before and after connect.", "")
	m.overCap = r.NewCounterVec("termlink_websockets_refused_total", "WebSocket upgrades refused with HTTP 503 at the connection cap.", "")
	m.paused = r.NewCounterVec("termlink_reader_paused_total", "Times a connection's reader stopped reading because its send queue was full (backpressure).", "channel")
	m.deferred = r.NewCounterVec("termlink_replies_deferred_total", "Replies a connection's full reply queue could not take; the device was told to resend the message.", "channel")
	return m
}

// Runtime is the channel runtime: it accepts inbound messages (session id,
// dedupe, session log, events), records finished runs, and dispatches
// outbound messages to the adapters.
type Runtime struct {
	log      *slog.Logger
	bus      *bus.Bus
	store    *session.Store
	dedupe   *dedupe
	channels map[string]*channel
	order    []string // channel ids, sorted
	metrics  *serverMetrics

	runPrefix string
	runSeq    atomic.Uint64
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
// nothing. An error means the message was not taken; the device may resend.
func (rt *Runtime) AcceptInbound(ctx context.Context, in bus.Inbound, ack func(AcceptResult)) error {
	ch := rt.channels[in.ChannelID]
	if ch == nil {
		return fmt.Errorf("unknown channel %q", in.ChannelID)
	}
	in.RunID = rt.newRunID()
	prior, fresh := rt.dedupe.claim(in.SessionKey, in.MessageID, in.RunID)
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
	if in.Received.IsZero() {
		in.Received = time.Now()
	}
	rec := session.Record{Role: "user", Content: in.Text, MessageID: in.MessageID, RunID: in.RunID,
		Timestamp: in.Received.Format(session.TimeLayout)}
	if err := rt.store.Append(ctx, in.SessionKey, rec); err != nil {
		rt.dedupe.forget(in.SessionKey, in.MessageID)
		return fmt.Errorf("recording message: %w", err)
	}
	rt.metrics.inbound.Inc(ch.id)
	ch.events.Add(events.Event{Event: events.InboundAccepted, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Preview: in.Text})
	ack(AcceptResult{RunID: in.RunID})
	if err := rt.bus.PublishInbound(ctx, in); err != nil {
		// It is in the session log: the next start runs it.
		rt.log.Warn("message recorded but not queued; it runs at the next start",
			"session", in.SessionKey, "message_id", in.MessageID, "err", err)
	}
	return nil
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
// entry and publishes the reply to the bus.
func (rt *Runtime) runFinished(ctx context.Context, in bus.Inbound, res agent.Result, took time.Duration) {
	rt.metrics.running.Add("", -1)
	if res.FinishReason == "" {
		res.FinishReason = link.FinishStop
	}
	reply := &link.Message{Role: link.RoleAssistant, MessageID: in.MessageID, RunID: in.RunID,
		Text: res.Text, FinishReason: res.FinishReason}
	rec := session.Record{Role: "assistant", Content: res.Text, MessageID: in.MessageID, RunID: in.RunID,
		FinishReason: res.FinishReason, Media: res.Media}
	if err := rt.store.Append(ctx, in.SessionKey, rec); err != nil {
		// Still answer the device; the log misses this reply, so a restart
		// would run the message again.
		rt.log.Error("reply not written to the session log", "session", in.SessionKey,
			"message_id", in.MessageID, "err", err)
	}
	rt.dedupe.finish(in.SessionKey, in.MessageID, reply)
	rt.metrics.runs.Inc(res.FinishReason)
	rt.metrics.runSeconds.Observe(in.ChannelID, took.Seconds())
	if ch := rt.channels[in.ChannelID]; ch != nil {
		ch.events.Add(events.Event{Event: events.DirectRunFinished, PeerID: in.PeerID, SessionID: in.SessionKey,
			MessageID: in.MessageID, RunID: in.RunID, Preview: res.Text,
			Detail: fmt.Sprintf("finish_reason=%s took=%s", res.FinishReason, took.Round(time.Microsecond))})
	}
	out := bus.Outbound{Kind: bus.Final, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: res.Text, FinishReason: res.FinishReason,
		Media: res.Media, Started: in.Received}
	if err := rt.bus.PublishOutbound(ctx, out); err != nil {
		rt.log.Warn("reply not dispatched; the device gets it from dedupe when it resends",
			"session", in.SessionKey, "message_id", in.MessageID, "err", err)
	}
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
	_ = rt.bus.PublishOutbound(ctx, out) // progress is best effort
}

// dispatch hands outbound messages to their adapters until the bus is
// closed and drained or ctx ends.
func (rt *Runtime) dispatch(ctx context.Context) {
	for {
		select {
		case out := <-rt.bus.Outbound():
			rt.dispatchOne(out)
		case <-ctx.Done():
			return
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

// rebuild fills the dedupe table from the session log and returns the
// messages that were accepted but never answered, oldest first per session.
func (rt *Runtime) rebuild() ([]bus.Inbound, error) {
	var unanswered []bus.Inbound
	sessions, records := 0, 0
	err := rt.store.Scan(func(s *session.Session) error {
		sessions++
		channelID, accountID, peerID, threadID, ok := parseSessionKey(s.Meta.Key)
		if !ok {
			rt.log.Warn("session log with a key that is not a terminal session id; skipped for dedupe", "key", s.Meta.Key)
			return nil
		}
		asked := map[string]session.Record{}
		var order []string
		for _, r := range s.Records {
			if r.MessageID == "" {
				continue
			}
			records++
			switch r.Role {
			case "user":
				if _, seen := asked[r.MessageID]; !seen {
					order = append(order, r.MessageID)
				}
				asked[r.MessageID] = r
				rt.dedupe.claim(s.Meta.Key, r.MessageID, r.RunID)
			case "assistant":
				rt.dedupe.finish(s.Meta.Key, r.MessageID, &link.Message{Role: link.RoleAssistant,
					MessageID: r.MessageID, RunID: r.RunID, Text: r.Content, FinishReason: r.FinishReason})
			}
		}
		for _, id := range rt.dedupe.pending(s.Meta.Key) {
			r, ok := asked[id]
			if !ok {
				continue
			}
			received, _ := time.ParseInLocation(session.TimeLayout, r.Timestamp, time.Local)
			unanswered = append(unanswered, bus.Inbound{ChannelID: channelID, AccountID: accountID, PeerID: peerID,
				ThreadID: threadID, SessionKey: s.Meta.Key, MessageID: id, RunID: r.RunID, Text: r.Content,
				Received: received})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rebuilding dedupe from the session log: %w", err)
	}
	rt.log.Info("dedupe rebuilt from the session log", "sessions", sessions, "records", records, "unanswered", len(unanswered))
	return unanswered, nil
}

var errShuttingDown = errors.New("server is shutting down")

// ErrBusy is wrapped by AcceptInbound's error when a bound of the delivery
// contract refused the message (session queue full, server-wide waiting
// runs): the message was not accepted and not acked; the adapter answers
// with an error frame of code link.CodeBusy and the device resends it
// after a backoff.
var ErrBusy = errors.New("busy")
