package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/events"
	"termlink/server/fanout"
)

// EventsStream holds every node's channel events (issue 25): one subject
// per channel, bounded per channel like one node's log, and in bytes and
// age in all. Events are a view for operators, not a record: a node
// publishes them best effort (a full queue or a NATS outage drops them
// from the cluster's view, never from the node's own log).
const (
	EventsStream = "TERMLINK_EVENTS"
	eventsPrefix = "termlink.events."

	eventsMaxBytes = 64 << 20
	eventsMaxAge   = 7 * 24 * time.Hour
	eventsQueue    = 4096 // events waiting to be published, per node

	// A node publishes the events of a channel that wait, together, as
	// one message of at most eventsBatchBytes (an event's fields are cut
	// to 200 bytes each: a few hundred bytes an event): a message costs
	// about 4 events (received, accepted, run, replied), and one
	// replicated write each would double what it costs JetStream.
	eventsBatchBytes = 60 << 10
	eventsMaxMsgSize = 64 << 10
	// eventsLinger: how long the first event of a batch waits for more.
	// At 400 msg/s, publishing each event as the publisher got to it
	// cost 3.6 messages of the stream per message answered.
	eventsLinger = 100 * time.Millisecond
)

// eventBatch is a message of the events stream: the events of one
// channel a node published together. A message of the format before
// batches is one event.
type eventBatch struct {
	Events []events.Event `json:"events"`
}

// decodeEvents reads a message of the events stream: a batch, or one
// event; nil for neither.
func decodeEvents(data []byte) []events.Event {
	var b eventBatch
	if json.Unmarshal(data, &b) == nil && len(b.Events) > 0 {
		out := b.Events[:0]
		for _, e := range b.Events {
			if e.Event != "" {
				out = append(out, e)
			}
		}
		return out
	}
	var e events.Event
	if json.Unmarshal(data, &e) == nil && e.Event != "" {
		return []events.Event{e}
	}
	return nil
}

// EventFeed publishes a node's channel events to the events stream and
// reads every node's back (View).
type EventFeed struct {
	n       *Node
	perChan int
	q       chan published
	dropped atomic.Uint64
}

type published struct {
	channel string
	e       events.Event
}

// OpenEventFeed creates or updates the events stream (keeping at most
// perChannel events of each channel) and starts the node's publisher.
func (n *Node) OpenEventFeed(ctx context.Context, perChannel int) (*EventFeed, error) {
	if perChannel < 1 {
		perChannel = 1000
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	_, err := ensure(ctx, "stream "+EventsStream, func(ctx context.Context) (jetstream.Stream, error) {
		return n.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:              EventsStream,
			Description:       "termlink: every node's channel events, one subject per channel, in batches",
			Subjects:          []string{eventsPrefix + ">"},
			Storage:           jetstream.FileStorage,
			Replicas:          n.cfg.Replicas,
			MaxMsgsPerSubject: int64(perChannel),
			MaxBytes:          eventsMaxBytes,
			MaxAge:            eventsMaxAge,
			MaxMsgSize:        eventsMaxMsgSize, // a batch (eventsBatchBytes)
			Discard:           jetstream.DiscardOld,
		})
	})
	if err != nil {
		return nil, err
	}
	f := &EventFeed{n: n, perChan: perChannel, q: make(chan published, eventsQueue)}
	n.Go(f.publish)
	return f, nil
}

// Dropped is how many events did not reach the stream.
func (f *EventFeed) Dropped() uint64 { return f.dropped.Load() }

// Publish queues e of channel for the stream, named for this node; it
// never blocks (a full queue drops the event and counts it).
func (f *EventFeed) Publish(channel string, e events.Event) {
	e.Node = f.n.Name()
	select {
	case f.q <- published{channel, e}:
	default:
		f.dropped.Add(1)
	}
}

// publish sends the queued events until the node closes: the events of
// eventsLinger (or eventsBatchBytes of a channel) go together, one
// message per channel (eventBatch), so a node publishes at most about
// 10 messages a second per channel however many events it records.
func (f *EventFeed) publish(ctx context.Context) {
	var warned time.Time
	for {
		var first published
		select {
		case <-ctx.Done():
			return
		case first = <-f.q:
		}
		batches := map[string][][]byte{}
		size := map[string]int{}
		var order []string
		add := func(p published) {
			data, err := json.Marshal(p.e)
			if err != nil {
				f.dropped.Add(1)
				return
			}
			if _, ok := batches[p.channel]; !ok {
				order = append(order, p.channel)
			}
			batches[p.channel] = append(batches[p.channel], data)
			size[p.channel] += len(data) + 1
		}
		add(first)
		linger := time.NewTimer(eventsLinger)
	drain:
		for n := 1; n < eventsQueue; n++ {
			select {
			case p := <-f.q:
				add(p)
				if size[p.channel] >= eventsBatchBytes {
					break drain
				}
			case <-linger.C:
				break drain
			case <-ctx.Done():
				break drain
			}
		}
		linger.Stop()
		for _, ch := range order {
			evs := batches[ch]
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := f.n.js.Publish(pctx, eventsPrefix+keyPart(ch), joinBatch(evs))
			cancel()
			if err != nil && ctx.Err() == nil {
				f.dropped.Add(uint64(len(evs)))
				if time.Since(warned) > time.Minute {
					warned = time.Now()
					f.n.log.Warn("cluster: channel events did not reach the events stream; the cluster's view of events misses them (this node's own log has them)",
						"channel_id", ch, "events", len(evs), "err", err)
				}
			}
		}
	}
}

// joinBatch is the eventBatch of the events, each JSON already.
func joinBatch(evs [][]byte) []byte {
	n := len(`{"events":[]}`) + len(evs)
	for _, e := range evs {
		n += len(e)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"events":[`...)
	for i, e := range evs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, "]}"...)
}

// EventView is a channel's events across the cluster: Recent and
// Subscribe read every node's (each naming its node, in the order the
// stream stored them), Add records in this node's own log (which
// publishes it). It implements the fleet API's event log.
type EventView struct {
	local *events.Log
	view  *events.Log

	// The mirror starts at the first read: a node whose events nobody
	// reads (most of a cluster's, most of the time) decodes none.
	once    sync.Once
	start   func()
	ready   chan struct{} // closed once the mirror has caught up with the stream
	readyMu sync.Once
}

// eventsCatchUp bounds how long the first read of a view waits for its
// mirror to load the stream's events of the channel.
const eventsCatchUp = 3 * time.Second

// View is channel's events over the cluster: at its first read it
// mirrors them from the stream into a log of the stream's bound, kept
// current until the node closes; local is this node's own log of the
// channel.
func (f *EventFeed) View(channel string, local *events.Log) *EventView {
	v := &EventView{local: local, view: events.NewLog(f.perChan), ready: make(chan struct{})}
	subject := eventsPrefix + keyPart(channel)
	v.start = func() { f.n.Go(func(ctx context.Context) { f.mirror(ctx, subject, v.view, v.caughtUp) }) }
	return v
}

// caughtUp says the mirror holds what the stream held when it started.
func (v *EventView) caughtUp() { v.readyMu.Do(func() { close(v.ready) }) }

// begin starts the mirror at the first read and waits, at most
// eventsCatchUp, until it has caught up.
func (v *EventView) begin() {
	v.once.Do(v.start)
	t := time.NewTimer(eventsCatchUp)
	defer t.Stop()
	select {
	case <-v.ready:
	case <-t.C:
	}
}

// mirror copies the subject's events (the stream keeps the newest
// perChannel) into view, then follows the stream; an ordered consumer
// made again after a NATS failure starts where the mirror left off.
// caughtUp is called once the events there were at the start are in.
func (f *EventFeed) mirror(ctx context.Context, subject string, view *events.Log, caughtUp func()) {
	var last uint64 // stream sequence of the last event mirrored
	for wait := 100 * time.Millisecond; ctx.Err() == nil; wait = min(2*wait, 5*time.Second) {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}}
		if last > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, last+1
		}
		cons, err := f.n.js.OrderedConsumer(ctx, EventsStream, cfg)
		if err == nil {
			if ci, ierr := cons.Info(ctx); ierr == nil && ci.NumPending == 0 {
				caughtUp() // nothing to load
			}
			err = f.follow(ctx, cons, view, &last, caughtUp)
			wait = 100 * time.Millisecond
		}
		if ctx.Err() != nil {
			return
		}
		f.n.log.Debug("cluster: following the events stream again", "subject", subject, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (f *EventFeed) follow(ctx context.Context, cons jetstream.Consumer, view *events.Log, last *uint64, caughtUp func()) error {
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return ctx.Err()
			}
			return err
		}
		md, err := m.Metadata()
		if err == nil {
			*last = md.Sequence.Stream
		}
		for _, e := range decodeEvents(m.Data()) {
			view.Add(e)
		}
		if err == nil && md.NumPending == 0 {
			caughtUp()
		}
	}
}

// Add records e in this node's own log (and so in the stream).
func (v *EventView) Add(e events.Event) { v.local.Add(e) }

// Recent is the channel's newest limit events over the cluster, oldest
// first (all for -1).
func (v *EventView) Recent(limit int) []events.Event {
	v.begin()
	return v.view.Recent(limit)
}

// Subscribe streams the channel's events over the cluster as they come.
func (v *EventView) Subscribe(buf int) *fanout.Sub[events.Event] {
	v.begin()
	return v.view.Subscribe(buf)
}
