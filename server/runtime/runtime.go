package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/events"
	"termlink/server/record"
	"termlink/server/record/holdback"
	"termlink/server/router"
	"termlink/server/session"
	"termlink/server/throttle"
)

// Runtime is the channel runtime: it accepts inbound messages through the
// store of record (session id, dedupe, durable record, events), records
// finished runs there, and dispatches outbound messages to the adapters.
type Runtime struct {
	log      *slog.Logger
	Sessions *session.Store // the workspace's session files: metadata, conversations
	Records  record.Parts   // the store of record and its parts (the root opens them with the backend)
	// HeldBack keeps a session's later messages from overtaking one whose
	// accept failed, for every store (package record/holdback; a device's
	// disconnect clears its entries: Presence).
	HeldBack *holdback.Book
	Channels Channels
	Order    []string // channel ids, sorted
	Metrics  *Metrics
	// Outside admits every log line and event a device, a stranger or a
	// bad request can trigger (package throttle: per source and kind, a
	// burst then a summary; fields cut to their bound). Every part that
	// logs or records what came from outside takes it.
	Outside *throttle.Gate

	runPrefix string
	runSeq    atomic.Uint64

	// eventFeed publishes the channels' events in cluster mode (events.go).
	eventFeed EventFeed

	// Admission counts the messages accepted and not yet started (queued,
	// on the bus, offered to a running turn), per session and in all.
	Admission *router.Admission
	// Router runs what is queued (it tells the store whether a message of
	// an idle session would start without waiting); set once it is made,
	// after the store of record.
	Router *router.Router
}

// New is a runtime with no channels yet, its metrics registered, its
// gate for what comes from outside open (the caller closes it), at most
// maxWaiting messages waiting in all.
func New(log *slog.Logger, sessions *session.Store, maxWaiting int) *Runtime {
	return &Runtime{
		log: log, Sessions: sessions, Admission: router.NewAdmission(maxWaiting), HeldBack: holdback.New(),
		Channels: Channels{}, Metrics: NewMetrics(), runPrefix: newRunPrefix(),
		Outside: throttle.New(log, throttle.Options{}),
	}
}

// Process names this process in its run ids (a cluster's claims name it).
func (rt *Runtime) Process() string { return rt.runPrefix }

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
	ch := rt.Channels[in.ChannelID]
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
	accept := func(ctx context.Context, in bus.Inbound, perSession int, ack func(record.Accepted)) error {
		return rt.HeldBack.Accept(ctx, rt.Records.Store, in, perSession, ack)
	}
	perSession := ch.MaxWaitingPerSession()
	if in.Answer != nil {
		// An answer goes to the run waiting for it, never behind the
		// session's messages: no message held back holds it back, and
		// it has a place of its own beyond the session's bound (the
		// server's bound still applies).
		in.Text = bus.AnswerText(*in.Answer)
		text = in.Text
		accept = rt.Records.Store.Accept
		perSession++
	}
	err := accept(ctx, in, perSession, func(res record.Accepted) {
		if res.Duplicate {
			rt.Metrics.Duplicates.Inc(ch.ID)
			ch.Events.Add(events.Event{Event: events.InboundDuplicate, PeerID: peer, SessionID: key,
				MessageID: id, RunID: res.RunID, Preview: text, Detail: res.Detail})
		} else {
			rt.Metrics.Inbound.Inc(ch.ID)
			ch.Events.Add(events.Event{Event: events.InboundAccepted, PeerID: peer, SessionID: key,
				MessageID: id, RunID: runID, Preview: text})
		}
		ack(res)
	})
	return err
}

// Presence is told that a device connection came and went
// (wschannel.Presence): a device gone no longer holds back its sessions'
// later messages (it resends what is unanswered, in order, wherever it
// connects again), and a store that keeps where devices are
// (record.Edge) is told too.
type Presence struct{ rt *Runtime }

// Presence is the runtime's wschannel.Presence.
func (rt *Runtime) Presence() Presence { return Presence{rt} }

func (p Presence) Connected(channelID, peerID string) {
	p.rt.HeldBack.Connected(channelID, peerID)
	if e := p.rt.Records.Edge; e != nil {
		e.Connected(channelID, peerID)
	}
}

func (p Presence) Disconnected(channelID, peerID string) {
	p.rt.HeldBack.Disconnected(channelID, peerID)
	if e := p.rt.Records.Edge; e != nil {
		e.Disconnected(channelID, peerID)
	}
}

// Started records direct_run_started (router.Host).
func (rt *Runtime) Started(in bus.Inbound) {
	rt.Metrics.Running.Add("", 1)
	rt.Channels.Event(in.ChannelID, events.Event{Event: events.DirectRunStarted, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID})
}

// Finished records the reply in the store of record and sends it
// (router.Host). A reply the store refuses is retried until it is written
// or ctx ends; one never written is not sent (a restart runs the message
// again, once), so no device sees a reply the server does not remember.
// With next (the session's next message, taken to start right after this
// reply) the store may record next's start with the reply.
func (rt *Runtime) Finished(ctx context.Context, in bus.Inbound, res agent.Result, took time.Duration, next *bus.Inbound) {
	rt.Metrics.Running.Add("", -1)
	if res.FinishReason == "" {
		res.FinishReason = link.FinishStop
	}
	reply := &link.Message{Role: link.RoleAssistant, MessageID: in.MessageID, RunID: in.RunID,
		Text: res.Text, FinishReason: res.FinishReason}
	if !rt.Records.Finish(ctx, in, reply, res.Media, next) {
		return
	}
	rt.Metrics.Runs.Inc(res.FinishReason)
	rt.Metrics.RunSeconds.Observe(in.ChannelID, took.Seconds())
	rt.Channels.Event(in.ChannelID, events.Event{Event: events.DirectRunFinished, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Preview: res.Text,
		Detail: "finish_reason=" + res.FinishReason + " took=" + took.Round(time.Microsecond).String()})
	rt.Records.Deliver(ctx, in, bus.Outbound{Kind: bus.Final, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: res.Text, FinishReason: res.FinishReason,
		Media: res.Media, Started: in.Received})
}

// Start is what happens before a message's run starts (router.Host): the
// store of record decides and records it (record.Store.Start).
func (rt *Runtime) Start(ctx, stopCtx context.Context, in bus.Inbound) (answer *agent.Result, ok bool) {
	return rt.Records.Start(ctx, stopCtx, in)
}

// Joined records the start of a message a running turn took
// (router.Host; record.Joiner: a store without one records it with the
// turn's reply).
func (rt *Runtime) Joined(ctx context.Context, in bus.Inbound) {
	if j := rt.Records.Joiner; j != nil {
		j.Joined(ctx, in)
	}
}

// Event records an event a runner reports (tool results and the like).
func (rt *Runtime) Event(in bus.Inbound, name, detail string) {
	rt.Channels.Event(in.ChannelID, events.Event{Event: name, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Preview: detail})
}

// Progress sends an interim update for a run (router.Host).
func (rt *Runtime) Progress(ctx context.Context, in bus.Inbound, text string) {
	out := bus.Outbound{Kind: bus.Progress, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: text}
	rt.Records.Deliver(ctx, in, out) // progress is best effort
}

// Delta sends the reply text a run has streamed so far (router.Host):
// all of it, for the adapter to send a connection only what it lacks.
// Like progress it is best effort and never recorded.
func (rt *Runtime) Delta(ctx context.Context, in bus.Inbound, text string) {
	out := bus.Outbound{Kind: bus.Delta, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: text}
	rt.Records.Deliver(ctx, in, out)
}

// Question sends a question of a run to its device (router.Host), the
// way progress goes: its frame as the Outbound's text, never recorded.
func (rt *Runtime) Question(ctx context.Context, in bus.Inbound, q link.Question) {
	b, err := link.Encode(&q)
	if err != nil {
		rt.log.Error("question not encoded", "question_id", q.QuestionID, "err", err)
		return
	}
	rt.Channels.Event(in.ChannelID, events.Event{Event: EventQuestionAsked, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Preview: q.Text, Detail: "question_id=" + q.QuestionID})
	rt.Records.Deliver(ctx, in, bus.Outbound{Kind: bus.Question, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: string(b)})
}

// QuestionClosed tells the device's adapter that a question is no
// longer open (router.Host).
func (rt *Runtime) QuestionClosed(ctx context.Context, in bus.Inbound, questionID string) {
	rt.Channels.Event(in.ChannelID, events.Event{Event: EventQuestionClosed, PeerID: in.PeerID, SessionID: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Detail: "question_id=" + questionID})
	rt.Records.Deliver(ctx, in, bus.Outbound{Kind: bus.QuestionClosed, ChannelID: in.ChannelID, PeerID: in.PeerID, SessionKey: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID, Text: questionID})
}

// The channel events of a question sent to a device, and closed
// (answered, timed out, its run cancelled or ended).
const (
	EventQuestionAsked  = "question_asked"
	EventQuestionClosed = "question_closed"
)

// dispatchOne hands a reply or progress to its channel's adapter (Send
// never blocks) and records a reply delivered or unclaimed.
func (rt *Runtime) dispatchOne(out bus.Outbound) {
	ch := rt.Channels[out.ChannelID]
	if ch == nil || ch.Adapter == nil {
		rt.log.Warn("outbound for unknown or disabled channel", "channel", out.ChannelID, "message_id", out.MessageID)
		return
	}
	delivered := ch.Adapter.Send(out)
	if out.Kind != bus.Final {
		return
	}
	ev := events.Event{PeerID: out.PeerID, SessionID: out.SessionKey, MessageID: out.MessageID, RunID: out.RunID, Preview: out.Text}
	if delivered {
		ev.Event = events.OutboundDelivered
		rt.Metrics.Delivered.Inc(ch.ID)
		if !out.Started.IsZero() {
			rt.Metrics.ReplySeconds.Observe(ch.ID, time.Since(out.Started).Seconds())
		}
	} else {
		ev.Event = events.OutboundUnclaimed
		ev.Detail = "no live connection for the peer; the device gets the reply when it resends the message"
		rt.Metrics.Unclaimed.Inc(ch.ID)
	}
	ch.Events.Add(ev)
}

// Dropped says n started runs ended without a result (router.Host).
func (rt *Runtime) Dropped(n int) { rt.Metrics.Running.Add("", -int64(n)) }

// UpdateMeta changes a session's metadata (router.Host).
func (rt *Runtime) UpdateMeta(ctx context.Context, key string, update func(map[string]any)) error {
	return rt.Sessions.UpdateMetadata(ctx, key, update)
}

// Pending reports whether a message is accepted and not answered
// (router.Host): on its way to the router (record.InFlight; a store
// without one never hands the router a message from an accept).
func (rt *Runtime) Pending(key, messageID string) bool {
	return rt.Records.InFlight != nil && rt.Records.InFlight.Pending(key, messageID)
}

var _ router.Host = (*Runtime)(nil)

// SendFleet hands a fleet operation's frame (update, settings, diag) to
// the peer's live connection on this server; false when it is not
// connected here or did not list the capability the frame needs.
func (rt *Runtime) SendFleet(channelID, peerID string, f link.Frame) bool {
	if a := rt.Channels.Adapter(channelID); a != nil {
		return a.SendFleet(peerID, f)
	}
	return false
}
