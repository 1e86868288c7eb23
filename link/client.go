package link

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/gorilla/websocket"
)

// Client defaults (ClientConfig fields left zero).
const (
	DefaultHeartbeat      = 30 * time.Second
	DefaultPongTimeout    = 10 * time.Second
	DefaultWriteTimeout   = 10 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	DefaultRetryInitial   = time.Second
	DefaultRetryMax       = 30 * time.Second
	DefaultRetryJitter    = 0.5
	DefaultStableAfter    = 60 * time.Second
	DefaultWindow         = 16
	// DefaultMaxStreamBytes is ClientConfig.MaxStreamBytes when zero:
	// the frame limit, so streamed text is bounded like a reply.
	DefaultMaxStreamBytes = MaxFrameBytes
)

// Errors of Client methods.
var (
	ErrClosed         = errors.New("link: client is closed")
	ErrNotConnected   = errors.New("link: not connected")
	ErrUnknownMessage = errors.New("link: no unanswered message with that id")
	ErrNotAnswered    = errors.New("link: no final answer of that message waits for confirmation")
	ErrBlankText      = errors.New("link: message text is blank")
	ErrUnknownNotice  = errors.New("link: no notice with that id was received")
)

// ClientConfig configures a Client. URL, PeerID and either StateDir or
// Outbox are required; the rest has defaults.
type ClientConfig struct {
	// URL of the channel: ws://host:port/api/channels/ID/ws or wss://...
	URL string
	// Fallbacks are more URLs of the same channel (the edges of a
	// termserver cluster): when a dial fails, the next URL in the ring
	// URL, Fallbacks[0], ... is dialled; a working one is kept.
	Fallbacks []string
	// PeerID is the device's stable id; DeviceName is shown by the server.
	PeerID     string
	DeviceName string
	// ThreadID and UserID, when set, go in the connect frame.
	ThreadID, UserID string
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// CAFile is a PEM file of CA certificates trusted for wss:// (instead
	// of the system roots). TLSConfig, when set, is used as the base.
	// The client keeps a TLS session cache for its life, so a reconnect
	// resumes the last session when the server still knows it (a
	// TLSConfig's own ClientSessionCache is kept; one with its own
	// GetClientCertificate gets none).
	CAFile    string
	TLSConfig *tls.Config
	// CertFile and KeyFile are the device's client certificate and key
	// (PEM) for a channel with mutual TLS; both or neither. The key file
	// must not be accessible by group or others. They are read again at
	// every dial, so a renewed certificate needs no restart (a session
	// made with the old one is not resumed).
	CertFile, KeyFile string

	// StateDir holds the durable outbox (a FallbackOutbox: the
	// FileOutbox, or memory while the state dir cannot be written; see
	// Status.Storage and EventStorage). Ignored when Outbox is set.
	StateDir string
	// StorageRetry is how often the state dir is tried again while the
	// outbox is in memory (default 10s).
	StorageRetry time.Duration
	// Outbox replaces the file outbox (e.g. NewMemoryOutbox() for load
	// tests). The caller closes it.
	Outbox Outbox

	// Capabilities listed in connect (default: DefaultCapabilities()).
	// List CapNotice to get notices (EventNotice) and CapScreen to send
	// screen mirrors (SetScreen).
	Capabilities []string
	// Stream lists CapStream in connect (added to Capabilities when it is
	// not there; listing it there does the same): the server then sends
	// a reply's text while the agent writes it, and the client reports it
	// as EventDelta (see there). Off by default: a client that does not
	// ask sees exactly the spec.
	Stream bool
	// MaxStreamBytes bounds the text the client accumulates from the
	// deltas of one message (default DefaultMaxStreamBytes, the most a
	// reply frame can carry): past it the text stops growing (cut on a
	// rune boundary, logged) until the final reply, which carries it all.
	MaxStreamBytes int
	// Board, Version and Tags go in connect for the server's device
	// registry: the board profile's name, the software version, and
	// operator tags such as {"site": "lobby"}.
	Board, Version string
	Tags           map[string]string
	// Platform goes in connect (os/arch[/variant], for CapUpdate), and
	// SettingsVersion is the settings version the first connect says
	// the device applied (then Client.SetSettingsVersion).
	Platform        string
	SettingsVersion int64
	// BinarySHA256 goes in connect: the running binary's SHA-256 (a
	// rollout's patches are made from it).
	BinarySHA256 string

	// Heartbeat is the ping interval until the server's connected frame
	// gives heartbeat_seconds (default 30s).
	Heartbeat time.Duration
	// PongTimeout: when no frame at all arrives for Heartbeat+PongTimeout
	// the link is dead: closed and redialled (default 10s).
	PongTimeout time.Duration
	// WriteTimeout bounds every write; one that times out tears the
	// connection down (default 10s).
	WriteTimeout time.Duration
	// ConnectTimeout bounds dial, TLS, upgrade and the connect/connected
	// exchange (default 10s).
	ConnectTimeout time.Duration

	// Reconnect backoff (cenkalti/backoff/v4, exponential, never gives
	// up): the first wait is about RetryInitial (default 1s), each next
	// one doubles, with ±RetryJitter (default 0.5) randomization, and no
	// wait is longer than RetryMax (default 30s). The waits grow back
	// from RetryInitial only after a session that stayed connected for
	// StableAfter (default 60s). With Fallbacks, a link that was up for
	// RetryInitial or longer and dropped is dialled again at once on the
	// next URL of the ring (then the others): the backoff comes after the
	// whole ring.
	RetryInitial time.Duration
	RetryMax     time.Duration
	RetryJitter  float64
	StableAfter  time.Duration

	// Window is how many messages may be in flight (default 16): sent
	// and not yet finally answered, or answered and not yet confirmed by
	// the caller (Client.Delivered). A long outbox is resent in order
	// without flooding the server, and a caller that does not confirm
	// holds the sending back instead of piling up replies.
	Window int
	// EventBuffer is the capacity of the Events channel (default 0:
	// unbuffered, so that a caller reading slowly gets coalesced, fresh
	// progress). Events wait in a bounded queue before it (see Events).
	EventBuffer int

	// NetDialContext dials TCP (default net.Dialer).
	NetDialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
}

// Status is a snapshot of a Client, for a status line on a screen.
type Status struct {
	State     State
	Attempt   int
	NextTry   time.Time // StateWaiting
	Reason    string    // why offline
	SessionID string    // StateConnected
	// Pending counts the messages in the outbox: unanswered, or answered
	// and not yet confirmed by the caller.
	Pending int
	// Storage says why the outbox keeps messages in memory (empty while
	// it is durable).
	Storage string
}

// ClientStats count what a Client did since NewClient.
type ClientStats struct {
	Dials            int64 // dial attempts
	Sessions         int64 // dials that reached connected
	Sent             int64 // message frames written (first sends and resends)
	Resent           int64 // message frames written for a message sent before
	Replies          int64 // replies delivered (once per message)
	DuplicateReplies int64 // replies for an already answered message, dropped
	Busy             int64 // messages refused with code busy (resent after a backoff)
	Pending          int   // messages in the outbox now
	Unconfirmed      int   // final answers waiting for Delivered now
	Notices          int64 // notice frames received (first sends and resends)
	NoticesExpired   int64 // notices received past their expiry: not shown, not acked
	NoticesReacked   int64 // notices received again after they were shown: acked again, not shown
	NoticeAcks       int64 // notice_ack frames written (first acks and re-acks)
	Screens          int64 // screen frames written
	ScreensCoalesced int64 // screens replaced by a newer one before they were sent
	Pongs            int64 // pong frames received: heartbeats the server answered
	Questions        int64 // question frames received (first sends and resends)
	Answers          int64 // answers acked by the server (final: out of the outbox once confirmed)
	Deltas           int64 // delta frames taken (each one an EventDelta, possibly coalesced)
	DeltasIgnored    int64 // delta frames ignored: a gap, a duplicate, no such message waiting, after the final reply
	QueuedEvents     int   // events waiting for the caller now
	MaxQueuedEvents  int   // the most events that waited at once
	DroppedEvents    int64 // events coalesced or dropped by the queue's bounds

	// HeartbeatRTT is the last heartbeat's round trip (ping to pong); 0:
	// none yet.
	HeartbeatRTT time.Duration
}

// Client is a device's session with a terminal WebSocket channel. It keeps
// one connection up forever (dial, connect, heartbeat, reconnect with
// backoff) and delivers every message exactly once through its outbox:
// each message is stored before it is sent and resent after every
// reconnect until its reply arrives; the server's dedupe answers a resent
// message from its cache instead of running it again.
//
// Delivery is confirmed by the caller: a final answer (EventReply, or a
// refusal) keeps its message in the outbox until the caller, having
// handled it (drawn it on the screen), calls Delivered. A crash or a stop
// before that leaves the message in the outbox; the next start resends it
// and shows the answer the server kept. A second copy of an answer (a
// reply and a duplicate ack) is dropped, and an answered message is not
// resent while it waits for confirmation.
//
// Use: NewClient, then Run in a goroutine (it owns every goroutine of the
// client and returns when ctx ends or Close is called); Send and Cancel
// from anywhere; read Events until it is closed, and call Delivered for
// every event with Final set.
type Client struct {
	cfg      ClientConfig
	urlIdx   atomic.Uint64 // which of URL and Fallbacks is dialled (dialURL)
	log      *slog.Logger
	dialer   *websocket.Dialer
	header   http.Header
	outbox   Outbox
	ownsBox  bool
	events   chan Event
	queue    *eventQueue
	closing  chan struct{}
	runDone  chan struct{}
	closeErr error

	sendMu sync.Mutex // serializes Send: outbox order = send order

	mu       sync.Mutex
	runState int // 0 not run, 1 running, 2 finished
	closed   bool
	list     []*outMsg          // messages in the outbox, in order (confirmed ones removed lazily)
	stale    int                // confirmed messages still in list
	msgs     map[string]*outMsg // messages in the outbox by id
	seq      uint64             // outMsg.seq of the newest message
	unconf   int                // answered messages waiting for Delivered
	sess     *session           // the connected session, if any
	status   Status

	// Notices and the screen mirror (see notices.go); guarded by mu.
	shown    *shownStore          // ids of the notices drawn, kept in the state dir
	received map[string]time.Time // notices handed to the caller, not yet shown: their expiry
	recvList []string             // received's ids, oldest first (bounds it)
	acks     []string             // notice_ack frames to send once connected
	screen   *Screen              // the latest screen (SetScreen)
	screenQ  bool                 // screen not sent yet on the live session

	// Fleet operations (see fleetclient.go); guarded by mu but fleetIn.
	fleetIn         chan Frame
	updStatus       []byte // the latest update_status, sent on every connect
	setAck          []byte // the latest settings_ack, sent on every connect
	updQ, setAckQ   bool   // not sent yet on the live session
	busyFrame       []byte // the latest busy, sent on every connect (busy.go)
	busyQ           bool   // busyFrame not sent yet on the live session
	results         [][]byte
	health          []byte            // the latest health report, for the live session only (Report)
	tags            map[string]string // for connect (ClientConfig.Tags, then SetTags)
	settingsVersion atomic.Int64

	notices, noticesExpired, noticesReacked, noticeAcks, screens, screensCoalesced atomic.Int64

	dials, sessions, sent, resent, replies, dupReplies, busy atomic.Int64
	deltas, deltasIgnored                                    atomic.Int64
	pongs                                                    atomic.Int64
	questions, answersAcked                                  atomic.Int64
	// ackedAnswers: the answers acked lately (message id -> question id,
	// at most maxAckedAnswers, oldest forgotten first), so that a refusal
	// the server sends after the ack (a cluster's edge acks what it
	// stored; the run's node refuses it after) still names its question.
	// Guarded by mu.
	ackedAnswers     map[string]string
	ackedAnswerOrder []string
	rttNanos         atomic.Int64 // the last heartbeat's round trip
}

// outMsg is one message of the outbox; guarded by Client.mu.
type outMsg struct {
	id, text string
	// questionID and optionID: an answer (Client.Answer), sent as an
	// answer frame; its ack is its final answer (clientchoice.go).
	questionID, optionID string
	seq                  uint64 // outbox order
	sends                int
	answered             bool // its final answer went to the caller
	done                 bool // the caller confirmed it: out of the outbox
}

// NewClient checks cfg and opens the outbox (the file outbox in StateDir
// unless cfg.Outbox is set). Nothing is dialled before Run.
func NewClient(cfg ClientConfig) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("peer_id", cfg.PeerID)
	c := &Client{cfg: cfg, log: log, queue: newEventQueue(cfg.Window), events: make(chan Event, cfg.EventBuffer),
		closing: make(chan struct{}), runDone: make(chan struct{}), msgs: map[string]*outMsg{}, received: map[string]time.Time{},
		fleetIn: make(chan Frame, fleetBuffer), tags: cfg.Tags}
	c.settingsVersion.Store(cfg.SettingsVersion)
	if c.dialer, err = cfg.dialer(); err != nil {
		return nil, err
	}
	c.header = http.Header{}
	if cfg.Token != "" {
		c.header.Set("Authorization", "Bearer "+cfg.Token)
	}
	c.outbox = cfg.Outbox
	if c.outbox == nil {
		fo, err := OpenFallbackOutbox(cfg.StateDir, FallbackOptions{FileOutboxOptions: FileOutboxOptions{Logger: log},
			RetryEvery: cfg.StorageRetry, OnChange: c.storageChanged})
		if err != nil {
			return nil, err
		}
		c.outbox, c.ownsBox = fo, true
	}
	c.shown = openShownStore(cfg.StateDir, log, time.Now)
	for _, e := range c.outbox.Pending() {
		c.seq++
		m := &outMsg{id: e.ID, text: e.Text, questionID: e.QuestionID, optionID: e.OptionID, seq: c.seq}
		c.list = append(c.list, m)
		c.msgs[e.ID] = m
	}
	c.status.Pending = len(c.msgs)
	return c, nil
}

func (cfg ClientConfig) withDefaults() (ClientConfig, error) {
	var errs []error
	if cfg.URL == "" {
		errs = append(errs, errors.New("URL is required (ws://host:port/api/channels/ID/ws)"))
	}
	for i, raw := range append([]string{cfg.URL}, cfg.Fallbacks...) {
		if raw == "" && i == 0 {
			continue
		}
		what := "URL"
		if i > 0 {
			what = fmt.Sprintf("Fallbacks[%d]", i-1)
		}
		u, err := url.Parse(raw)
		switch {
		case raw == "":
			errs = append(errs, fmt.Errorf("%s is empty", what))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		case u.Scheme != "ws" && u.Scheme != "wss":
			errs = append(errs, fmt.Errorf("%s %q: scheme must be ws or wss", what, raw))
		case u.Host == "":
			errs = append(errs, fmt.Errorf("%s %q has no host", what, raw))
		}
	}
	if cfg.PeerID == "" {
		errs = append(errs, errors.New("PeerID is required"))
	}
	if cfg.Outbox == nil && cfg.StateDir == "" {
		errs = append(errs, errors.New("StateDir (for the outbox) or Outbox is required"))
	}
	if cfg.RetryJitter < 0 || cfg.RetryJitter >= 1 {
		errs = append(errs, fmt.Errorf("RetryJitter must be in [0, 1), got %v", cfg.RetryJitter))
	}
	for name, d := range map[string]time.Duration{"Heartbeat": cfg.Heartbeat, "PongTimeout": cfg.PongTimeout,
		"WriteTimeout": cfg.WriteTimeout, "ConnectTimeout": cfg.ConnectTimeout, "RetryInitial": cfg.RetryInitial,
		"RetryMax": cfg.RetryMax, "StableAfter": cfg.StableAfter, "StorageRetry": cfg.StorageRetry} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %v", name, d))
		}
	}
	if cfg.Window < 0 || cfg.EventBuffer < 0 || cfg.MaxStreamBytes < 0 {
		errs = append(errs, errors.New("Window, EventBuffer and MaxStreamBytes must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("link: client config: %w", err)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.Heartbeat, DefaultHeartbeat)
	def(&cfg.PongTimeout, DefaultPongTimeout)
	def(&cfg.WriteTimeout, DefaultWriteTimeout)
	def(&cfg.ConnectTimeout, DefaultConnectTimeout)
	def(&cfg.RetryInitial, DefaultRetryInitial)
	def(&cfg.RetryMax, DefaultRetryMax)
	def(&cfg.StableAfter, DefaultStableAfter)
	if cfg.RetryJitter == 0 {
		cfg.RetryJitter = DefaultRetryJitter
	}
	if cfg.RetryInitial > cfg.RetryMax {
		cfg.RetryInitial = cfg.RetryMax
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Capabilities == nil {
		cfg.Capabilities = DefaultCapabilities()
	}
	if cfg.Stream && !slices.Contains(cfg.Capabilities, CapStream) {
		cfg.Capabilities = append(slices.Clone(cfg.Capabilities), CapStream)
	}
	cfg.Stream = slices.Contains(cfg.Capabilities, CapStream)
	if cfg.MaxStreamBytes == 0 {
		cfg.MaxStreamBytes = DefaultMaxStreamBytes
	}
	return cfg, nil
}

func (cfg ClientConfig) dialer() (*websocket.Dialer, error) {
	tlsConf, err := cfg.dialTLSConfig() // tls.go
	if err != nil {
		return nil, err
	}
	netDial := cfg.NetDialContext
	if netDial == nil {
		netDial = (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	return &websocket.Dialer{
		NetDialContext:   netDial,
		HandshakeTimeout: cfg.ConnectTimeout,
		TLSClientConfig:  tlsConf,
		ReadBufferSize:   2048,
		WriteBufferSize:  2048,
	}, nil
}

// Events delivers the client's events in order. It is closed when Run
// returns (or by Close when Run never ran); Run's last state (closed, with
// its reason) is its last event when the reader is waiting for one then,
// and in Status always: Run does not wait for a reader that stopped. Read it, and confirm every
// event with Final set by calling Delivered once it is handled: only then
// does its message leave the outbox. Events the caller has not read yet
// wait in a bounded queue (progress and acks coalesced per message, state
// and error events capped; see ClientStats.MaxQueuedEvents), so a slow
// reader never makes the client grow without bound.
func (c *Client) Events() <-chan Event { return c.events }

// Delivered confirms that the caller has handled the final answer to
// messageID (an event with Final set): the message leaves the outbox and
// frees its place in the window. A final answer not confirmed when the
// process ends is resent at the next start. ErrNotAnswered: messageID has
// no final answer waiting (unknown, not answered yet, or confirmed
// already). An error of the outbox (disk) is returned after the message
// has left the client's memory: it is not shown again in this run.
func (c *Client) Delivered(messageID string) error {
	c.mu.Lock()
	m := c.msgs[messageID]
	if m == nil || !m.answered {
		c.mu.Unlock()
		return ErrNotAnswered
	}
	m.done = true
	delete(c.msgs, messageID)
	c.unconf--
	c.status.Pending = len(c.msgs)
	c.stale++
	if c.stale > 256 && c.stale > len(c.list)/2 {
		c.compactLocked()
	}
	if s := c.sess; s != nil {
		s.wake() // a place in the window is free
	}
	c.mu.Unlock()
	if err := c.outbox.Done(messageID); err != nil {
		if errors.Is(err, ErrOutboxClosed) {
			return ErrClosed
		}
		return err
	}
	return nil
}

// Pending lists the messages in the outbox (unanswered, or answered and
// not yet confirmed), oldest first: what a screen shows as queued after a
// restart.
func (c *Client) Pending() []OutboxEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []OutboxEntry
	for _, m := range c.list {
		if !m.done {
			out = append(out, OutboxEntry{ID: m.id, Text: m.text, QuestionID: m.questionID, OptionID: m.optionID})
		}
	}
	return out
}

// Send stores text in the outbox (durably, for the file outbox) and
// returns its message id; the message goes out as soon as the link is up,
// and again after every reconnect until it is answered. Send works before
// Run and while offline.
func (c *Client) Send(ctx context.Context, text string) (string, error) {
	if strings.TrimSpace(text) == "" {
		return "", ErrBlankText
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.store(func() (OutboxEntry, error) { return c.outbox.Add(text) })
}

// store adds an entry to the outbox (add; c.sendMu held) and queues it
// for sending: Send's messages and Answer's answers.
func (c *Client) store(add func() (OutboxEntry, error)) (string, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return "", ErrClosed
	}
	e, err := add()
	if err != nil {
		if errors.Is(err, ErrOutboxClosed) {
			return "", ErrClosed
		}
		return "", err
	}
	c.mu.Lock()
	c.seq++
	m := &outMsg{id: e.ID, text: e.Text, questionID: e.QuestionID, optionID: e.OptionID, seq: c.seq}
	c.list = append(c.list, m)
	c.msgs[m.id] = m
	c.status.Pending = len(c.msgs)
	if s := c.sess; s != nil {
		s.toSend = append(s.toSend, m)
		s.wake()
	}
	c.mu.Unlock()
	return e.ID, nil
}

// Cancel asks the server to interrupt the run of an unanswered message
// (capability "cancel"). It needs a live link: offline it returns
// ErrNotConnected. The answer comes as events: the reply with
// finish_reason "cancelled", or an error (code "unknown_run") when the run
// was not queued or running any more.
func (c *Client) Cancel(ctx context.Context, messageID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.msgs[messageID] == nil || c.msgs[messageID].answered || c.msgs[messageID].questionID != "":
		return ErrUnknownMessage
	case c.sess == nil:
		return ErrNotConnected
	}
	c.sess.cancels = append(c.sess.cancels, messageID)
	c.sess.wake()
	return nil
}

// Status returns the link state and the number of unanswered messages.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats {
	c.mu.Lock()
	pending, unconf := len(c.msgs), c.unconf
	c.mu.Unlock()
	queued, high, dropped := c.queue.stats()
	return ClientStats{Dials: c.dials.Load(), Sessions: c.sessions.Load(), Sent: c.sent.Load(),
		Resent: c.resent.Load(), Replies: c.replies.Load(), DuplicateReplies: c.dupReplies.Load(),
		Busy: c.busy.Load(), Pending: pending, Unconfirmed: unconf,
		Notices: c.notices.Load(), NoticesExpired: c.noticesExpired.Load(), NoticesReacked: c.noticesReacked.Load(),
		Pongs: c.pongs.Load(), HeartbeatRTT: time.Duration(c.rttNanos.Load()), NoticeAcks: c.noticeAcks.Load(), Screens: c.screens.Load(), ScreensCoalesced: c.screensCoalesced.Load(),
		Deltas: c.deltas.Load(), DeltasIgnored: c.deltasIgnored.Load(),
		Questions: c.questions.Load(), Answers: c.answersAcked.Load(),
		QueuedEvents: queued, MaxQueuedEvents: high, DroppedEvents: dropped}
}

// Close stops the client: the connection is closed, Run returns, Events
// is closed and the outbox (when the client opened it) is closed. It
// waits for Run to return; unanswered messages stay in the outbox for the
// next start.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.runDone
		return c.closeErr
	}
	c.closed = true
	close(c.closing)
	notRun := c.runState == 0
	if notRun {
		c.runState = 2
	}
	c.mu.Unlock()
	if notRun {
		c.finish()
	}
	<-c.runDone
	return c.closeErr
}

// storageChanged reports the state of the outbox's storage (Status and
// an EventStorage; the FallbackOutbox orders the calls).
func (c *Client) storageChanged(err error) {
	c.mu.Lock()
	c.status.Storage = ""
	if err != nil {
		c.status.Storage = err.Error()
	}
	c.mu.Unlock()
	c.emit(Event{Kind: EventStorage, Err: err})
}

// finish closes what Run (or Close, without Run) leaves behind.
func (c *Client) finish() {
	close(c.events)
	close(c.fleetIn)
	if c.ownsBox {
		c.closeErr = c.outbox.Close()
	}
	close(c.runDone)
}

// Run keeps the link up until ctx ends or Close is called: dial, connect,
// resend the unanswered messages, heartbeat, and after any failure wait
// (backoff) and dial again, forever. It returns ctx.Err() when ctx ended,
// nil after Close. Run may be called once.
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.runState != 0:
		c.mu.Unlock()
		return errors.New("link: Run called twice")
	}
	c.runState = 1
	c.mu.Unlock()

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopDispatch := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		select {
		case <-c.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() { defer wg.Done(); c.dispatch(stopDispatch) }()

	c.loop(ctx)

	reason := "closed"
	if parent.Err() != nil {
		reason = "context ended: " + parent.Err().Error()
	}
	c.setState(Event{State: StateClosed, Reason: reason})
	cancel()
	close(stopDispatch)
	wg.Wait()
	c.mu.Lock()
	c.runState = 2
	c.mu.Unlock()
	c.finish()
	if parent.Err() != nil {
		return parent.Err()
	}
	return nil
}

// dispatch hands queued events to the Events channel until stop; what is
// left then goes only as far as the channel's buffer takes it (a final
// answer left behind stays in the outbox: it was never confirmed).
func (c *Client) dispatch(stop <-chan struct{}) {
	for {
		e, ok := c.queue.pop()
		if !ok {
			select {
			case <-c.queue.notify:
				continue
			case <-stop:
			}
			for { // stopping: flush what fits
				e, ok := c.queue.pop()
				if !ok {
					return
				}
				select {
				case c.events <- e:
				default:
					return
				}
			}
		}
		select {
		case c.events <- e:
		case <-stop:
			select {
			case c.events <- e:
			default:
			}
			return
		}
	}
}

func (c *Client) emit(e Event) { c.queue.push(e) }

// setState records and reports a state change.
func (c *Client) setState(e Event) {
	e.Kind = EventState
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	c.mu.Lock()
	c.status.State, c.status.Attempt, c.status.NextTry = e.State, e.Attempt, e.NextTry
	c.status.SessionID = e.SessionID
	if e.Reason != "" || e.State == StateConnected {
		c.status.Reason = e.Reason
	}
	c.mu.Unlock()
	c.emit(e)
}

// newBackoff builds the reconnect policy. backoff randomizes around its
// current interval (±RetryJitter), so the interval is capped at
// RetryMax/(1+RetryJitter) to keep every randomized wait within RetryMax.
func (c *Client) newBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(c.cfg.RetryInitial),
		backoff.WithRandomizationFactor(c.cfg.RetryJitter),
		backoff.WithMultiplier(2),
		backoff.WithMaxInterval(time.Duration(float64(c.cfg.RetryMax)/(1+c.cfg.RetryJitter))),
		backoff.WithMaxElapsedTime(0), // never give up
	)
	return b
}

func (c *Client) nextWait(b *backoff.ExponentialBackOff) time.Duration {
	d := b.NextBackOff()
	if d == backoff.Stop || d > c.cfg.RetryMax {
		d = c.cfg.RetryMax
	}
	return d
}

// loop dials, serves a session, waits, and dials again until ctx ends.
func (c *Client) loop(ctx context.Context) {
	b := c.newBackoff()
	attempt := 0
	reason := ""
	ringTried := 0 // URLs of the ring dialled in vain since the last wait
	for first := true; ctx.Err() == nil; first = false {
		if ringTried > 0 && ringTried <= len(c.cfg.Fallbacks) {
			// Another URL of the ring is still untried: dial it now
			// (a dead edge's devices move to a live one at once).
		} else if !first {
			ringTried = 0
			wait := c.nextWait(b)
			// One clock reading for both: NextTry - Time is the wait
			// chosen (two readings differed by more than the 20 ms wait
			// under qemu beside stress-ng: TestClientBackoffWhileServerDown
			// saw a wait of -12 ms).
			now := time.Now()
			next := now.Add(wait)
			c.setState(Event{State: StateWaiting, Attempt: attempt, NextTry: next, Reason: reason, Time: now})
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		attempt++
		c.setState(Event{State: StateConnecting, Attempt: attempt})
		var up time.Duration
		up, reason = c.connect(ctx)
		switch {
		case up == 0 && len(c.cfg.Fallbacks) > 0:
			ringTried++
		case up >= c.cfg.RetryInitial && len(c.cfg.Fallbacks) > 0:
			// A link that was up dropped: its server may be gone (a
			// cluster edge killed, or cut off and sending its devices
			// away). The next URL of the ring is dialled at once, then
			// the others; the backoff comes after the whole ring. A link
			// that dropped sooner (a server that closes at once, two
			// devices with one peer id replacing each other) waits first.
			c.urlIdx.Add(1)
			ringTried = 1
		default:
			ringTried = 0
		}
		if up > 0 {
			attempt = 0
			c.log.Info("link down", "after", up.Round(time.Millisecond), "reason", reason)
		} else if ctx.Err() == nil {
			c.log.Debug("dial failed", "attempt", attempt, "reason", reason)
		}
		if up >= c.cfg.StableAfter {
			b.Reset()
		}
	}
}

// connect dials once and, when that works, serves the session until it
// ends. up is how long it stayed connected (0: never got connected).
func (c *Client) connect(ctx context.Context) (up time.Duration, reason string) {
	c.dials.Add(1)
	// gorilla only applies deadlines while dialing; closing the socket
	// is what makes Close interrupt a handshake that hangs.
	var held heldConn
	d := *c.dialer
	d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := c.dialer.NetDialContext(ctx, network, addr)
		if err == nil {
			held.set(conn)
		}
		return conn, err
	}
	stop := context.AfterFunc(ctx, held.close)
	dctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	target := c.dialURL()
	ws, resp, err := d.DialContext(dctx, target, c.header)
	cancel()
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return 0, "closed by the device"
		}
		reason := describeDialError(err, resp)
		if len(c.cfg.Fallbacks) > 0 {
			c.urlIdx.Add(1) // the next URL of the ring next time
			reason = target + ": " + reason
		}
		return 0, reason
	}
	s := newSession(c, ws)
	return s.run(ctx)
}

// dialURL is the URL to dial now: URL, or the Fallbacks ring's current one.
func (c *Client) dialURL() string {
	if len(c.cfg.Fallbacks) == 0 {
		return c.cfg.URL
	}
	i := int(c.urlIdx.Load() % uint64(len(c.cfg.Fallbacks)+1))
	if i == 0 {
		return c.cfg.URL
	}
	return c.cfg.Fallbacks[i-1]
}

// heldConn is the socket of a dial in progress, closed if the client
// stops meanwhile.
type heldConn struct {
	mu     sync.Mutex
	conn   net.Conn
	closed bool
}

func (h *heldConn) set(c net.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conn = c
	if h.closed {
		c.Close()
	}
}

func (h *heldConn) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.conn != nil {
		h.conn.Close()
	}
}

func describeDialError(err error, resp *http.Response) string {
	if msg, ok := describeTLSError(err); ok {
		return "dial: " + msg
	}
	if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		msg := fmt.Sprintf("dial: server answered HTTP %s", resp.Status)
		if s := strings.TrimSpace(string(body)); s != "" {
			msg += ": " + s
		}
		return msg
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "dial: no answer within the connect timeout (" + err.Error() + ")"
	}
	return "dial: " + err.Error()
}

// register makes s the live session and gives it every unanswered
// message, in order, to (re)send. Answered messages waiting for the
// caller's confirmation are not resent: their answer is here already.
func (c *Client) register(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.compactLocked()
	s.toSend = nil
	for _, m := range c.list {
		if !m.answered {
			s.toSend = append(s.toSend, m)
		}
	}
	c.sess = s
	c.screenQ = c.screen != nil // the server gets the current screen on every connect
	c.updQ, c.setAckQ = c.updStatus != nil, c.setAck != nil
	c.busyQ = c.busyFrame != nil
	c.results = nil // the requests they answer died with the last connection
	c.health = nil  // its figures were of then: the caller reports anew
}

// compactLocked drops the confirmed messages from c.list.
func (c *Client) compactLocked() {
	kept := c.list[:0]
	for _, m := range c.list {
		if !m.done {
			kept = append(kept, m)
		}
	}
	clear(c.list[len(kept):])
	c.list, c.stale = kept, 0
}

// answerLocked marks m finally answered: its answer goes to the caller,
// and it waits there for Delivered. False when m had its answer already.
func (c *Client) answerLocked(m *outMsg) bool {
	if m == nil || m.answered {
		return false
	}
	m.answered = true
	c.unconf++
	return true
}

func (c *Client) unregister(s *session) {
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
	}
	c.mu.Unlock()
}

// complete takes the reply to a message: the first one for an unanswered
// id becomes an EventReply; any later one is dropped.
func (c *Client) complete(reply *Message) {
	c.mu.Lock()
	ok := c.answerLocked(c.msgs[reply.MessageID])
	c.mu.Unlock()
	if !ok {
		c.dupReplies.Add(1)
		return
	}
	c.replies.Add(1)
	c.queue.dropProgress(reply.MessageID) // and its deltas: the reply supersedes them
	c.emit(Event{Kind: EventReply, MessageID: reply.MessageID, Reply: reply, Final: true})
}

// refuse gives up on a message the server refuses for good.
func (c *Client) refuse(e *Error) bool {
	c.mu.Lock()
	m := c.msgs[e.MessageID]
	ok := c.answerLocked(m)
	qid := ""
	if ok {
		qid = m.questionID
	}
	if !ok {
		qid = c.ackedAnswers[e.MessageID]
		delete(c.ackedAnswers, e.MessageID)
	}
	c.mu.Unlock()
	if !ok {
		if qid == "" || !isAnswerRefusal(e.Code) {
			return false
		}
		// Refused after its ack: the ack was the answer's final event;
		// this one says what became of it (not final again).
		c.emit(Event{Kind: EventError, MessageID: e.MessageID, QuestionID: qid, Code: e.Code, Err: fmt.Errorf("server refused the answer %s: %s", e.MessageID, e.Error)})
		return true
	}
	c.queue.dropProgress(e.MessageID)
	what := "message"
	if qid != "" {
		what = "the answer"
	}
	c.emit(Event{Kind: EventError, MessageID: e.MessageID, QuestionID: qid, Code: e.Code, Err: fmt.Errorf("server refused %s %s: %s", what, e.MessageID, e.Error), Final: true})
	return true
}

// unanswered reports whether id is a message still waiting for its answer.
func (c *Client) unanswered(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.msgs[id]
	return m != nil && !m.answered
}

// requeue puts a message refused as busy back into s's send queue, in
// outbox order, unless it was answered meanwhile.
func (c *Client) requeue(s *session, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.msgs[id]
	if m == nil || m.answered {
		return
	}
	i := 0
	for i < len(s.toSend) && s.toSend[i].seq < m.seq {
		i++
	}
	s.toSend = slices.Insert(s.toSend, i, m)
}
