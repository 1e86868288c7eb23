package load

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
)

const (
	// bufSize is each connection's read buffer and the pooled write
	// buffer size: frames are small and 10,000 idle devices must stay cheap.
	bufSize = 1024
	// closeWait is how long the close handshake may take for all devices
	// together before the remaining connections are dropped.
	closeWait = 2 * time.Second
	// heartbeatTick is how often the shared heartbeat loop looks for
	// devices due a ping.
	heartbeatTick = 100 * time.Millisecond
	// maxWriters bounds the shared writer pool.
	maxWriters = 32
)

// jobKind says what a writer sends.
type jobKind uint8

const (
	jobMessage jobKind = iota
	jobPing
)

type job struct {
	d    *device
	kind jobKind
	id   string
}

// device is one simulated terminal; all are allocated before any goroutine
// starts, and conn, every and nextPing are set before alive. Only its
// reader goroutine reads conn and replaces it (a move, under wmu); writes
// from the writer pool, the reader (pong, resends) and shutdown are
// serialised by wmu and carry a deadline. A writer checks alive under wmu.
//
// In client mode conn is unused: cl is the device's link.Client, and alive
// means it reached connected in the connect phase and is in use (it stays
// set while the client reconnects: Send queues in the outbox meanwhile;
// it is cleared while a move replaces cl, under wmu).
type device struct {
	index  int
	server atomic.Int32 // index in Options.URLs; changed only by the device's mover (reader or moveClient)
	conn   *websocket.Conn
	cl     *clientDev // client mode only; replaced under wmu by a move
	wmu    sync.Mutex
	alive  atomic.Bool // connected and not dropped

	// Heartbeat state: set before alive, then updated by the heartbeat
	// loop (and by a reconnect after a move, while alive is clear).
	every    atomic.Int64 // ns
	nextPing atomic.Int64 // unix ns
	pingOut  atomic.Int32 // pings sent since the last pong

	// Moves (Options.Move > 0); see move.go.
	state   atomic.Int32      // devDead, devUp, devClosing, devDialing, devDown
	moveCh  chan struct{}     // lean: the mover wakes a device that is down (cap 1)
	pending map[string]int64  // lean: sent and not answered, by id: send order; guarded by wmu
	seq     int64             // lean: messages sent; guarded by wmu
	clStats *link.ClientStats // client mode: summed stats of the clients moves replaced; guarded by wmu
}

func (d *device) write(b []byte) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	return d.writeLocked(b)
}

func (d *device) writeLocked(b []byte) error {
	return writeConn(d.conn, b)
}

// writeConn writes one text frame with the write deadline.
func writeConn(conn *websocket.Conn, b []byte) error {
	if err := conn.SetWriteDeadline(time.Now().Add(writeWait)); err != nil {
		return err
	}
	return conn.WriteMessage(websocket.TextMessage, b)
}

// runner is one Run.
type runner struct {
	// queued counts the message jobs enqueued and not yet handed over
	// (written, or given to the device's client): the drain waits for
	// them, else a send still queued or in flight when the sending
	// ended (a file outbox's fsync on a busy machine) was counted after
	// the drain and reported lost (TestClientMode/outbox=file, stress
	// run 24).
	queued atomic.Int64
	opt    Options
	log    *slog.Logger
	runID  string
	dialer *websocket.Dialer
	header http.Header
	devs   []*device
	track  *tracker
	jobs   chan job

	ping, pong []byte

	closing atomic.Bool // shutdown started: read errors are expected
	devWG   sync.WaitGroup

	stateDir string // client mode, file outbox: parent of the device state dirs

	tlsConf   *tls.Config   // wss:// roots of Options.CAFile; nil: the system's
	reconnLog *reconnectLog // Options.Reconnects; nil: none

	mu         sync.Mutex // guards the fields below
	connectLat []time.Duration
	// client mode: from a link leaving connected to connected again, and
	// the part of it spent waiting in backoff
	reconnectLat, reconnectWait []time.Duration
	connectErrs                 counter
	failed                      int
	disconnected                int
	disconnErrs                 counter
	reconnects                  int            // client mode: sessions after the first
	refusals                    map[string]int // client mode: failed reconnect attempts by RefusalClass
	clientStats                 *ClientStats   // client mode: summed at close
	moves                       int            // moves started (Options.Move)
	movesFailed                 int            // moves whose device did not reach connected on the next server
	moveErrs                    counter
	servers                     []ServerCount

	// The mover starts moves until moverCtx ends (sending ended);
	// moveCtx ends when the run stops moving devices altogether: a
	// reconnect in progress is abandoned, a device down stays down.
	moverCtx, moveCtx     context.Context
	stopMover, stopMoving context.CancelFunc

	pingsSent, pongs, missedPongs, serverPings atomic.Int64
}

// Run connects opt.Devices devices to opt.URL, sends messages at opt.Rate
// per second for opt.Duration, waits up to opt.Drain for the last replies,
// closes every connection and reports. Cancelling ctx stops early; Run
// still closes everything and returns the report (Interrupted set). The
// error is non-nil only when the options are invalid; failures of the
// server under test are in the report (see Report.Err).
func Run(ctx context.Context, opt Options) (*Report, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	runID, err := newRunID()
	if err != nil {
		return nil, err
	}
	tlsConf, err := caConfig(opt.CAFile)
	if err != nil {
		return nil, err
	}
	expected := 0
	if opt.Rate > 0 {
		expected = int(math.Ceil(opt.Rate*opt.Duration.Seconds())) + 16
	}
	r := &runner{
		opt:     opt,
		log:     opt.Logger.With("url", opt.URL),
		servers: make([]ServerCount, len(opt.URLs)),
		runID:   runID,
		dialer: &websocket.Dialer{
			HandshakeTimeout: opt.ConnectTimeout,
			TLSClientConfig:  tlsConf,
			ReadBufferSize:   bufSize,
			WriteBufferSize:  bufSize,
			WriteBufferPool:  &sync.Pool{},
		},
		devs:        make([]*device, opt.Devices),
		track:       newTracker(expected),
		jobs:        make(chan job, 1024),
		ping:        link.MustEncode(&link.Ping{}),
		pong:        link.MustEncode(&link.Pong{}),
		connectLat:  make([]time.Duration, 0, opt.Devices),
		connectErrs: counter{limit: 5},
		disconnErrs: counter{limit: 5},
		moveErrs:    counter{limit: 5},
		tlsConf:     tlsConf,
		reconnLog:   newReconnectLog(opt.Reconnects),
	}
	for i := range r.devs {
		d := &device{index: i}
		d.server.Store(int32(i % len(opt.URLs)))
		if opt.Move > 0 && !opt.Client {
			d.moveCh = make(chan struct{}, 1)
		}
		r.devs[i] = d
		r.servers[d.server.Load()].Devices++
	}
	for i, u := range opt.URLs {
		r.servers[i].URL = u
	}
	if opt.Token != "" {
		r.header = http.Header{"Authorization": {"Bearer " + opt.Token}}
	}
	r.moveCtx, r.stopMoving = context.WithCancel(context.Background())
	defer r.stopMoving()
	r.moverCtx, r.stopMover = context.WithCancel(r.moveCtx)
	if opt.Client && opt.Outbox == OutboxFile {
		if r.stateDir, err = makeStateDir(); err != nil {
			return nil, err
		}
		defer func() {
			if err := os.RemoveAll(r.stateDir); err != nil {
				r.log.Warn("removing the state dir of the file outboxes", "dir", r.stateDir, "err", err)
			}
		}()
	}
	return r.run(ctx), nil
}

func newRunID() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("load: make run id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func (r *runner) run(ctx context.Context) *Report {
	start := time.Now()

	// Shared goroutines: writer pool and heartbeat loop (lean mode only:
	// a link.Client pings by itself).
	var writers sync.WaitGroup
	for range min(r.opt.Devices, maxWriters) {
		writers.Add(1)
		go func() {
			defer writers.Done()
			r.writer()
		}()
	}
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	var hbDone sync.WaitGroup
	if !r.opt.Client {
		hbDone.Add(1)
		go func() {
			defer hbDone.Done()
			r.heartbeat(hbCtx)
		}()
	}

	r.connectAll(ctx)
	connected := r.connectedCount()
	r.countServers(func(sc *ServerCount) *int { return &sc.Connected })
	r.log.Info("connect phase done", "connected", connected, "failed", r.opt.Devices-connected,
		"took", time.Since(start).Round(time.Millisecond))

	var sendStart, sendEnd time.Time
	var cpu serverCPU
	var moverDone sync.WaitGroup
	startMover := func() {
		if r.opt.Move <= 0 {
			return
		}
		moverDone.Add(1)
		go func() {
			defer moverDone.Done()
			r.mover(r.moverCtx)
		}()
	}
	switch {
	case r.opt.Hold:
		fmt.Fprintf(r.opt.Status, "connected %d devices\n", connected)
		startMover()
		<-ctx.Done()
		r.stopMoving()
		moverDone.Wait()
	case connected == 0:
		// Nothing to send with: report the failures at once.
	default:
		cpu.start(r.opt.ServerPID)
		sendStart = time.Now()
		startMover()
		r.sendLoop(ctx)
		sendEnd = time.Now()
		// The moves end with the sending: the drain collects the answers
		// to what was sent, resent by the last moves.
		r.stopMover()
		moverDone.Wait()
		r.drain(ctx)
		cpu.stop(r.track.repliedCount())
	}
	r.stopMoving()
	r.countServers(func(sc *ServerCount) *int { return &sc.ConnectedAtEnd })

	stopHeartbeat()
	hbDone.Wait()
	close(r.jobs)
	writers.Wait()
	if r.opt.Client {
		r.closeClients()
	} else {
		r.closeAll()
	}

	rep := r.report(start, sendStart, sendEnd, ctx.Err() != nil)
	if r.opt.Latencies != nil {
		if err := r.track.writeLatencies(r.opt.Latencies); err != nil {
			r.log.Warn("writing the latencies", "err", err)
		}
	}
	cpu.fill(rep)
	if err := r.reconnLog.flush(); err != nil {
		r.log.Warn("writing the reconnect log", "err", err)
		rep.ReconnectLogError = err.Error()
	}
	return rep
}

func (r *runner) connectedCount() int {
	n := 0
	for _, d := range r.devs {
		if d.alive.Load() {
			n++
		}
	}
	return n
}

// connectAll starts the devices at opt.ConnectRate per second with at most
// opt.ConnectRate handshakes in flight, and returns when every handshake
// has succeeded or failed.
func (r *runner) connectAll(ctx context.Context) {
	rate := r.opt.ConnectRate
	interval := time.Second / time.Duration(rate)
	sem := make(chan struct{}, rate)
	var handshakes sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	start := time.Now()
	for i := range r.devs {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() == nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			r.mu.Lock()
			n := len(r.devs) - i
			r.failed += n
			for range n {
				r.connectErrs.add("not dialed: interrupted")
			}
			r.mu.Unlock()
			break
		}
		d := r.devs[i]
		handshakes.Add(1)
		r.devWG.Add(1)
		go func() {
			defer r.devWG.Done()
			if r.opt.Client {
				r.startClient(ctx, d)
				<-sem
				handshakes.Done()
				return
			}
			ok := r.handshake(ctx, d)
			<-sem
			handshakes.Done()
			if ok {
				r.read(d)
			}
		}()
	}
	handshakes.Wait()
}

// handshake dials d and waits for connected. It records the outcome and
// reports whether d is now connected.
func (r *runner) handshake(ctx context.Context, d *device) bool {
	start := time.Now()
	conn, every, err := r.dialAndConnect(ctx, d)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("interrupted during handshake: %w", err)
		}
		r.log.Debug("device failed to connect", "peer", r.peerID(d), "err", err)
		r.mu.Lock()
		r.failed++
		r.connectErrs.add(err.Error())
		r.mu.Unlock()
		return false
	}
	took := time.Since(start)
	d.conn = conn
	d.setHeartbeat(every)
	d.state.Store(devUp)
	r.mu.Lock()
	r.connectLat = append(r.connectLat, took)
	r.mu.Unlock()
	d.alive.Store(true)
	return true
}

func (r *runner) peerID(d *device) string {
	return r.opt.PeerPrefix + "-" + strconv.Itoa(d.index)
}

// setHeartbeat starts d's heartbeat schedule (before d is alive).
func (d *device) setHeartbeat(every time.Duration) {
	d.every.Store(int64(every))
	d.nextPing.Store(time.Now().Add(every).UnixNano())
	d.pingOut.Store(0)
}

// dialAndConnect opens the WebSocket to d's server, sends connect and
// waits for connected; it returns the connection (not yet d's: the caller
// installs it) and the heartbeat interval the server asked for.
func (r *runner) dialAndConnect(ctx context.Context, d *device) (*websocket.Conn, time.Duration, error) {
	hctx, cancel := context.WithTimeout(ctx, r.opt.ConnectTimeout)
	defer cancel()
	conn, resp, err := r.dialer.DialContext(hctx, r.opt.URLs[d.server.Load()], r.header)
	if err != nil {
		return nil, 0, dialError(err, resp)
	}
	conn.SetReadLimit(link.MaxFrameBytes)
	// Cancellation or the handshake timeout unblocks the reads below.
	stop := context.AfterFunc(hctx, func() { conn.SetReadDeadline(time.Now()) })
	ok := false
	defer func() {
		stop()
		if !ok {
			conn.Close()
		}
	}()

	caps := []string{link.CapText}
	if r.opt.Stream {
		caps = append(caps, link.CapStream)
	}
	hello, err := link.Encode(&link.Connect{
		PeerID:       r.peerID(d),
		DeviceName:   "termrig load " + r.runID,
		Capabilities: caps,
		Token:        r.opt.Token,
	})
	if err != nil {
		return nil, 0, err
	}
	// Nobody else has conn yet: no lock needed.
	if err := writeConn(conn, hello); err != nil {
		return nil, 0, fmt.Errorf("send connect: %w", err)
	}
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			if hctx.Err() == context.DeadlineExceeded {
				return nil, 0, fmt.Errorf("no connected frame within %v", r.opt.ConnectTimeout)
			}
			return nil, 0, fmt.Errorf("wait for connected: %w", err)
		}
		f, err := link.Decode(data)
		if err != nil {
			return nil, 0, fmt.Errorf("bad frame instead of connected: %w", err)
		}
		switch f := f.(type) {
		case *link.Connected:
			if !stop() { // the deadline fired: the read deadline is set
				return nil, 0, fmt.Errorf("no connected frame within %v", r.opt.ConnectTimeout)
			}
			if err := conn.SetReadDeadline(time.Time{}); err != nil {
				return nil, 0, err
			}
			every := DefaultHeartbeat
			if f.HeartbeatSeconds > 0 {
				every = time.Duration(f.HeartbeatSeconds) * time.Second
			}
			ok = true
			return conn, every, nil
		case *link.Error:
			return nil, 0, fmt.Errorf("connect refused by server: %s", f.Error)
		case *link.Ping:
			if err := writeConn(conn, r.pong); err != nil {
				return nil, 0, fmt.Errorf("answer ping: %w", err)
			}
		default:
			return nil, 0, fmt.Errorf("got %s frame instead of connected", f.FrameType())
		}
	}
}

// dialError says why the WebSocket upgrade failed, with the HTTP status
// when there was one.
func dialError(err error, resp *http.Response) error {
	if resp == nil {
		return fmt.Errorf("dial: %w", err)
	}
	msg := "websocket upgrade refused: HTTP " + resp.Status
	if resp.Body != nil {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		if line = strings.TrimSpace(line); line != "" {
			if len(line) > 120 {
				line = line[:120] + "..."
			}
			msg += ": " + line
		}
	}
	return errors.New(msg)
}

// read is d's reader loop; it returns when the connection ends, or, with
// moves, when the run stops moving devices.
func (r *runner) read(d *device) {
	for {
		r.readConn(d, d.conn)
		if r.opt.Move <= 0 || !r.rejoin(d) {
			return
		}
	}
}

// readConn reads conn, d's connection, until it ends, and closes it.
func (r *runner) readConn(d *device, conn *websocket.Conn) {
	defer conn.Close()
	for {
		_, data, err := conn.ReadMessage()
		at := time.Now()
		if err != nil {
			d.alive.Store(false)
			moving := !d.state.CompareAndSwap(devUp, devDown) // the mover closed it
			if !r.closing.Load() && !moving {
				r.log.Debug("device disconnected", "peer", r.peerID(d), "err", err)
				r.mu.Lock()
				r.disconnected++
				r.disconnErrs.add(err.Error())
				r.mu.Unlock()
			}
			return
		}
		f, err := link.Decode(data)
		if err != nil {
			r.track.badFrame(err)
			continue
		}
		switch f := f.(type) {
		case *link.Ack:
			r.track.ack(f, at)
			if f.Reply != nil {
				r.answered(d, f.MessageID)
			}
		case *link.Message:
			if f.IsReply() {
				r.track.reply(f, at)
				r.answered(d, f.MessageID)
			} else {
				r.track.unexpectedFrame()
			}
		case *link.Pong:
			r.pongs.Add(1)
			d.pingOut.Store(0)
		case *link.Ping:
			r.serverPings.Add(1)
			if err := d.write(r.pong); err != nil {
				r.log.Debug("answer ping", "peer", r.peerID(d), "err", err)
			}
		case *link.Error:
			r.track.errorFrame(f, r.peerID(d))
		case *link.Delta:
			if !r.opt.Stream {
				r.track.unexpectedFrame()
				continue
			}
			r.track.delta(f, at)
		case *link.Progress:
			// Not asked for; harmless.
		default:
			r.track.unexpectedFrame()
		}
	}
}

// writer sends queued frames until the queue is closed.
func (r *runner) writer() {
	var buf []byte
	for j := range r.jobs {
		switch {
		case !j.d.alive.Load(): // cheap check; again under the lock
		case r.opt.Client:
			r.clientSend(j.d)
		case j.kind == jobPing:
			r.sendPing(j.d)
		default:
			buf = r.sendMessage(j.d, j.id, buf)
		}
		if j.kind == jobMessage {
			r.queued.Add(-1)
		}
	}
}

// sendPing pings d if it is still alive.
func (r *runner) sendPing(d *device) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if !d.alive.Load() {
		return
	}
	if err := d.writeLocked(r.ping); err != nil {
		r.writeFailed(d, err)
		return
	}
	r.pingsSent.Add(1)
}

// sendMessage sends message id from d if it is still alive; buf is a
// scratch buffer, returned for reuse.
func (r *runner) sendMessage(d *device, id string, buf []byte) []byte {
	var err error
	buf, err = link.AppendEncode(buf[:0], &link.Message{MessageID: id, Text: r.opt.Text})
	if err != nil { // cannot happen for a plain string
		panic(err)
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if !d.alive.Load() {
		return buf
	}
	r.track.sending(id, time.Now())
	if err := d.writeLocked(buf); err != nil {
		r.track.sendFailed(id)
		r.writeFailed(d, err)
		return buf
	}
	r.remember(d, id)
	return buf
}

// writeFailed drops a device whose write failed (wmu held); its reader
// then ends.
func (r *runner) writeFailed(d *device, err error) {
	r.log.Debug("write failed", "peer", r.peerID(d), "err", err)
	d.conn.Close()
}

// enqueue hands j to the writer pool; false when ctx ended first.
func (r *runner) enqueue(ctx context.Context, j job) bool {
	if j.kind == jobMessage {
		r.queued.Add(1)
	}
	select {
	case r.jobs <- j:
		return true
	case <-ctx.Done():
		if j.kind == jobMessage {
			r.queued.Add(-1)
		}
		return false
	}
}

// heartbeat pings every live device when its heartbeat is due. One loop
// serves all devices: no goroutine or ticker per device.
func (r *runner) heartbeat(ctx context.Context) {
	t := time.NewTicker(heartbeatTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, d := range r.devs {
				if !d.alive.Load() || now.UnixNano() < d.nextPing.Load() {
					continue
				}
				d.nextPing.Store(now.Add(time.Duration(d.every.Load())).UnixNano())
				if d.pingOut.Add(1) > 1 {
					r.missedPongs.Add(1)
				}
				if !r.enqueue(ctx, job{d: d, kind: jobPing}) {
					return
				}
			}
		}
	}
}

// sendLoop sends messages at opt.Rate per second in total, round-robin
// over the live devices, for opt.Duration (or until ctx ends).
func (r *runner) sendLoop(ctx context.Context) {
	start := time.Now()
	end := start.Add(r.opt.Duration)
	// A server pushing back (it stops reading a device whose answers pile
	// up) blocks the writers and then enqueue: sending still ends on time.
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	timer := time.NewTimer(r.opt.Duration)
	defer timer.Stop()
	if r.opt.Rate <= 0 {
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		return
	}
	var n int64
	next := 0 // round-robin position in r.devs
	for {
		now := time.Now()
		if !now.Before(end) {
			return
		}
		due := int64(now.Sub(start).Seconds()*r.opt.Rate) + 1
		for ; n < due; n++ {
			d := r.pick(&next)
			if d == nil && r.opt.Move > 0 {
				// Every device is between servers; moves bring them
				// back. This message is not sent.
				continue
			}
			if d == nil {
				r.log.Warn("no device left connected: sending stopped")
				return
			}
			var id string // client mode: the client's outbox makes the id
			if !r.opt.Client {
				id = r.runID + "-" + strconv.FormatInt(n, 10)
			}
			if !r.enqueue(ctx, job{d: d, kind: jobMessage, id: id}) {
				return
			}
		}
		at := start.Add(time.Duration(float64(n) / r.opt.Rate * float64(time.Second)))
		if at.After(end) {
			at = end
		}
		timer.Reset(time.Until(at))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// pick returns the next live device after *next, or nil if none is live.
func (r *runner) pick(next *int) *device {
	for range len(r.devs) {
		d := r.devs[*next]
		*next = (*next + 1) % len(r.devs)
		if d.alive.Load() {
			return d
		}
	}
	return nil
}

// drain waits up to opt.Drain for the outstanding replies (and, with
// moves, for the moves in progress to reach their next server).
func (r *runner) drain(ctx context.Context) {
	done := func() bool { return r.queued.Load() == 0 && r.track.outstanding() == 0 && r.movesSettled() }
	if done() || r.opt.Drain <= 0 {
		return
	}
	deadline := time.NewTimer(r.opt.Drain)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for !done() {
		select {
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		case <-poll.C:
		}
	}
}

// closeAll closes every connection: a close frame to each, up to
// closeWait for the server to answer, then the sockets are dropped.
// It returns when every device goroutine has ended. The moves have
// stopped (moveCtx ended): a device reconnecting gives up.
func (r *runner) closeAll() {
	r.closing.Store(true)
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "load test done")
	deadline := time.Now().Add(writeWait)
	var wg sync.WaitGroup
	ch := make(chan *device)
	for range min(len(r.devs), 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range ch {
				d.wmu.Lock()
				if d.alive.Load() {
					if err := d.conn.WriteControl(websocket.CloseMessage, msg, deadline); err != nil {
						d.conn.Close()
					}
				}
				d.wmu.Unlock()
			}
		}()
	}
	for _, d := range r.devs {
		if d.alive.Load() {
			ch <- d
		}
	}
	close(ch)
	wg.Wait()

	done := make(chan struct{})
	go func() {
		r.devWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(closeWait):
	}
	for _, d := range r.devs {
		d.wmu.Lock()
		if d.conn != nil {
			d.conn.Close()
		}
		d.wmu.Unlock()
	}
	<-done
}
