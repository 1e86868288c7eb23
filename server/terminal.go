package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/events"
)

// Close codes the terminal adapter sends (4000-4999: application codes).
const (
	CloseReplaced     = 4001 // a newer connection for the same peer_id took over
	CloseUnauthorized = 4003 // token missing or wrong
	CloseSlowClient   = 4008 // send queue full or write timed out
)

const (
	writeTimeout    = 10 * time.Second // per frame; a client slower than this is dropped
	closeGrace      = 2 * time.Second  // wait for the peer's close frame
	readBufferBytes = 1024             // per connection; frames larger than this are read in pieces
)

// idRE is what peer_id and thread_id may contain: they become part of the
// session id (':'-separated) and of the session log's file name.
var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)

// writeBufferPool shares write buffers between connections: an idle
// connection holds none.
var writeBufferPool = &sync.Pool{}

// terminalAdapter is the TerminalWebSocketAdapter of the spec for one
// channel: it owns the channel's connections.
type terminalAdapter struct {
	id        string
	cfg       config.Channel
	heartbeat time.Duration
	rt        *Runtime
	router    *router
	ch        *channel
	log       *slog.Logger
	upgrader  websocket.Upgrader

	mu      sync.Mutex
	peers   map[string]*wsConn   // connected peers
	conns   map[*wsConn]struct{} // every open connection
	stopped bool
	wg      sync.WaitGroup // connection handlers
}

func newTerminalAdapter(rt *Runtime, r *router, ch *channel, log *slog.Logger) *terminalAdapter {
	a := &terminalAdapter{
		id: ch.id, cfg: ch.cfg, rt: rt, router: r, ch: ch, log: log.With("channel", ch.id),
		heartbeat: time.Duration(ch.cfg.Config.HeartbeatSeconds) * time.Second,
		peers:     map[string]*wsConn{}, conns: map[*wsConn]struct{}{},
	}
	a.upgrader = websocket.Upgrader{
		ReadBufferSize:  readBufferBytes,
		WriteBufferPool: writeBufferPool,
		// Terminals are not browsers; any Origin (or none) is fine.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			http.Error(w, "websocket upgrade failed: "+reason.Error(), status)
		},
	}
	return a
}

// idleTimeout is how long a connection may stay silent: 2.5 heartbeats.
func (a *terminalAdapter) idleTimeout() time.Duration { return a.heartbeat * 5 / 2 }

// ServeHTTP upgrades GET /api/channels/{channel_id}/ws and serves the
// connection until it ends.
func (a *terminalAdapter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	headerToken := ""
	if tokens := a.cfg.Config.Tokens; tokens.Enabled() {
		if auth := r.Header.Get("Authorization"); auth != "" {
			tok, ok := strings.CutPrefix(auth, "Bearer ")
			if !ok || !tokens.Known(tok) {
				a.ch.events.Add(events.Event{Event: events.TerminalRefused,
					Detail: "401 before upgrade: unknown bearer token from " + r.RemoteAddr})
				http.Error(w, "unauthorized: the bearer token is not valid for channel "+a.id, http.StatusUnauthorized)
				return
			}
			headerToken = tok
		}
	}
	a.mu.Lock()
	stopped := a.stopped
	a.mu.Unlock()
	if stopped {
		http.Error(w, "channel "+a.id+" is stopping", http.StatusServiceUnavailable)
		return
	}
	ws, err := a.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered with the reason
	}
	c := &wsConn{a: a, ws: ws, remote: r.RemoteAddr, headerToken: headerToken, sendMax: a.cfg.Config.SendQueue}
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		ws.Close()
		return
	}
	a.conns[c] = struct{}{}
	a.wg.Add(1)
	a.mu.Unlock()
	// The connection gets a goroutine of its own and the HTTP handler
	// returns: net/http then lets go of its request, response and 8 KiB
	// of buffers, which an idle device would otherwise hold for hours.
	go func() {
		defer a.wg.Done()
		c.serve(context.Background())
	}()
}

// Send implements Adapter.
func (a *terminalAdapter) Send(out bus.Outbound) bool {
	a.mu.Lock()
	c := a.peers[out.PeerID]
	a.mu.Unlock()
	if c == nil {
		return false
	}
	var f link.Frame
	switch out.Kind {
	case bus.Progress:
		if !c.progress {
			return false
		}
		f = &link.Progress{MessageID: out.MessageID, Text: out.Text}
	default:
		text := out.Text
		for _, m := range out.Media {
			text += "\n[file: " + baseName(m) + "]"
		}
		f = &link.Message{Role: link.RoleAssistant, MessageID: out.MessageID, RunID: out.RunID,
			Text: text, FinishReason: out.FinishReason}
	}
	return c.send(f)
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
	conns := make([]*wsConn, 0, len(a.conns))
	for c := range a.conns {
		conns = append(conns, c)
	}
	a.mu.Unlock()
	for _, c := range conns {
		c.closeWith(websocket.CloseGoingAway, "server shutting down; reconnect later")
	}
	a.wg.Wait()
	a.ch.events.Add(events.Event{Event: events.AdapterStopped})
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

// unregister forgets c; it reports whether c was its peer's live connection.
func (a *terminalAdapter) unregister(c *wsConn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.conns, c)
	if c.peerID != "" && a.peers[c.peerID] == c {
		delete(a.peers, c.peerID)
		return true
	}
	return false
}

// wsConn is one device connection: the handler goroutine reads; a writer
// goroutine, started when frames are queued and gone when the queue is
// empty, writes. At most one writer runs at a time.
type wsConn struct {
	a           *terminalAdapter
	ws          *websocket.Conn
	remote      string
	headerToken string
	sendMax     int

	// Set once by the reader at connect, before register publishes c.
	peerID, threadID, userID, deviceName, sessionKey string
	progress, cancel                                 bool
	caps                                             []string

	mu         sync.Mutex
	queue      [][]byte
	writing    bool
	closing    bool   // no more frames are queued (closing or dropped)
	dead       bool   // the writer stops at once
	closeFrame []byte // written by the writer once the queue is empty
	dropCause  string // why the server ended it, for the disconnect event
	writerWG   sync.WaitGroup
}

func (c *wsConn) serve(ctx context.Context) {
	a := c.a
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.ws.SetReadLimit(link.ReadLimit(a.cfg.Config.MaxMessageChars))
	idle := a.idleTimeout()
	reason := "connection closed"
	for {
		c.extendReadDeadline(idle)
		kind, data, err := c.ws.ReadMessage()
		if err != nil {
			reason = describeReadError(err, idle)
			break
		}
		if c.isClosing() {
			continue // draining until the peer answers our close frame
		}
		if kind != websocket.TextMessage {
			c.sendError("", link.CodeBadFrame, "binary frames are not supported: send JSON text frames")
			continue
		}
		c.handle(ctx, data)
	}
	cancel()
	c.mu.Lock()
	c.closing, c.dead = true, true
	if c.dropCause != "" {
		reason = c.dropCause
	}
	c.mu.Unlock()
	c.ws.Close()
	c.writerWG.Wait()
	live := a.unregister(c)
	if c.peerID != "" {
		if live {
			a.rt.metrics.connections.Add(a.id, -1)
		}
		a.ch.events.Add(events.Event{Event: events.TerminalDisconnected, PeerID: c.peerID, SessionID: c.sessionKey, Detail: reason})
		a.log.Debug("terminal disconnected", "peer_id", c.peerID, "reason", reason)
	}
}

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

func (c *wsConn) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

func (c *wsConn) handle(ctx context.Context, data []byte) {
	f, err := link.Decode(data)
	if err != nil {
		c.a.rt.metrics.rejected.Inc(c.a.id)
		c.sendError(messageIDOf(data), link.CodeBadFrame, err.Error())
		return
	}
	switch f := f.(type) {
	case *link.Ping:
		c.send(&link.Pong{})
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
			c.handleMessage(ctx, f)
		}
	case *link.Cancel:
		if c.peerID == "" {
			c.reject(f.MessageID, link.CodeNotConnected, "send a connect frame with your peer_id before cancel frames")
			return
		}
		if !c.a.router.cancel(c.sessionKey, f.MessageID) {
			c.reject(f.MessageID, link.CodeUnknownRun, "cancel: message "+f.MessageID+" is not queued or running")
		}
	default:
		c.reject("", link.CodeBadFrame, fmt.Sprintf("Unsupported websocket frame type: %s (sent by the server, not by a terminal)", f.FrameType()))
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

func (c *wsConn) reject(messageID, code, msg string) {
	c.a.rt.metrics.rejected.Inc(c.a.id)
	c.a.ch.events.Add(events.Event{Event: events.InboundRejected, PeerID: c.peerID, SessionID: c.sessionKey, MessageID: messageID, Detail: msg})
	c.sendError(messageID, code, msg)
}

func (c *wsConn) sendError(messageID, code, msg string) {
	c.send(&link.Error{Error: msg, MessageID: messageID, Code: code})
}

func (c *wsConn) handleConnect(f *link.Connect) {
	a := c.a
	switch {
	case f.PeerID == "":
		c.reject("", link.CodeBadFrame, `connect frame: field "peer_id" is missing or empty`)
		return
	case !idRE.MatchString(f.PeerID):
		c.reject("", link.CodeBadFrame, fmt.Sprintf("connect frame: peer_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + - (starting with a letter or digit)", f.PeerID))
		return
	case f.ThreadID != "" && !idRE.MatchString(f.ThreadID):
		c.reject("", link.CodeBadFrame, fmt.Sprintf("connect frame: thread_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + -", f.ThreadID))
		return
	case c.peerID != "" && c.peerID != f.PeerID:
		c.reject("", link.CodeBadFrame, fmt.Sprintf("this connection is already connected as peer_id %q; open a new connection for %q", c.peerID, f.PeerID))
		return
	case c.peerID != "": // same peer again: answer again
		c.send(&link.Connected{ChannelID: a.id, SessionID: c.sessionKey, HeartbeatSeconds: a.cfg.Config.HeartbeatSeconds})
		return
	}
	if tokens := a.cfg.Config.Tokens; tokens.Enabled() {
		tok := c.headerToken
		if tok == "" {
			tok = f.Token
		}
		if !tokens.Allows(f.PeerID, tok) {
			why := "no token: send Authorization: Bearer <token> or token in the connect frame"
			if tok != "" {
				why = "the token is not valid for this peer_id"
			}
			a.ch.events.Add(events.Event{Event: events.TerminalRefused, PeerID: f.PeerID, Detail: "connect refused: " + why})
			c.sendError("", link.CodeUnauthorized, "connect refused for peer_id "+f.PeerID+": "+why)
			c.closeWith(CloseUnauthorized, "unauthorized")
			return
		}
	}
	c.peerID, c.threadID, c.userID, c.deviceName = f.PeerID, f.ThreadID, f.UserID, f.DeviceName
	c.sessionKey = SessionKey(a.id, a.cfg.AccountID, f.PeerID, f.ThreadID)
	c.caps = f.Capabilities
	for _, cap := range f.Capabilities {
		switch cap {
		case link.CapProgress:
			c.progress = true
		case link.CapCancel:
			c.cancel = true
		}
	}
	// connected goes out before register makes c reachable by Send, so no
	// reply can overtake it.
	c.send(&link.Connected{ChannelID: a.id, SessionID: c.sessionKey, HeartbeatSeconds: a.cfg.Config.HeartbeatSeconds})
	if !a.register(c) {
		a.rt.metrics.connections.Add(a.id, 1)
	}
	a.rt.metrics.connects.Inc(a.id)
	a.ch.events.Add(events.Event{Event: events.TerminalConnected, PeerID: f.PeerID, SessionID: c.sessionKey,
		Detail: fmt.Sprintf("device_name=%q capabilities=%v remote=%s", f.DeviceName, f.Capabilities, c.remote)})
}

func (c *wsConn) handleMessage(ctx context.Context, f *link.Message) {
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
	thread := c.threadID
	key := c.sessionKey
	if f.ThreadID != "" && f.ThreadID != c.threadID {
		if !idRE.MatchString(f.ThreadID) {
			c.reject(f.MessageID, link.CodeBadMessage, fmt.Sprintf("message %s: thread_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + -", f.MessageID, f.ThreadID))
			return
		}
		thread = f.ThreadID
		key = SessionKey(a.id, a.cfg.AccountID, c.peerID, thread)
	}
	user := c.userID
	if f.UserID != "" {
		user = f.UserID
	}
	in := bus.Inbound{ChannelID: a.id, AccountID: a.cfg.AccountID, PeerID: c.peerID, ThreadID: thread, UserID: user,
		SessionKey: key, MessageID: f.MessageID, Text: f.Text, Received: time.Now(), Capabilities: c.caps}
	err := a.rt.AcceptInbound(ctx, in, func(res AcceptResult) {
		c.send(&link.Ack{MessageID: f.MessageID, SessionID: key, Accepted: true,
			Duplicate: res.Duplicate, Pending: res.Pending, Reply: res.Reply})
	})
	if err != nil {
		a.log.Error("message not accepted", "peer_id", c.peerID, "message_id", f.MessageID, "err", err)
		c.reject(f.MessageID, "unavailable", "message "+f.MessageID+" was not accepted ("+err.Error()+"); send it again")
	}
}

// send queues f for the writer. It never blocks: a full queue drops the
// connection (the device resends what it misses when it reconnects).
func (c *wsConn) send(f link.Frame) bool {
	b, err := link.Encode(f)
	if err != nil {
		c.a.log.Error("encoding frame", "err", err)
		return false
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return false
	}
	if len(c.queue) >= c.sendMax {
		c.mu.Unlock()
		c.drop(fmt.Sprintf("send queue full (%d frames): client too slow, dropped", c.sendMax))
		return false
	}
	c.queue = append(c.queue, b)
	c.startWriterLocked()
	c.mu.Unlock()
	return true
}

func (c *wsConn) startWriterLocked() {
	if !c.writing {
		c.writing = true
		c.writerWG.Add(1)
		go c.writeLoop()
	}
}

// writeLoop writes the queue, then the close frame if one is due, and
// exits when there is nothing left.
func (c *wsConn) writeLoop() {
	defer c.writerWG.Done()
	for {
		c.mu.Lock()
		if c.dead {
			c.writing, c.queue = false, nil
			c.mu.Unlock()
			return
		}
		if len(c.queue) == 0 {
			cf := c.closeFrame
			c.closeFrame = nil
			if cf == nil {
				c.writing = false
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			_ = c.ws.WriteControl(websocket.CloseMessage, cf, time.Now().Add(time.Second))
			c.mu.Lock()
			// Give the peer a moment to answer the close frame.
			_ = c.ws.SetReadDeadline(time.Now().Add(closeGrace))
			c.writing = false
			c.mu.Unlock()
			return
		}
		batch := c.queue
		c.queue = nil
		c.mu.Unlock()
		for _, b := range batch {
			_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
			if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
				c.drop("write failed: " + err.Error())
				break
			}
		}
	}
}

// extendReadDeadline gives a connection that is not closing another idle
// period.
func (c *wsConn) extendReadDeadline(idle time.Duration) {
	c.mu.Lock()
	if !c.closing {
		_ = c.ws.SetReadDeadline(time.Now().Add(idle))
	}
	c.mu.Unlock()
}

// drop tears the connection down at once (slow or broken client).
func (c *wsConn) drop(cause string) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.closing, c.dead = true, true
	if c.dropCause == "" {
		c.dropCause = cause
	}
	c.mu.Unlock()
	c.a.rt.metrics.dropped.Inc(c.a.id)
	c.a.log.Warn("dropping terminal connection", "peer_id", c.peerID, "cause", cause)
	_ = c.ws.NetConn().Close()
}

// closeWith stops new frames, and has the writer send what is queued and
// then a close frame saying why; the reader waits a moment for the peer's
// answer before the socket is closed.
func (c *wsConn) closeWith(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.closing = true
	c.dropCause = reason
	c.closeFrame = websocket.FormatCloseMessage(code, reason)
	c.startWriterLocked()
}
