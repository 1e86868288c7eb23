package wschannel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"termlink/internal/intern"
	"termlink/internal/warm"
	"termlink/link"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/identity"
	"termlink/server/record"
	"termlink/server/registry"
	"termlink/server/throttle"
	"termlink/server/wschannel/readiness"
)

// Close codes the terminal adapter sends besides RFC 6455's (1000 normal,
// 1001 going away, 1007 invalid UTF-8, 1008 policy violation); 4000-4999
// are application codes.
const (
	CloseReplaced     = 4001 // a newer connection for the same peer_id took over
	CloseUnauthorized = 4003 // token missing or wrong
)

const (
	// defaultWriteStall is how long a write may make no progress (the peer
	// accepts no byte) before the connection is dropped as too slow.
	defaultWriteStall = 10 * time.Second
	closeGrace        = 2 * time.Second // wait for the peer's close frame
	readBufferBytes   = 448             // per box (box.go; gorilla takes it if > 256); larger frames are read past it
	maxRoutes         = 256             // message ids a connection remembers the session of (cancel)
	maxOwed           = 1024            // replies a connection remembers it could not queue
)

// shutdownGrace is how long Close waits, in all, for the devices to
// answer its going-away close before it cuts the rest off: a restart
// waits for its slowest devices this long at most, not closeGrace after
// each of thousands of close frames is written.
const shutdownGrace = time.Second

// ValidID reports whether s may be a peer_id or thread_id: they become
// part of the session id (':'-separated) and of the session log's file
// name. One rule for every place that takes a peer id (connect, settings,
// rollouts, certificates): identity.ValidPeerID.
func ValidID(s string) bool { return identity.ValidPeerID(s) }

// writeBufferPool shares write buffers between connections: an idle
// connection holds none.
var writeBufferPool = &sync.Pool{}

var pongFrame = link.MustEncode(&link.Pong{})

// Adapter is a channel's terminal WebSocket adapter as the server sees
// it: the runtime's Send, /api/status's ConnectedPeers, the upgrade
// route, the cluster's ReplaceElsewhere, the notice mailboxes' push and
// the mutual TLS reload. New returns one; its type is this package's.
type Adapter interface {
	// Send hands out to the device's live connection without blocking and
	// reports whether one took it; false means unclaimed. A bus.Delta
	// goes only to a connection that listed "stream" (as the new suffix
	// of its text, coalesced); the adapter keeps the peer's open streams
	// for a reconnect until their final reply's Send (stream.go).
	Send(out bus.Outbound) bool
	// ConnectedPeers is the number of live, connected peers.
	ConnectedPeers() int
	// Close drops every connection (1001) and refuses new ones; it returns
	// once every connection has ended.
	Close()
	// ServeUpgrade upgrades GET /api/channels/{channel_id}/ws and hands
	// the connection to the readiness loop (or a goroutine of its own:
	// doc.go) and returns; maxConns caps the
	// server's open WebSockets (all channels), past which it answers 503.
	ServeUpgrade(w http.ResponseWriter, r *http.Request, maxConns int64)
	// ReplaceElsewhere closes the peer's connection here (4001) because
	// the peer connected to another edge of the cluster.
	ReplaceElsewhere(peerID, edge string)
	// CloseDevices closes every connection with code and reason (a
	// cluster edge cut off from NATS sends its devices elsewhere); new
	// ones are still taken.
	CloseDevices(code int, reason string)
	// PushNotices queues the peer's due notices on its connection; it
	// reports whether the peer is connected and takes notices.
	PushNotices(peerID string) bool
	// SendFleet queues a fleet operation's frame (update, settings, diag)
	// on the peer's live connection; false when the peer is not
	// connected here, did not list the capability, or has 16 waiting.
	SendFleet(peerID string, f link.Frame) bool
	// ReloadClientAuth takes a reloaded client CA and deny list: new
	// connections are checked against it, and open connections whose
	// certificate it denies are closed (4003). Only for a channel that
	// had mutual TLS from the start.
	ReloadClientAuth(ca *identity.ClientAuth)
	// AuthorizeHTTP checks a device's plain HTTP request (a release
	// download) as the WebSocket checks its device: the client
	// certificate on a mutual TLS channel, a known bearer token on a
	// channel that takes only devices with a credential. It returns the
	// peer a certificate names (else ""), or the HTTP status and the
	// reason to refuse.
	AuthorizeHTTP(r *http.Request) (peer string, status int, why string)
}

// Accepter is the accept path (the runtime's AcceptInbound): the store
// of record takes the message, ack is called before it is queued to run.
// An error means it was not taken (one wrapping record.ErrBusy: a bound
// refused it).
type Accepter interface {
	AcceptInbound(ctx context.Context, in bus.Inbound, ack func(record.Accepted)) error
}

// Records is what the adapter asks of the store of record (a slice of
// record.Store): a cancel.
type Records interface {
	Cancel(ctx context.Context, sessionKey, messageID string) bool
}

// Presence is told that a device connection here came and went: the
// runtime's accept path (a device gone holds back no message of its
// sessions) and a cluster's edge (record.Edge: it records where the peer
// is).
type Presence interface {
	Connected(channelID, peerID string)
	Disconnected(channelID, peerID string)
}

// Registry is the device registry's connection side (*registry.Registry).
type Registry interface {
	Connected(d registry.Device) (gen uint64, ignored []string, err error)
	Disconnected(channelID, peerID string, gen uint64)
	MessageAccepted(channelID, peerID string)
	SetScreen(channelID, peerID string, gen uint64, s registry.Screen) bool
}

// Mailboxes is the notice mailboxes' delivery side (notices.Mailboxes).
type Mailboxes interface {
	Due(channelID, peerID string, after uint64, limit int, now time.Time) (frames [][]byte, ids []string, last uint64, more bool)
	MarkSent(channelID, peerID string, ids []string, at time.Time)
	Ack(channelID, peerID, noticeID string) error
}

// EventLog is the channel's event log (*events.Log).
type EventLog interface {
	Add(e events.Event)
}

// Deps is what an adapter uses, all given at construction.
type Deps struct {
	Accept  Accepter
	Records Records
	// Presence is told of the connections (nil: nobody keeps them).
	Presence Presence
	Registry Registry
	Notices  Mailboxes
	// Bindings are the channel's learnt device tokens; ClientAuth its
	// mutual TLS (nil: none; ReloadClientAuth replaces it).
	Bindings   identity.Bindings
	ClientAuth *identity.ClientAuth
	Events     EventLog
	// Fleet is the server's side of fleet operations (nil: none).
	Fleet Fleet
	// Frames are the device frames the server's capabilities take
	// beyond the message path (frames.go); any other type is refused as
	// unsupported.
	Frames []FrameRoute
	// Outside is the server's gate for what a device or a stranger can
	// make it write (package throttle; nil: everything is written).
	Outside *throttle.Gate
	// SessionKey builds the spec's session id (runtime.SessionKey).
	SessionKey func(channelID, accountID, peerID, threadID string) string
	Metrics    *Metrics     // shared by every channel's adapter; required
	Log        *slog.Logger // nil: slog.Default()
}

// Options tune an adapter beyond its channel's config.
type Options struct {
	// WriteStall is how long a write may make no progress before the
	// connection is dropped as too slow; 0: 10 s. Tests shorten it.
	WriteStall time.Duration
}

// terminalAdapter is the TerminalWebSocketAdapter of the spec for one
// channel: it owns the channel's connections.
type terminalAdapter struct {
	id         string
	cfg        config.Channel
	heartbeat  time.Duration
	accept     Accepter
	records    Records
	presence   Presence // nil: none
	registry   Registry
	notices    Mailboxes
	fleet      Fleet
	frames     map[link.Type]FrameRoute // frames.go
	outside    *throttle.Gate
	creds      identity.Bindings
	events     EventLog
	keyOf      func(channelID, accountID, peerID, threadID string) string
	m          *Metrics
	log        *slog.Logger
	capLists   *intern.Lists       // the connects' capability lists, one copy of each (an idle device holds none of its own)
	steps      stepper             // reads and handles frames for the connections
	writers    *warm.Pool[*wsConn] // run the connections' writers
	writeStall time.Duration       // defaultWriteStall unless Options say
	closeGrace time.Duration       // a peer's time to answer a close frame (closeGrace; tests set it)
	shutdown   time.Duration       // Close's time for all of them together (shutdownGrace; tests set it)

	clientAuth atomic.Pointer[identity.ClientAuth] // mutual TLS (identity.go); nil: none

	mu         sync.Mutex
	peers      map[string]*wsConn // connected peers
	streams    openStreams        // the peers' open streams' text so far (stream.go)
	questions  openQuestions      // the peers' open questions (questions.go)
	conns      []*wsConn          // every open connection (wsConn.slot: its index; a slice, not a map: 8 bytes a connection, not about 30)
	stopped    bool
	stopCtx    context.Context // accepting messages ends with the adapter
	stopAccept context.CancelFunc
	wg         sync.WaitGroup    // connection handlers
	poller     *readiness.Poller // idle connections wait here (poll.go); nil until the first
	wheel      *readiness.Wheel  // their deadlines
	noPoll     bool              // no poller here, or the adapter has stopped

	parked atomic.Int64 // connections that gave their box back (box.go): idle ones
}

// New builds the adapter of channel id (cfg its config).
func New(id string, cfg config.Channel, d Deps, opt Options) Adapter {
	return newTerminalAdapter(id, cfg, d, opt)
}

func newTerminalAdapter(id string, cfg config.Channel, d Deps, opt Options) *terminalAdapter {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	a := &terminalAdapter{
		id: id, cfg: cfg, accept: d.Accept, records: d.Records, presence: d.Presence, registry: d.Registry, notices: d.Notices, fleet: d.Fleet, frames: frameRoutes(d.Frames), outside: d.Outside,
		creds: d.Bindings, events: d.Events, keyOf: d.SessionKey, m: d.Metrics, log: d.Log.With("channel", id),
		heartbeat: time.Duration(cfg.Config.HeartbeatSeconds) * time.Second,
		peers:     map[string]*wsConn{}, writeStall: opt.WriteStall,
		steps: newStepper(), writers: newWriters(), capLists: intern.NewLists(maxCapLists),
		closeGrace: closeGrace, shutdown: shutdownGrace,
	}
	if a.writeStall <= 0 {
		a.writeStall = defaultWriteStall
	}
	if d.ClientAuth != nil {
		a.clientAuth.Store(d.ClientAuth)
	}
	a.stopCtx, a.stopAccept = context.WithCancel(context.Background())
	return a
}

// maxCapLists is how many distinct capability lists an adapter shares:
// a fleet has a few (its firmware versions); past it lists are kept per
// connection.
const maxCapLists = 256

// idleTimeout is how long a connection may stay silent: 2.5 heartbeats.
func (a *terminalAdapter) idleTimeout() time.Duration { return a.heartbeat * 5 / 2 }

func (a *terminalAdapter) connectTimeout() time.Duration {
	if s := a.cfg.Config.ConnectTimeoutSeconds; s > 0 {
		return time.Duration(s) * time.Second
	}
	return time.Duration(config.DefaultConnectTimeoutSeconds) * time.Second
}

func (a *terminalAdapter) sendQueue() int {
	if n := a.cfg.Config.SendQueue; n > 0 {
		return n
	}
	return config.DefaultSendQueue
}

// ServeUpgrade implements Adapter: the connection is served until it
// ends, by the readiness loop and the stepper (poll.go), or on a
// goroutine of its own.
func (a *terminalAdapter) ServeUpgrade(w http.ResponseWriter, r *http.Request, maxConns int64) {
	headerToken := ""
	if identity.RequiresToken(a.cfg.Config) {
		if auth := r.Header.Get("Authorization"); auth != "" {
			tok, ok := httpapi.Bearer(auth)
			if !ok || !a.tokenKnown(tok) {
				a.refused(r.RemoteAddr, events.Event{Event: events.TerminalRefused,
					Detail: "401 before upgrade: unknown bearer token from " + r.RemoteAddr})
				http.Error(w, "unauthorized: the bearer token is not valid for channel "+a.id, http.StatusUnauthorized)
				return
			}
			headerToken = tok
		}
	}
	cert, ok := a.checkClientCert(w, r)
	if !ok {
		return
	}
	a.mu.Lock()
	stopped := a.stopped
	a.mu.Unlock()
	if stopped {
		http.Error(w, "channel "+a.id+" is stopping", http.StatusServiceUnavailable)
		return
	}
	// The cap keeps file descriptors for /healthz, the API, session logs
	// and agents: past it a device is refused before it costs anything.
	open := a.m.WebSockets
	open.Add("", 1)
	if open.Value("") > maxConns {
		open.Add("", -1)
		a.m.OverCap.Inc("")
		w.Header().Set("Retry-After", "10")
		http.Error(w, fmt.Sprintf("server busy: it holds its maximum of %d WebSocket connections (maxConnections); try again later", maxConns),
			http.StatusServiceUnavailable)
		return
	}
	c, err := a.upgrade(w, r)
	if err != nil {
		open.Add("", -1)
		return // upgrade answered with the reason
	}
	c.init(r.RemoteAddr, headerToken, cert)
	polled := c.pollInit() // before c is published: the writer's closeSocket reads c.ph
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		c.closeSocket()
		open.Add("", -1)
		return
	}
	a.addConnLocked(c)
	a.wg.Add(1)
	a.mu.Unlock()
	// The connection waits in the readiness loop (or gets a goroutine of
	// its own) and the HTTP handler returns: net/http then lets go of its
	// request, response and 8 KiB of buffers, which an idle device would
	// otherwise hold for hours.
	if polled { // an idle connection holds no goroutine (poll.go)
		c.start()
		a.steps.Run(c)
		return
	}
	c.start()
	go c.serve()
}

// Send implements Adapter. It is called by the runtime (a run's goroutine) and
// never blocks; see wsConn.offerReply for what a full queue means.
func (a *terminalAdapter) Send(out bus.Outbound) bool {
	if sent, ok := a.sendQuestionLike(out); ok {
		return sent
	}
	a.mu.Lock()
	switch out.Kind {
	case bus.Delta:
		a.streams.put(out.PeerID, out.MessageID, out.Text, time.Now())
	case bus.Final:
		a.streams.remove(out.PeerID, out.MessageID) // whether or not the peer is here
	}
	c := a.peers[out.PeerID]
	a.mu.Unlock()
	if c == nil {
		return false
	}
	switch out.Kind {
	case bus.Delta:
		if !c.stream {
			return false
		}
		return c.offerDelta(out.MessageID, out.Text)
	case bus.Progress:
		if !c.progress {
			return false
		}
		return c.offerProgress(out.MessageID, link.MustEncode(&link.Progress{MessageID: out.MessageID, Text: out.Text}))
	default:
		text := out.Text
		for _, m := range out.Media {
			text += "\n[file: " + baseName(m) + "]"
		}
		reply := encodeFrame(&link.Message{Role: link.RoleAssistant,
			MessageID: out.MessageID, RunID: out.RunID, Text: text, FinishReason: out.FinishReason})
		if !c.offerReply(out.MessageID, reply) {
			reply.recycle()
			return false
		}
		return true
	}
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// ConnectedPeers implements Adapter.
func (a *terminalAdapter) ConnectedPeers() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.peers)
}

// Close implements Adapter: every connection gets a 1001 close frame.
func (a *terminalAdapter) Close() {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return
	}
	a.stopped = true
	conns := a.connsLocked()
	a.mu.Unlock()
	a.stopAccept()
	for _, c := range conns {
		c.closeWith(websocket.CloseGoingAway, "server shutting down; reconnect later")
	}
	a.waitConns(a.shutdown)
	a.wg.Wait()
	a.stopReadiness()
	a.steps.Stop()
	a.writers.Stop()
	a.events.Add(events.Event{Event: events.AdapterStopped})
}

// waitConns waits until every connection has ended or d has passed,
// then closes the sockets of those still open: a device that has not
// answered its close frame by then is cut off (its link reconnects all
// the same; what it had not had acked it sends again).
func (a *terminalAdapter) waitConns(d time.Duration) {
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	a.mu.Lock()
	late := a.connsLocked()
	a.mu.Unlock()
	for _, c := range late {
		c.closeSocket()
	}
}

// connsLocked lists the open connections (a.mu held).
func (a *terminalAdapter) connsLocked() []*wsConn {
	return append([]*wsConn(nil), a.conns...)
}

// register makes c the live connection of its peer; it reports whether c
// replaced an older connection, which is told why and closed.
func (a *terminalAdapter) register(c *wsConn) (replaced bool) {
	a.mu.Lock()
	old := a.peers[c.peerID]
	a.peers[c.peerID] = c
	a.mu.Unlock()
	if old != nil && old != c {
		old.closeWith(CloseReplaced, "replaced by a newer connection for peer_id "+c.peerID)
		return true
	}
	return false
}

// ReplaceElsewhere implements Adapter.
func (a *terminalAdapter) ReplaceElsewhere(peerID, edge string) {
	a.mu.Lock()
	c := a.peers[peerID]
	a.mu.Unlock()
	if c != nil {
		c.closeWith(CloseReplaced, "replaced by a newer connection for peer_id "+peerID+" on edge "+edge)
	}
}

// CloseDevices implements Adapter.
func (a *terminalAdapter) CloseDevices(code int, reason string) {
	a.mu.Lock()
	conns := a.connsLocked()
	a.mu.Unlock()
	for _, c := range conns {
		c.closeWith(code, reason)
	}
}

// addConnLocked lists c among the open connections (a.mu held).
func (a *terminalAdapter) addConnLocked(c *wsConn) {
	c.slot = int32(len(a.conns))
	a.conns = append(a.conns, c)
}

// unregister forgets c; it reports whether c was its peer's live connection.
func (a *terminalAdapter) unregister(c *wsConn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i := c.slot; i >= 0 && int(i) < len(a.conns) && a.conns[i] == c {
		last := len(a.conns) - 1
		moved := a.conns[last]
		a.conns[i], moved.slot = moved, i
		a.conns[last] = nil
		a.conns = a.conns[:last]
		c.slot = -1
	}
	if c.peerID != "" && a.peers[c.peerID] == c {
		delete(a.peers, c.peerID)
		return true
	}
	return false
}

// describeReadError says why the reader stopped, for the disconnect event.
func describeReadError(err error, idle time.Duration) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("silent for %s (2.5 heartbeats): connection closed", idle)
	case errors.Is(err, websocket.ErrReadLimit):
		return "frame larger than the read limit: connection closed"
	case websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway):
		return "closed by the device: " + err.Error()
	default:
		return err.Error()
	}
}

// messageIDOf digs a message_id out of a frame that failed to decode, so
// the error can name the message it is about.
func messageIDOf(data []byte) string {
	const key = `"message_id":"`
	i := strings.Index(string(data), key)
	if i < 0 {
		return ""
	}
	rest := data[i+len(key):]
	j := strings.IndexByte(string(rest), '"')
	if j < 0 || j > 128 {
		return ""
	}
	return string(rest[:j])
}

// handle answers one text frame (valid UTF-8) from the device.
func (c *wsConn) handle(data []byte) {
	f, err := link.Decode(data)
	if err != nil {
		c.a.m.Rejected.Inc(c.a.id)
		c.sendError(messageIDOf(data), link.CodeBadFrame, err.Error())
		return
	}
	switch f := f.(type) {
	case *link.Ping:
		c.enqueue(outFrame{data: pongFrame})
	case *link.Pong:
	case *link.Connect:
		c.handleConnect(f)
	case *link.Message:
		switch {
		case c.peerID == "":
			c.reject(f.MessageID, link.CodeNotConnected, "send a connect frame with your peer_id before message frames")
		case f.IsReply():
			c.reject(f.MessageID, link.CodeBadFrame, `message frames with role "assistant" are sent by the server, not by a terminal`)
		default:
			c.handleMessage(f)
		}
	case *link.Cancel:
		c.handleCancel(f)
	case *link.Answer:
		c.handleAnswer(f) // questions.go
	default:
		if route, ok := c.a.frames[f.FrameType()]; ok {
			c.takeFrame(route, f) // frames.go
			return
		}
		c.reject("", link.CodeBadFrame, fmt.Sprintf("Unsupported websocket frame type: %s (sent by the server, not by a terminal, or a capability this server does not have)", f.FrameType()))
	}
}

func (c *wsConn) reject(messageID, code, msg string) {
	c.a.m.Rejected.Inc(c.a.id)
	c.a.refused(c.remote, events.Event{Event: events.InboundRejected, PeerID: c.peerID, SessionID: c.sessionKey, MessageID: messageID, Detail: msg})
	c.sendError(messageID, code, msg)
}

func (c *wsConn) sendError(messageID, code, msg string) {
	c.sendFrame(&link.Error{Error: msg, MessageID: messageID, Code: code})
}

func (c *wsConn) handleConnect(f *link.Connect) {
	a := c.a
	connected := &link.Connected{ChannelID: a.id, SessionID: c.sessionKey, HeartbeatSeconds: a.cfg.Config.HeartbeatSeconds}
	switch {
	case f.PeerID == "":
		c.reject("", link.CodeBadFrame, `connect frame: field "peer_id" is missing or empty`)
		return
	case !ValidID(f.PeerID):
		c.reject("", link.CodeBadFrame, fmt.Sprintf("connect frame: peer_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + - (starting with a letter or digit)", f.PeerID))
		return
	case f.ThreadID != "" && !ValidID(f.ThreadID):
		c.reject("", link.CodeBadFrame, fmt.Sprintf("connect frame: thread_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + -", f.ThreadID))
		return
	case c.peerID != "" && c.peerID != f.PeerID:
		c.reject("", link.CodeBadFrame, fmt.Sprintf("this connection is already connected as peer_id %q; open a new connection for %q", c.peerID, f.PeerID))
		return
	case c.peerID != "": // same peer again: answer again
		c.enqueue(outFrame{data: link.MustEncode(connected), kind: connectedFrame})
		return
	}
	if !c.certAllows(f.PeerID) {
		return
	}
	f.Capabilities = a.capLists.Of(f.Capabilities) // held by c and the registry; never changed
	if identity.RequiresToken(a.cfg.Config) {
		tok := c.headerToken()
		if tok == "" {
			tok = f.Token
		}
		if ok, why := c.authorizeConnect(f, tok); !ok {
			c.sendError("", link.CodeUnauthorized, "connect refused for peer_id "+f.PeerID+": "+why)
			c.closeWith(CloseUnauthorized, "unauthorized")
			return
		}
	}
	c.peerID = f.PeerID
	c.setNames(f.ThreadID, f.UserID)
	c.sessionKey = a.keyOf(a.id, a.cfg.AccountID, f.PeerID, f.ThreadID)
	connected.SessionID = c.sessionKey
	// The registry first: a new anonymous device past its bounds is
	// refused before it is registered anywhere.
	gen, err := c.registryConnected(f)
	if err != nil {
		c.peerID, c.sessionKey, c.names = "", "", nil
		a.m.Rejected.Inc(a.id)
		a.refused(c.remote, events.Event{Event: events.TerminalRefused, PeerID: f.PeerID, Detail: "connect refused: " + err.Error()})
		c.sendError("", link.CodeRegistryFull, "connect refused for peer_id "+f.PeerID+": "+err.Error())
		c.closeWith(websocket.CloseTryAgainLater, "device registry full")
		return
	}
	c.regGen = gen
	c.connectedAuth()
	c.caps = f.Capabilities
	for _, cap := range f.Capabilities {
		switch cap {
		case link.CapProgress:
			c.progress = true
		case link.CapCancel:
			c.cancel = true
		case link.CapNotice:
			c.notice = true
		case link.CapStream:
			c.stream = true
		case link.CapDiag: // a diag_result carries up to link.MaxDiagBytes
			c.diag = true
			c.ws().SetReadLimit(c.readLimit())
		}
	}
	// Registered first, so /api/status counts the peer by the time the
	// device reads connected; the writer holds back replies and progress
	// until connected is written, so none can overtake it.
	if !a.register(c) {
		a.m.Connections.Add(a.id, 1)
	}
	if a.presence != nil {
		a.presence.Connected(a.id, f.PeerID) // before connected: a cluster's replies find this edge
	}
	// The channel's event before connected is written: whoever watches
	// the events hears of the device before the device can say anything.
	a.m.Connects.Inc(a.id)
	a.events.Add(events.Event{Event: events.TerminalConnected, PeerID: f.PeerID, SessionID: c.sessionKey,
		Detail: fmt.Sprintf("device_name=%q capabilities=%v remote=%s", f.DeviceName, f.Capabilities, c.remote)})
	c.enqueue(outFrame{data: link.MustEncode(connected), kind: connectedFrame})
	c.streamsOnConnect()
	c.questionsOnConnect()
	c.noticesOnConnect()
	c.fleetOnConnect(f)
	// The operator's log says who comes and goes; a device that
	// reconnects in a loop is held back by the one gate (its peer id is
	// the source: a burst, then the kind's summary).
	a.outside.Info(logConnected, f.PeerID, "device connected", "channel_id", a.id, "peer_id", f.PeerID,
		"device_name", f.DeviceName, "remote", c.remote)
}

// The throttle kinds of the connect and disconnect lines.
const (
	logConnected    = "device connected"
	logDisconnected = "device disconnected"
)

func (c *wsConn) handleMessage(f *link.Message) {
	a := c.a
	if strings.TrimSpace(f.Text) == "" {
		c.reject(f.MessageID, link.CodeBadMessage, "message "+f.MessageID+": text is missing or blank")
		return
	}
	if n, max := utf8.RuneCountInString(f.Text), a.cfg.Config.MaxMessageChars; n > max {
		c.reject(f.MessageID, link.CodeBadMessage, fmt.Sprintf("message %s: text is %d characters; this channel accepts at most %d (maxMessageChars)", f.MessageID, n, max))
		return
	}
	if len(f.MessageID) > 256 {
		c.reject("", link.CodeBadMessage, "message_id is longer than 256 bytes")
		return
	}
	thread := c.threadID()
	key := c.sessionKey
	if f.ThreadID != "" && f.ThreadID != thread {
		if !ValidID(f.ThreadID) {
			c.reject(f.MessageID, link.CodeBadMessage, fmt.Sprintf("message %s: thread_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + -", f.MessageID, f.ThreadID))
			return
		}
		thread = f.ThreadID
		key = a.keyOf(a.id, a.cfg.AccountID, c.peerID, thread)
	}
	if !c.messageRate().take(time.Now()) {
		c.reject(f.MessageID, link.CodeBusy, fmt.Sprintf("message %s not accepted: peer %s sends faster than %d messages a second (burst %d, ratePerPeer); send it again later",
			f.MessageID, c.peerID, a.cfg.Config.RatePerPeer, a.cfg.Config.RateBurst))
		return
	}
	user := c.userID()
	if f.UserID != "" {
		user = f.UserID
	}
	if key != c.sessionKey {
		if c.routes == nil {
			c.routes = &routeMemory{}
		}
		c.routes.remember(f.MessageID, key) // for a cancel that names no thread
	}
	in := bus.Inbound{ChannelID: a.id, AccountID: a.cfg.AccountID, PeerID: c.peerID, ThreadID: thread, UserID: user,
		SessionKey: key, MessageID: f.MessageID, Text: f.Text, Received: time.Now(), Capabilities: c.caps}
	c.acceptMessage(in, time.Time{})
}

// RoomWaiter is a busy refusal (an error wrapping record.ErrBusy) that can
// be waited out: the bound that refused it is full now and tells when it
// has room (router.BusyError). ready is closed once a place is held for
// the message; done is called once the message was offered again or
// given up.
type RoomWaiter interface {
	WaitRoom() (ready <-chan struct{}, done func())
}

// heldMessage is a message a full waiting bound refused, held by the
// reader (which stops reading the device) until a place frees, the hold
// runs out or the connection closes (serve, resumeHeld).
type heldMessage struct {
	in    bus.Inbound
	ready <-chan struct{}
	done  func()
	until time.Time // then it is answered busy
	err   error     // the refusal
}

// maxHold is how long a connection may hold a refused message instead of
// answering busy: half a heartbeat (a fifth of the idle timeout), so the
// device is read again well within its idle timeout and link.Client's
// liveness deadline (a heartbeat and PongTimeout without any frame; the
// connection's replies still flow meanwhile).
func (a *terminalAdapter) maxHold() time.Duration { return a.heartbeat / 2 }

// acceptMessage hands in to the accept path. A refusal by a full waiting
// bound that can be waited out is held (the reader stops reading this
// device until a place frees, as TCP backpressure) rather than answered
// busy, until until (zero: maxHold from now).
func (c *wsConn) acceptMessage(in bus.Inbound, until time.Time) {
	a := c.a
	id, key := in.MessageID, in.SessionKey
	// The context is the adapter's, not the connection's: once the session
	// log has the message, it is published even if the device has gone.
	answer := in.Answer != nil
	err := a.accept.AcceptInbound(a.stopCtx, in, func(res record.Accepted) {
		if answer {
			c.answerAck(id, key, res)
			return
		}
		c.sendFrame(&link.Ack{MessageID: id, SessionID: key, Accepted: true,
			Duplicate: res.Duplicate, Pending: res.Pending, Reply: res.Reply})
	})
	var room RoomWaiter
	switch {
	case err == nil:
		a.registry.MessageAccepted(a.id, c.peerID)
	case errors.As(err, &room) && a.maxHold() > 0 && (until.IsZero() || time.Now().Before(until)) && !c.isClosing():
		if until.IsZero() {
			until = time.Now().Add(a.maxHold())
			a.m.Held.Inc(a.id)
		}
		ready, done := room.WaitRoom()
		c.held = &heldMessage{in: in, ready: ready, done: done, until: until, err: err}
	case errors.Is(err, record.ErrBusy):
		c.answerBusy(id, err)
	default:
		if a.stopCtx.Err() == nil { // else the server is stopping: no news
			a.log.Error("message not accepted", "peer_id", c.peerID, "message_id", id, "err", err)
		}
		c.reject(id, "unavailable", "message "+id+" was not accepted ("+err.Error()+"); send it again")
	}
}

// answerBusy refuses message id for a full bound: an error frame with code
// busy and no ack; the device resends it after a backoff.
func (c *wsConn) answerBusy(id string, err error) {
	c.a.m.Busy.Inc(c.a.id)
	c.reject(id, link.CodeBusy, "message "+id+" not accepted: "+strings.TrimPrefix(err.Error(), record.ErrBusy.Error()+": ")+"; send it again later")
}

// resumeHeld settles the held message once its wait ends (a step, on the
// stepper): offered again when a place is held for it, answered busy when
// the hold ran out, let go (unacked: the device resends it) when the
// connection is closing.
func (c *wsConn) resumeHeld() {
	h := c.held
	c.held = nil
	select {
	case <-h.ready:
		c.acceptMessage(h.in, h.until) // takes the place held for it
		h.done()
		return
	default:
	}
	h.done()
	if !c.isClosing() {
		c.answerBusy(h.in.MessageID, h.err)
	}
}

// handleCancel interrupts a run in the session its message went to: the
// thread the cancel names, else the one the message was sent with on this
// connection, else the connection's own.
func (c *wsConn) handleCancel(f *link.Cancel) {
	a := c.a
	if c.peerID == "" {
		c.reject(f.MessageID, link.CodeNotConnected, "send a connect frame with your peer_id before cancel frames")
		return
	}
	key := c.sessionKey
	switch {
	case f.ThreadID != "" && !ValidID(f.ThreadID):
		c.reject(f.MessageID, link.CodeBadFrame, fmt.Sprintf("cancel: thread_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + -", f.ThreadID))
		return
	case f.ThreadID != "":
		key = a.keyOf(a.id, a.cfg.AccountID, c.peerID, f.ThreadID)
	default:
		if k, ok := c.routes.lookup(f.MessageID); ok {
			key = k
		}
	}
	if !a.records.Cancel(a.stopCtx, key, f.MessageID) {
		c.reject(f.MessageID, link.CodeUnknownRun, "cancel: message "+f.MessageID+" is not queued or running in session "+key)
	}
}

// routeMemory remembers the session of the last maxRoutes messages a
// connection sent to a thread other than its own.
type routeMemory struct {
	keys  map[string]string
	order []string
}

func (m *routeMemory) remember(messageID, key string) {
	if m.keys == nil {
		m.keys = map[string]string{}
	}
	if _, ok := m.keys[messageID]; !ok {
		if len(m.order) >= maxRoutes {
			delete(m.keys, m.order[0])
			m.order = m.order[1:]
		}
		m.order = append(m.order, messageID)
	}
	m.keys[messageID] = key
}

func (m *routeMemory) lookup(messageID string) (string, bool) {
	if m == nil {
		return "", false
	}
	k, ok := m.keys[messageID]
	return k, ok
}
