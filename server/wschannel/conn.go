package wschannel

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/identity"
	"termlink/server/wschannel/readiness"
)

// wsConn is one device connection, in gorilla's chat shape: the reader
// (its steps, one at a time, on the stepper's workers: handed over by the
// readiness loop when the socket has data, poll.go, or by serve, the
// connection's own goroutine where there is no loop) owns every read and
// the read deadlines; the writer
// (writePump) owns every write, the write deadlines (through flushConn)
// and the close frame. Nothing else touches the socket. Unlike the chat
// example's, the writer does not wait parked while there is nothing to
// write: it is handed to one of the adapter's warm writer workers
// (stepper.go) when something is queued and returns when all is written
// (still one at a time, never two: writing says one runs), so an idle
// connection costs no goroutine (one without the readiness loop) and no
// buffers, and a busy one does not
// start a goroutine (and grow its stack) per batch. When no writer runs,
// the reader writes the frames it queues itself (enqueue: a message's
// ack, a pong, connected), as the writer for that one batch, instead of
// waking a worker for it. Acks, errors and
// replies are encoded into pooled buffers that go back once written.
//
// A message a full waiting bound refuses (router.Admission: the session's
// maxWaitingPerSession or the server's maxWaitingRuns) is held, not
// answered busy: the reader stops reading the device (its sends back up
// through TCP, like any slow server) and waits on a goroutine (while held),
// pinning no shared worker, until a place is held for the message (it is
// then accepted, in order: nothing read after it was read yet), the
// connection starts closing (the message is let go unacked: the device
// resends it) or half a heartbeat has passed (then it is answered busy
// as before, and the device's resend and backoff, and its pings, are
// read again). termlink_reader_held_total counts holds,
// termlink_inbound_busy_total the busy answers.
//
// What the writer writes, and what happens when it cannot keep up:
//   - frames: the reader's answers (connected, acks, errors, pongs), at
//     most SendQueue of them. When it is full the reader waits for room
//     and stops reading: the device's own sends back up through TCP.
//   - replies: final replies the runtime hands over (Send, on a run's
//     goroutine), at most 4 x SendQueue (a fast agent answers a burst of messages faster than a socket
//     takes them; each reply is one the device waits for). The
//     runtime serves every connection and must never wait for one, so
//     a full reply queue does not block it: the reply is reported
//     unclaimed (it is already durable in the session log and in dedupe)
//     and its message id is remembered in owed; the writer then sends an
//     error frame with code busy for it, and the device resends the
//     message and gets the reply from dedupe in the ack. Dropping the
//     connection instead would cut off a device that reads; waiting
//     silently for a reconnect would leave it stuck.
//   - latest: progress, one slot per message, the latest text wins; it is
//     never queued beyond that and never counts toward dropping.
//   - streams: deltas (stream.go), one slot per streamed message holding
//     its text so far (the latest wins); the writer takes each slot's new
//     suffix at most once per deltaGap, before the batch's replies; a
//     final reply drops its message's slot. Like progress, never queued
//     and never counted toward dropping.
//   - fleet: fleet operation frames (update, settings, diag; fleet.go),
//     at most maxFleetQueue; past it SendFleet reports false.
//   - notices: pushed by the mailbox side (notices.go), like replies;
//     at most the peer's mailbox bound, since each is an open notice
//     queued once. The writer never calls a store.
//
// What may be written is one state (connState, moved only by nextState):
// open (frames only: replies, progress and notices wait for connected),
// greeted, closing (nothing more is taken; what is queued goes, then the
// close frame) and closed (nothing more is written).
//
// The only reason to drop a device as slow is a write that makes no
// progress for the write timeout.
type wsConn struct {
	a           *terminalAdapter
	box         *wsBox // the Conn frames are read and written with (box.go); nil while idle; guarded by mu, used by its holders
	remote      string
	bearer      *string       // the Authorization header's token until the connect frame is accepted (reader-only); nil: none
	certID      *certIdentity // what the client certificate proved (identity.go); nil without mutual TLS; never changed
	openedNanos int64         // when the connection opened (UnixNano)

	// Set by the reader at connect, before register publishes c.
	peerID, sessionKey               string
	names                            *connNames // the connect's thread_id and user_id; nil: neither (the common case)
	progress, cancel, notice, stream bool
	slot                             int32 // in a.conns (guarded by a.mu); -1: not there
	caps                             []string
	regGen                           uint64 // the registry's generation of this connection

	// Reader-only (the connection's goroutine and its steps, in turn).
	// Fields are ordered so the struct has little padding: an idle
	// connection is this struct and little else.
	served      *servedStep  // a connection with a goroutine of its own (serve): its step's hand-over; nil when polled
	rate        *tokenBucket // the message rate (messageRate), made at the first message
	answers     *tokenBucket // the rate of answer frames (fleet.go), made at the first
	routes      *routeMemory // made at the first message sent to another thread
	held        *heldMessage // a message waiting for room; the device is not read meanwhile
	readClosing bool         // the connection was closing when the read deadline was set
	graceSet    bool         // the read deadline is the close grace
	lookFirst   bool         // pollRead looks for buffered data before it steps (the first time)
	diag        bool         // the device listed diag: its frames may be larger (readLimit)

	// Polled connections (poll.go): nil ph means a goroutine of its own.
	tlsIn  bool // TLS: plaintext may wait inside the tls.Conn
	ph     *readiness.Handle
	dl     readiness.Timer // the deadline of the next read, on the adapter's wheel
	readBy atomic.Int64    // that deadline (UnixNano)

	// Guarded by mu. An idle connection holds no queue and no channel:
	// q is made when something is queued and let go when the writer has
	// written it all (writerStoppedLocked), space and readerDone when
	// someone waits on them.
	mu          sync.Mutex
	state       connState
	writing     bool      // a writer runs (on the adapter's writers)
	readerHolds bool      // the reader holds the box (box.go): it steps, or serve waits for data
	readerEnd   bool      // the reader has stopped (finish)
	q           *outQueue // what waits to be written; nil: nothing
	deltaNext   int64     // UnixNano: deltas may be written again from then (deltaGap after the last batch)
	noticeSeq   uint64    // the last notice queued here (notices.go)
	rare        *connRare // made when first needed: an idle connection has none

	// The connection's socket, in the same object (one allocation,
	// nothing between them): the flushConn the box reads and writes
	// (upgrade.go), and the detached socket under it (poll.go: unused
	// where the socket stays in Go's poller).
	nc    flushConn
	sock  readiness.Conn
	guard guardedConn // the ConnGuard's count of the socket, moved in at the detach (adopt); zero where there is none
}

// connNames are a connect's thread_id and user_id, behind a pointer
// made only for a connect that gave either: most devices give neither,
// and an idle connection's struct is 24 bytes smaller.
type connNames struct{ threadID, userID string }

// setNames keeps the connect's thread and user ids.
func (c *wsConn) setNames(threadID, userID string) {
	c.names = nil
	if threadID != "" || userID != "" {
		c.names = &connNames{threadID: threadID, userID: userID}
	}
}

// threadID is the connect's thread_id ("" for none).
func (c *wsConn) threadID() string {
	if c.names == nil {
		return ""
	}
	return c.names.threadID
}

// userID is the connect's user_id ("" for none).
func (c *wsConn) userID() string {
	if c.names == nil {
		return ""
	}
	return c.names.userID
}

// connRare is what a connection needs only while it waits on its other
// half or ends (guarded by wsConn.mu): behind a pointer, so an idle
// connection's struct is 32 bytes smaller (TestConnStructSize).
type connRare struct {
	cause      string        // why the server ended it (the first reason wins)
	kick       chan struct{} // non-nil while the reader holds a message: closed when the connection starts closing
	writerIdle chan struct{} // non-nil while finish waits for the writer: closed when it stops
	space      chan struct{} // cap 1, made when the reader first waits for room: the writer took the reader's frames, or stopped
	readerDone chan struct{} // made when the writer waits for the reader's end: closed when the reader has stopped
}

// rareLocked returns c's connRare, made if there is none (c.mu held).
func (c *wsConn) rareLocked() *connRare {
	if c.rare == nil {
		c.rare = new(connRare)
	}
	return c.rare
}

// outQueue is what waits to be written on a busy connection (c.mu
// held); see wsConn.
type outQueue struct {
	frames     []outFrame
	replies    []outFrame
	owed       []string
	latest     map[string][]byte
	order      []string               // message ids in latest, oldest first
	notices    [][]byte               // encoded notice frames (notices.go)
	fleet      [][]byte               // encoded fleet operation frames (fleet.go), at most maxFleetQueue
	streams    map[string]*connStream // streamed messages' slots (stream.go)
	deltaOrder []string               // message ids whose slot has text waiting, oldest first
	deltaTimer *time.Timer            // has the writer take the waiting deltas at deltaNext
	closeFrame []byte                 // due once what is queued is written
}

// outQueues are the queues let go: a heartbeat's pong makes one and lets
// it go, 2,000 a second at 10,000 devices, garbage the collector (and
// the idle process's memory, internal/memtrim) would pay for.
var outQueues = sync.Pool{New: func() any { return new(outQueue) }}

// dropQueueLocked lets go of c's idle queue (c.mu held). Nothing holds a
// queue but c.q, read and written under c.mu.
func (c *wsConn) dropQueueLocked() {
	*c.q = outQueue{}
	outQueues.Put(c.q)
	c.q = nil
}

// idle reports whether q holds nothing the connection still needs.
func (q *outQueue) idle() bool {
	return len(q.frames)+len(q.replies)+len(q.owed)+len(q.order)+len(q.notices)+len(q.fleet)+len(q.streams)+len(q.deltaOrder) == 0 &&
		q.deltaTimer == nil && q.closeFrame == nil
}

// busy returns c's queue, made if there is none (c.mu held).
func (c *wsConn) busy() *outQueue {
	if c.q == nil {
		c.q = outQueues.Get().(*outQueue)
	}
	return c.q
}

// maxFrames bounds the reader's frames, progress slots, streams and the
// notices of a batch; maxReplies the replies.
func (c *wsConn) maxFrames() int  { return c.a.sendQueue() }
func (c *wsConn) maxReplies() int { return 4 * c.a.sendQueue() }

// connState is what the writer may write; see wsConn.
type connState uint8

const (
	connOpen    connState = iota // frames go; replies, progress and notices wait for connected
	connGreeted                  // the writer took connected: everything goes
	connClosing                  // nothing more is taken: what is queued goes, then the close frame
	connClosed                   // the close frame is written or a write failed: no writer runs again
)

func (s connState) String() string {
	return [...]string{"open", "greeted", "closing", "closed"}[s]
}

// connEvent moves a connection's state.
type connEvent uint8

const (
	evGreet connEvent = iota // the writer took a connected frame
	evClose                  // the server's close, the peer's close or the reader's end
	evStop                   // the close frame is written or a write failed
)

// nextState is the writer's state machine: the state after e in s.
// A connection only moves forward; closed is final.
func nextState(s connState, e connEvent) connState {
	switch {
	case s == connClosed || e == evStop:
		return connClosed
	case e == evClose:
		return connClosing
	case e == evGreet && s == connOpen:
		return connGreeted
	}
	return s
}

// closeLocked moves c to closing (c.mu held); false if it was closing
// already. Replies, progress and notices queued before connected was
// taken go only if connected is still queued (they follow it): else they
// are let go now, as the writer never writes them.
func (c *wsConn) closeLocked() bool {
	if c.state >= connClosing {
		return false
	}
	if q := c.q; q != nil && c.state == connOpen && !c.greetQueued() {
		q.replies, q.owed, q.latest, q.order, q.notices, q.fleet = nil, nil, nil, nil, nil, nil
	}
	c.dropStreamsLocked()
	c.state = nextState(c.state, evClose)
	if r := c.rare; r != nil && r.kick != nil {
		close(r.kick)
		r.kick = nil
	}
	return true
}

// greetQueued reports whether a connected frame waits (c.mu held).
func (c *wsConn) greetQueued() bool {
	if c.q == nil {
		return false
	}
	for _, f := range c.q.frames {
		if f.kind == connectedFrame {
			return true
		}
	}
	return false
}

type frameKind uint8

const (
	textFrame      frameKind = iota
	connectedFrame           // a text frame; replies and progress may follow it
	pongControl              // a WebSocket pong control frame
)

type outFrame struct {
	data []byte
	kind frameKind
	buf  *[]byte // data's pooled buffer (encodeFrame), nil if not pooled
}

// frameBufs holds the buffers the adapter encodes acks, errors and replies
// into: a frame's buffer goes back once the writer has written it, so
// the message path allocates no frame bytes, and an idle connection
// holds none.
var frameBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

const keepFrameBuf = 4 << 10 // larger buffers are left to the GC

// encodeFrame encodes f into a pooled buffer (recycle gives it back).
func encodeFrame(f link.Frame) outFrame {
	bp := frameBufs.Get().(*[]byte)
	b, err := link.AppendEncode((*bp)[:0], f)
	if err != nil { // only a nil frame fails, as for link.MustEncode
		panic(err)
	}
	*bp = b
	return outFrame{data: b, buf: bp}
}

// recycle gives f's pooled buffer back; f's data is not used again.
func (f *outFrame) recycle() {
	if f.buf != nil && cap(*f.buf) <= keepFrameBuf {
		*f.buf = (*f.buf)[:0]
		frameBufs.Put(f.buf)
	}
	f.buf, f.data = nil, nil
}

// init sets up c, made by upgrade with its socket and box, for the
// reader (which holds the box).
func (c *wsConn) init(remote, headerToken string, cert certIdentity) {
	c.readerHolds, c.remote, c.openedNanos = true, remote, time.Now().UnixNano()
	if headerToken != "" {
		c.bearer = &headerToken
	}
	if cert != (certIdentity{}) {
		c.certID = &cert
	}
}

// opened is when the connection opened.
func (c *wsConn) opened() time.Time { return time.Unix(0, c.openedNanos) }

// headerToken is the bearer token of the upgrade's Authorization header
// ("" for none, or once the connect frame was accepted).
func (c *wsConn) headerToken() string {
	if c.bearer == nil {
		return ""
	}
	return *c.bearer
}

// cert is what the client certificate proved (zero without one).
func (c *wsConn) cert() certIdentity {
	if c.certID == nil {
		return certIdentity{}
	}
	return *c.certID
}

// connectedAuth lets go of what only the connect needed, the header's
// token: an idle connection holds no credential it no longer uses.
func (c *wsConn) connectedAuth() { c.bearer = nil }

// messageRate is the connection's message rate (reader-only), made full
// at the first message or answer: a connection that sends none holds
// none.
func (c *wsConn) messageRate() *tokenBucket {
	if c.rate == nil {
		rate, burst := c.a.cfg.Config.RatePerPeer, c.a.cfg.Config.RateBurst
		if rate <= 0 || burst <= 0 {
			rate, burst = config.DefaultRatePerPeer, config.DefaultRateBurst
		}
		c.rate = newTokenBucket(rate, burst)
	}
	return c.rate
}

// readLimit is the largest frame the device may send.
func (c *wsConn) readLimit() int64 {
	l := link.ReadLimit(c.a.cfg.Config.MaxMessageChars)
	if c.diag { // a diag_result carries up to link.MaxDiagBytes
		l = max(l, link.DiagReadLimit)
	}
	return l
}

// start sets the connection up for reading; it runs before serve.
func (c *wsConn) start() {
	c.ws().SetReadLimit(c.readLimit())
	c.setReadDeadline()
}

// peerClosed is the Conn's close handler (box.go): the reader read the
// peer's close frame.
func (c *wsConn) peerClosed(code int) {
	c.mu.Lock()
	if c.closeLocked() { // echo the peer's close (RFC 6455 5.5.1)
		c.busy().closeFrame = websocket.FormatCloseMessage(code, "")
	}
	c.mu.Unlock()
}

// serve is the connection's own goroutine: it waits until the device
// sends something, then has the stepper read and handle the frame (see
// stepper), until the connection ends. Waiting needs little stack; what
// needs more runs elsewhere.
func (c *wsConn) serve() {
	defer c.a.wg.Done()
	defer c.a.m.WebSockets.Add("", -1)
	c.served = new(servedStep)
	for {
		var waitErr error
		switch {
		case c.held != nil:
			c.awaitRoom() // not reading: the device's sends back up through TCP
		case c.box.br.Buffered() == 0:
			_, waitErr = c.box.br.Peek(1) // gorilla reads what this buffers
		}
		if !c.a.steps.run(c, waitErr) {
			return
		}
	}
}

// servedStep hands a step of a connection with a goroutine of its own
// (serve) to a stepper worker and back.
type servedStep struct {
	waitErr error     // why waiting for data failed
	done    chan bool // where the running step reports
}

// awaitRoom waits until the held message has a place, its hold runs out
// or the connection starts closing; the next step settles it. It waits on
// the connection's own goroutine (serve), or on one started for the hold
// (a polled connection: hold): a held device pins no shared worker.
func (c *wsConn) awaitRoom() {
	h := c.held
	c.mu.Lock()
	if c.state >= connClosing {
		c.mu.Unlock()
		return
	}
	kick := make(chan struct{})
	c.rareLocked().kick = kick
	c.mu.Unlock()
	t := time.NewTimer(time.Until(h.until))
	select {
	case <-h.ready:
	case <-t.C:
	case <-kick:
	}
	t.Stop()
	c.mu.Lock()
	c.rare.kick = nil
	c.mu.Unlock()
}

// setReadDeadline sets the deadline of the next read: the idle timeout,
// the connect timeout before a connect frame, or a moment for the peer
// to answer our close frame.
func (c *wsConn) setReadDeadline() {
	a := c.a
	c.readClosing = c.isClosing()
	idle, connectBy := a.idleTimeout(), c.opened().Add(a.connectTimeout())
	switch {
	case c.readClosing && !c.graceSet:
		// Our close frame is out or due: the peer has a moment to answer.
		c.setReadBy(time.Now().Add(c.a.closeGrace))
		c.graceSet = true
	case c.readClosing:
	case c.peerID == "" && time.Now().Add(idle).After(connectBy):
		c.setReadBy(connectBy) // pings do not count
	default:
		c.setReadBy(time.Now().Add(idle))
	}
}

// errUnexpectedEOF is what gorilla reports for a connection that ends
// without a close frame.
var errUnexpectedEOF = &websocket.CloseError{Code: websocket.CloseAbnormalClosure, Text: io.ErrUnexpectedEOF.Error()}

// step reads and handles one frame, and sets the deadline of the next
// read; false means the connection has ended (and is taken down).
// waitErr is why waiting for data failed (nil: it did not).
func (c *wsConn) step(waitErr error) bool {
	a := c.a
	if c.held != nil {
		c.resumeHeld()
		c.setReadDeadline()
		return true
	}
	var (
		kind int
		buf  *[]byte
		err  = waitErr
	)
	if err == io.EOF {
		err = errUnexpectedEOF
	}
	if err == nil {
		kind, buf, err = readMessage(c.ws())
	}
	if err != nil {
		idle := a.idleTimeout()
		reason := describeReadError(err, idle)
		switch {
		case c.readClosing:
		case c.peerID == "" && !time.Now().Before(c.opened().Add(a.connectTimeout())):
			reason = fmt.Sprintf("no connect frame within %s: connection closed", a.connectTimeout())
			c.closeWith(websocket.ClosePolicyViolation, reason)
		}
		// (gorilla has sent a close frame itself for a protocol error
		// or a frame over the read limit.)
		c.finish(reason)
		return false
	}
	c.received(kind, *buf, c.readClosing)
	putReadBuffer(buf)
	c.setReadDeadline()
	return true
}

// received handles one frame the reader read; data is not kept.
func (c *wsConn) received(kind int, data []byte, closing bool) {
	switch {
	case closing: // waiting for the peer's answer to our close frame
	case kind != websocket.TextMessage:
		c.sendError("", link.CodeBadFrame, "binary frames are not supported: send JSON text frames")
	case !utf8.Valid(data):
		// RFC 6455 8.1: a text frame that is not UTF-8 fails the connection with 1007.
		c.reject(messageIDOf(data), link.CodeBadFrame, "text frame is not valid UTF-8: connection closed (1007)")
		c.closeWith(websocket.CloseInvalidFramePayloadData, "text frame is not valid UTF-8")
	default:
		c.handle(data)
	}
}

// readBufferPool holds the buffers frames are read into: a frame is
// handled (decoded into fresh strings) before the next is read, so the
// buffer goes back at once, and an idle connection holds none.
var readBufferPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const keepReadBuffer = 64 << 10 // larger buffers are left to the GC

// readMessage is websocket.Conn.ReadMessage into a pooled buffer (return
// it with putReadBuffer); gorilla's read limit applies as there.
func readMessage(ws *websocket.Conn) (kind int, buf *[]byte, err error) {
	kind, r, err := ws.NextReader()
	if err != nil {
		return kind, nil, err
	}
	buf = readBufferPool.Get().(*[]byte)
	b := (*buf)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			*buf = b
			return kind, buf, nil
		}
		if err != nil {
			*buf = b
			putReadBuffer(buf)
			return kind, nil, err
		}
	}
}

func putReadBuffer(buf *[]byte) {
	if cap(*buf) <= keepReadBuffer {
		*buf = (*buf)[:0]
		readBufferPool.Put(buf)
	}
}

func (c *wsConn) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state >= connClosing
}

// finish stops the writer (after the close frame it owes, if any), closes
// the socket and reports the disconnect.
func (c *wsConn) finish(reason string) {
	a := c.a
	c.mu.Lock()
	c.closeLocked()
	// The reader has stopped: only a close frame is still worth writing.
	if q := c.q; q != nil {
		q.frames, q.replies, q.owed, q.latest, q.order, q.notices, q.fleet = nil, nil, nil, nil, nil, nil, nil
	}
	c.readerEnd = true
	var readerDone chan struct{}
	cause := ""
	if r := c.rare; r != nil {
		readerDone, cause = r.readerDone, r.cause
	}
	if cause != "" {
		reason = cause
	}
	serverClosed := cause != ""
	if c.q != nil && c.q.closeFrame != nil { // an echo of the peer's close, or ours
		c.startWriterLocked()
	}
	if !c.writing && c.q != nil && c.q.idle() {
		c.dropQueueLocked()
	}
	running := c.writing
	var done chan struct{}
	if running {
		done = make(chan struct{})
		c.rareLocked().writerIdle = done
	}
	c.mu.Unlock()
	if readerDone != nil {
		close(readerDone)
	}
	if running {
		t := time.NewTimer(a.closeGrace)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	c.closeSocket()
	if running {
		<-done
	}
	live := a.unregister(c)
	if live && c.peerID != "" && a.presence != nil {
		a.presence.Disconnected(a.id, c.peerID)
	}
	switch {
	case c.peerID != "":
		if live {
			a.m.Connections.Add(a.id, -1)
		}
		a.events.Add(events.Event{Event: events.TerminalDisconnected, PeerID: c.peerID, SessionID: c.sessionKey, Detail: reason})
		a.registry.Disconnected(a.id, c.peerID, c.regGen) // no-op if a newer connection took over
		a.outside.Info(logDisconnected, c.peerID, "device disconnected", "channel_id", a.id, "peer_id", c.peerID,
			"remote", c.remote, "reason", reason)
	case serverClosed: // never connected, closed by us: say why (a stranger can cause it: gated)
		a.refused(c.remote, events.Event{Event: events.TerminalDisconnected, Detail: reason + " (remote " + c.remote + ")"})
	}
	a.log.Debug("terminal disconnected", "peer_id", c.peerID, "remote", c.remote, "reason", reason)
}

// enqueue hands the writer a frame from the reader, waiting while the
// queue is full: the reader stops reading until the writer catches up.
// When no writer runs, the reader is the writer for this one batch: it
// takes what waits (the frame, and anything queued before it) and writes
// it itself (writeInline), instead of waking a writer worker for it: a
// message's ack then costs no goroutine hand-off, and is never delayed.
func (c *wsConn) enqueue(f outFrame) bool {
	for paused := false; ; paused = true {
		c.mu.Lock()
		switch {
		case c.state >= connClosing:
			c.mu.Unlock()
			return false
		case c.q == nil || len(c.q.frames) < c.maxFrames():
			q := c.busy()
			q.frames = append(q.frames, f)
			if c.writing { // it takes the frame
				c.mu.Unlock()
				return true
			}
			// Open or greeted (not closing: no close frame is due, so
			// the batch never waits for the reader's own end).
			c.writing = true // the reader holds the box
			var b batch
			c.take(&b)
			c.mu.Unlock()
			c.writeInline(&b)
			return true
		}
		r := c.rareLocked()
		if r.space == nil {
			r.space = make(chan struct{}, 1)
		}
		space := r.space
		c.mu.Unlock()
		if !paused {
			c.a.m.Paused.Inc(c.a.id)
		}
		<-space // the writer is running: it took frames or stopped
	}
}

// sendFrame queues f (from the reader).
func (c *wsConn) sendFrame(f link.Frame) {
	if o := encodeFrame(f); !c.enqueue(o) {
		o.recycle()
	}
}

// startWriterLocked runs the writer on a warm worker unless one runs
// (c.mu held).
func (c *wsConn) startWriterLocked() {
	if c.writing || c.state == connClosed {
		return
	}
	c.writing = true
	c.bindLocked()
	c.a.writers.Run(c)
}

// writerStoppedLocked says the writer has returned (c.mu held); a queue
// with nothing left in it goes.
func (c *wsConn) writerStoppedLocked() {
	c.writing = false
	if c.q != nil && c.q.idle() {
		c.dropQueueLocked()
	}
	c.unbindLocked()
	if r := c.rare; r != nil && r.writerIdle != nil {
		close(r.writerIdle)
		r.writerIdle = nil
	}
}

// signalSpace tells a reader waiting for room to look again.
func (c *wsConn) signalSpace() {
	c.mu.Lock()
	var space chan struct{}
	if c.rare != nil {
		space = c.rare.space
	}
	c.mu.Unlock()
	if space == nil { // the reader never waited
		return
	}
	select {
	case space <- struct{}{}:
	default:
	}
}

// offerReply queues a final reply without blocking (see wsConn); false
// means the device gets it when it resends the message (and b is not
// kept).
func (c *wsConn) offerReply(messageID string, b outFrame) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state >= connClosing {
		return false
	}
	q := c.busy()
	if _, ok := q.latest[messageID]; ok { // progress after its reply would be stale
		delete(q.latest, messageID)
		q.order = deleteString(q.order, messageID)
	}
	c.endStreamLocked(messageID) // so is a delta: the reply carries the whole text
	if len(q.replies) < c.maxReplies() {
		q.replies = append(q.replies, b)
		c.startWriterLocked()
		return true
	}
	c.a.m.Deferred.Inc(c.a.id)
	if len(q.owed) == 0 {
		c.a.outside.Warn("reply queue full", c.peerID, "reply queue full; the device is told to resend the messages to get their replies",
			"peer_id", c.peerID, "message_id", messageID, "queue", c.maxReplies())
	}
	if len(q.owed) < maxOwed {
		q.owed = append(q.owed, messageID)
		c.startWriterLocked()
	}
	return false
}

// offerProgress puts b in messageID's progress slot, replacing what the
// writer has not written yet.
func (c *wsConn) offerProgress(messageID string, b []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state >= connClosing {
		return false
	}
	q := c.busy()
	if _, ok := q.latest[messageID]; !ok {
		if len(q.order) >= c.maxFrames() {
			return false // progress is best effort
		}
		q.order = append(q.order, messageID)
	}
	if q.latest == nil {
		q.latest = map[string][]byte{}
	}
	q.latest[messageID] = b
	c.startWriterLocked()
	return true
}

func deleteString(s []string, v string) []string {
	for i, x := range s {
		if x == v {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// closeWith ends the connection: what is queued is written, then a close
// frame with code and reason; the peer has closeGrace to answer it.
func (c *wsConn) closeWith(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closeLocked() {
		return
	}
	c.rareLocked().cause = reason
	c.busy().closeFrame = websocket.FormatCloseMessage(code, httpapi.TruncateUTF8(reason, 123))
	c.startWriterLocked()
}

// batch is what the writer takes in one go.
type batch struct {
	frames     []outFrame
	replies    []outFrame
	owed       []string
	progress   [][]byte
	deltas     []link.Delta  // their text shares the slots' strings: encoded as written
	deltaBuf   *[]link.Delta // deltas' pooled backing array (deltaBufs)
	closeFrame []byte
	notices    [][]byte // encoded notice frames
	fleet      [][]byte // encoded fleet operation frames
}

// writePump is the writer: it takes whatever waits, in order (the
// reader's frames first: an ack is queued before its reply exists), and
// writes it as one corked batch, until nothing waits.
func (c *wsConn) writePump() {
	var b batch
	for {
		c.mu.Lock()
		c.take(&b)
		if b.empty() {
			c.writerStoppedLocked()
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.signalSpace()
		if err := c.writeBatch(&b); err != nil {
			c.fail(err)
			return
		}
		b.release()
		if b.closeFrame != nil {
			c.mu.Lock()
			c.state = nextState(c.state, evStop)
			c.mu.Unlock()
			c.signalSpace()
			// The peer answers (the reader sees its close) or is cut off.
			c.mu.Lock()
			r := c.rareLocked()
			if r.readerDone == nil && !c.readerEnd {
				r.readerDone = make(chan struct{})
			}
			readerDone := r.readerDone // nil: the reader has stopped
			c.mu.Unlock()
			if readerDone != nil {
				t := time.NewTimer(c.a.closeGrace)
				select {
				case <-readerDone:
				case <-t.C:
				}
				t.Stop()
			}
			c.closeSocket()
			c.mu.Lock()
			c.writerStoppedLocked()
			c.mu.Unlock()
			return
		}
	}
}

// writeInline writes b, taken by the caller as the connection's writer
// (c.writing set by it, under the same hold of c.mu as the take), then
// hands the writer's part on to a worker if more waits by then (a reply
// that came meanwhile), or stops being the writer.
func (c *wsConn) writeInline(b *batch) {
	if err := c.writeBatch(b); err != nil {
		c.fail(err)
		return
	}
	b.release()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.q != nil && !c.q.idle() && c.state != connClosed {
		c.a.writers.Run(c) // writing stays set: the worker's writePump takes it
		return
	}
	c.writerStoppedLocked()
}

// take moves what waits into b (c.mu held): the reader's frames, then,
// once connected is taken, the rest (at most max notices a batch).
func (c *wsConn) take(b *batch) {
	q := c.q
	if q == nil {
		return
	}
	b.frames, q.frames = q.frames, nil
	for _, f := range b.frames {
		if f.kind == connectedFrame {
			c.state = nextState(c.state, evGreet)
		}
	}
	if c.state != connOpen {
		b.replies, q.replies = q.replies, nil
		b.owed, q.owed = q.owed, nil
		for _, id := range q.order {
			b.progress = append(b.progress, q.latest[id])
		}
		q.latest, q.order = nil, nil
		c.takeDeltas(b)
		n := min(len(q.notices), c.maxFrames())
		b.notices, q.notices = q.notices[:n:n], q.notices[n:]
		if len(q.notices) == 0 {
			q.notices = nil
		}
		b.fleet, q.fleet = q.fleet, nil
	}
	b.closeFrame, q.closeFrame = q.closeFrame, nil
}

func (b *batch) empty() bool {
	return len(b.frames)+len(b.replies)+len(b.owed)+len(b.progress)+len(b.notices)+len(b.fleet)+len(b.deltas) == 0 && b.closeFrame == nil
}

// release lets go of what b held, so an idle connection holds nothing;
// the frames' pooled buffers go back (they are written).
func (b *batch) release() {
	for i := range b.frames {
		b.frames[i].recycle()
	}
	for i := range b.replies {
		b.replies[i].recycle()
	}
	if b.deltaBuf != nil {
		clear(b.deltas)
		if cap(b.deltas) <= 16 {
			*b.deltaBuf = b.deltas[:0]
			deltaBufs.Put(b.deltaBuf)
		}
	}
	*b = batch{progress: b.progress[:0], closeFrame: b.closeFrame}
	if cap(b.progress) > 16 {
		b.progress = nil
	}
}

func (c *wsConn) writeBatch(b *batch) error {
	c.nc.Cork()
	for _, f := range b.frames {
		var err error
		if f.kind == pongControl {
			err = c.ws().WriteControl(websocket.PongMessage, f.data, time.Now().Add(time.Minute))
		} else {
			err = c.ws().WriteMessage(websocket.TextMessage, f.data)
		}
		if err != nil {
			return err
		}
	}
	if len(b.deltas) > 0 { // right behind connected; before the replies that end them
		if err := c.writeDeltas(b.deltas); err != nil {
			return err
		}
	}
	for _, n := range b.notices {
		if err := c.ws().WriteMessage(websocket.TextMessage, n); err != nil {
			return err
		}
	}
	for _, f := range b.fleet {
		if err := c.ws().WriteMessage(websocket.TextMessage, f); err != nil {
			return err
		}
	}
	for _, r := range b.replies {
		if err := c.ws().WriteMessage(websocket.TextMessage, r.data); err != nil {
			return err
		}
	}
	for _, id := range b.owed {
		e := &link.Error{MessageID: id, Code: link.CodeBusy,
			Error: "the reply to message " + id + " is ready, but this connection's reply queue was full: send the message again to get it"}
		if err := c.ws().WriteMessage(websocket.TextMessage, link.MustEncode(e)); err != nil {
			return err
		}
	}
	for _, p := range b.progress {
		if err := c.ws().WriteMessage(websocket.TextMessage, p); err != nil {
			return err
		}
	}
	if err := c.nc.Flush(); err != nil {
		return err
	}
	if b.closeFrame != nil {
		return c.ws().WriteControl(websocket.CloseMessage, b.closeFrame, time.Now().Add(time.Minute))
	}
	return nil
}

// writeDeltas encodes and writes deltas through one pooled buffer.
func (c *wsConn) writeDeltas(ds []link.Delta) error {
	bp := frameBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= keepFrameBuf {
			*bp = (*bp)[:0]
			frameBufs.Put(bp)
		}
	}()
	for i := range ds {
		b, err := link.AppendEncode((*bp)[:0], &ds[i])
		if err != nil {
			return err
		}
		*bp = b
		if err := c.ws().WriteMessage(websocket.TextMessage, b); err != nil {
			return err
		}
	}
	c.a.m.Deltas.Add(c.a.id, uint64(len(ds)))
	return nil
}

// fail ends a connection whose write failed: a stalled write means the
// device stopped reading and is dropped as too slow.
func (c *wsConn) fail(err error) {
	cause := "write failed: " + err.Error()
	if errors.Is(err, errStalled) {
		cause = "client too slow, dropped: " + err.Error()
		c.a.m.Dropped.Inc(c.a.id)
		if identity.GateNet(c.a.outside, "client too slow", c.remote, cause) {
			c.a.log.Warn("dropping terminal connection", "remote", c.remote, "cause", cause)
		}
	}
	c.mu.Lock()
	c.closeLocked()
	c.state = nextState(c.state, evStop)
	c.writerStoppedLocked()
	if r := c.rareLocked(); r.cause == "" {
		r.cause = cause
	}
	c.mu.Unlock()
	c.signalSpace()
	c.closeSocket() // the reader's read fails now
}
