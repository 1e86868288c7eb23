// Package fleet is the operator's view of the fleet: the peers API (GET
// .../peers, a peer's page, POST .../peers/{peer_id}/cancel), the event
// API (GET .../events) and the live event stream (GET .../events/stream,
// Server-Sent Events of a channel's events and its devices' changes), and
// the termserver_devices_online and termserver_event_streams_* series.
//
// It owns the live streams (their bound, their goroutines' stop at
// shutdown) and nothing else: the device registry, the channels' event
// logs, the session history, the runs and the notice mailboxes are the
// server's, given to New as the interfaces below (Registry, EventLog,
// History, Runs, Notices), so another implementation of one (a JetStream
// registry, a cluster's cancel) is an addition here, not an edit. The
// server builds one API at start-up and registers its routes (Routes)
// behind its operator guard; it calls StopStreams before the HTTP
// server's shutdown and Close after it.
package fleet

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"termlink/link"
	"termlink/server/events"
	"termlink/server/fanout"
	"termlink/server/metrics"
	"termlink/server/registry"
	"termlink/server/session"
)

// Registry is the device registry as the fleet API reads it
// (*registry.Registry; in cluster mode *cluster.Devices, every node's
// devices, each with its edge).
type Registry interface {
	Get(channelID, peerID string) (registry.Peer, bool)
	// Page lists at most limit peers matching f in peer id order after
	// the peer id after, and the peer id to continue from ("" on the last
	// page).
	Page(channelID string, f registry.Filter, after string, limit int) (peers []registry.Peer, next string)
	Count(channelID string) int
	// Online counts the channel's online devices, and per tag (key=value)
	// those with at most maxTags distinct tags, the rest under "other".
	Online(channelID string, maxTags int) (total int, byTag map[string]int)
	// Subscribe streams the channel's peers as they change.
	Subscribe(channelID string, buf int) *fanout.Sub[registry.Peer]
	// HealthCounts counts the channel's online devices per health
	// condition (health.go).
	HealthCounts(channelID string) map[string]int
	// HealthByTag counts them per condition and value of each tag key
	// in keys, at most maxValues values per key (health.go).
	HealthByTag(channelID string, keys []string, maxValues int) []registry.HealthTagCount
}

// EventLog is a channel's event log (*events.Log).
type EventLog interface {
	Add(e events.Event)
	// Recent is the newest limit events, oldest first (all for -1).
	Recent(limit int) []events.Event
	Subscribe(buf int) *fanout.Sub[events.Event]
}

// Channel is a configured channel (enabled or not).
type Channel struct {
	ID        string
	AccountID string
	Events    EventLog
}

// History reads the last records of the session log of key, oldest
// first: at least n with a message id where the log has them
// (session.Store.Tail). A session never written is no records, or an
// error wrapping fs.ErrNotExist.
type History func(key string, n int) ([]session.Record, error)

// Run is a run in progress (or joined to one) in one of a peer's sessions.
type Run struct{ Session, MessageID string }

// Runs are the runs of the server's sessions, and their cancel.
type Runs interface {
	// PeerRuns lists the runs in progress in every session of the peer
	// whose thread-less session id is base (its own and its threads'),
	// by message id.
	PeerRuns(base string) []Run
	// PeerSessions lists base and those of its threads with queued or
	// running work.
	PeerSessions(base string) []string
	// Cancel cancels messageID, queued or running in session; false when
	// it is neither.
	Cancel(session, messageID string) bool
}

// Notices is what the peers API needs of the notice mailboxes.
type Notices interface {
	Count(channelID, peerID string) int   // notices_pending
	ForPeer(channelID, peerID string) any // a peer's notices, a JSON array
}

// Deps are what the fleet API reads and acts on, all given at
// construction.
type Deps struct {
	Registry Registry
	Channels []Channel // in the order /metrics lists them
	// SessionKey builds the spec's session id (runtime.SessionKey).
	SessionKey func(channelID, accountID, peerID, threadID string) string
	History    History
	Runs       Runs
	Notices    Notices
	// Questions lists the questions open on a peer's device (the
	// "choice" extension), each with the seconds it has left as its
	// TimeoutSeconds; nil: none are shown.
	Questions func(channelID, peerID, base string) []link.Question
	Metrics   *metrics.Registry
	Log       *slog.Logger
	// HealthTagKeys are the tag keys termserver_devices_health_by_tag
	// counts per value (the configuration's metrics.healthTagKeys);
	// none: no such series.
	HealthTagKeys []string
}

// Options tune the live streams; zero values take the defaults.
type Options struct {
	StreamBuffer    int           // events a stream subscriber may fall behind; default 1024
	StreamWrite     time.Duration // a stream write that makes no progress this long ends it; default 10 s
	StreamKeepalive time.Duration // default 15 s
	HelloPeers      int           // peers in the stream's hello; default 100
	MaxStreams      int           // live event streams open at once, server-wide; default 64
	// MaxStreamsPerToken bounds the live event streams one admin token
	// (one operator name) holds at once, so that one viewer cannot take
	// every stream the server keeps; default 4 (a few console tabs).
	MaxStreamsPerToken int
}

const (
	conversationRecords = 20   // records of the session log on a peer's page
	maxTagSeries        = 1000 // tag series per channel in termserver_devices_online
	// EventOperatorCancel is the event of a cancel through the API.
	EventOperatorCancel = "operator_cancel"
)

// Pages of the peers API and the live stream's hello.
const (
	defaultPeersLimit = 100
	maxPeersLimit     = 1000
	helloPeers        = 100 // peers in hello; the console pages the rest
	// maxStreams bounds the live event streams open at once: each holds a
	// subscriber's buffer of up to StreamBuffer events and peer changes.
	maxStreams = 64
	// maxStreamsPerToken is Options.MaxStreamsPerToken's default.
	maxStreamsPerToken = 4
)

// API serves the fleet's routes and owns the live event streams.
type API struct {
	d        Deps
	channels map[string]Channel
	opt      Options

	streamOpen    *metrics.GaugeVec
	streamDropped *metrics.CounterVec

	mu       sync.Mutex
	stopped  bool
	streams  context.Context // ends every live stream at shutdown
	stop     context.CancelFunc
	streamWG sync.WaitGroup
	// streamsOpen counts the live event streams (under mu), at most
	// opt.MaxStreams; streamsBy those of each operator (admin token
	// name), at most opt.MaxStreamsPerToken each.
	streamsOpen int
	streamsBy   map[string]int
}

// New builds the fleet API on d and registers its series on d.Metrics.
func New(d Deps, opt Options) *API {
	if opt.StreamBuffer <= 0 {
		opt.StreamBuffer = 1024
	}
	if opt.StreamWrite <= 0 {
		opt.StreamWrite = 10 * time.Second
	}
	if opt.StreamKeepalive <= 0 {
		opt.StreamKeepalive = 15 * time.Second
	}
	if opt.HelloPeers <= 0 {
		opt.HelloPeers = helloPeers
	}
	if opt.MaxStreams <= 0 {
		opt.MaxStreams = maxStreams
	}
	if opt.MaxStreamsPerToken <= 0 {
		opt.MaxStreamsPerToken = maxStreamsPerToken
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	a := &API{d: d, opt: opt, channels: make(map[string]Channel, len(d.Channels)), streamsBy: map[string]int{}}
	for _, ch := range d.Channels {
		a.channels[ch.ID] = ch
	}
	a.streams, a.stop = context.WithCancel(context.Background())
	a.streamOpen = d.Metrics.NewGaugeVec("termserver_event_streams_open", "Live event streams (/events/stream) open.", "channel")
	a.streamDropped = d.Metrics.NewCounterVec("termserver_event_streams_dropped_total", "Live event streams ended because the client fell behind: its subscription lagged StreamBuffer events, or a write made no progress within StreamWrite.", "channel")
	a.registerOnline()
	a.registerHealth()
	return a
}

// registerOnline adds termserver_devices_online for the channels. Tag
// series come only from authenticated devices (anonymous ones cannot
// choose labels), at most maxTagSeries per channel; the online devices
// with a tag past it count once under tag="other".
func (a *API) registerOnline() {
	a.d.Metrics.NewGaugeSet("termserver_devices_online", "Devices online, per channel and per tag (key=value) of authenticated devices; tag=\"\" counts all, tag=\"other\" the devices with tags past the series cap.",
		[]string{"channel", "tag"}, func(emit func(int64, ...string)) {
			for _, ch := range a.d.Channels {
				total, byTag := a.d.Registry.Online(ch.ID, maxTagSeries)
				emit(int64(total), ch.ID, "")
				tags := make([]string, 0, len(byTag))
				for t := range byTag {
					tags = append(tags, t)
				}
				sort.Strings(tags)
				for _, t := range tags {
					emit(int64(byTag[t]), ch.ID, t)
				}
			}
		})
}

// StopStreams ends the live streams (they hold HTTP requests open, which
// would hold up the HTTP server's shutdown) and refuses new ones.
func (a *API) StopStreams() {
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.stop()
}

// Close ends the live streams and waits for their handlers to return.
func (a *API) Close() {
	a.StopStreams()
	a.streamWG.Wait()
}

// StreamsOpen is how many live event streams are open.
func (a *API) StreamsOpen() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.streamsOpen
}
