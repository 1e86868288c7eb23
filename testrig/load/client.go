package load

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"termlink/link"
)

// Outbox kinds of client mode (Options.Outbox).
const (
	OutboxMemory = "memory" // link.NewMemoryOutbox per device (default)
	OutboxFile   = "file"   // link.FileOutbox in a temp state dir per device (fsync per message)
)

// Connect phases of a client-mode device (clientDev.phase).
const (
	phaseConnecting int32 = iota
	phaseInUse            // reached connected in the connect phase: messages go to it
	phaseFailed           // did not: closed at once, never used
)

// clientDev is the link.Client of one device in client mode.
type clientDev struct {
	c *link.Client
	// box is the device's outbox, opened by the runner (a MemoryOutbox or
	// a FallbackOutbox in the device's state dir) so that it outlives the
	// client: a move closes the client and hands the box to the next one.
	box       link.Outbox
	closeOnce sync.Once
	done      chan struct{} // closed when the event reader has ended

	// Of the event reader only: when the link left connected, and how
	// long it has waited in backoff since (StateWaiting to the next dial).
	downAt, waitFrom time.Time
	waited           time.Duration

	leaving   atomic.Bool // a move is closing this client: not a disconnect
	awaitMove atomic.Bool // started by a move: its first connect decides the move

	// phase decides the connect phase once: the event reader (connected,
	// or a failed first attempt) or the connect timeout, whoever is first.
	phase  atomic.Int32
	result chan connectResult // cap 1: the decision, when made by the event reader

	// smu is held from before Send to the tracker knowing the id, and by
	// the event reader while it tracks an event: an ack or reply that
	// arrives before Send has returned waits for its id to be known.
	smu sync.Mutex
}

type connectResult struct {
	at  time.Time // StateConnected event time
	err error
}

// newClient makes d's link.Client (not running yet) for d's server, with
// box as its outbox, or a new one when box is nil.
func (r *runner) newClient(d *device, box link.Outbox) (*clientDev, error) {
	home := int(d.server.Load())
	var fallbacks []string // the other servers, in ring order: a dead one is left for the next
	for i := 1; i < len(r.opt.URLs); i++ {
		fallbacks = append(fallbacks, r.opt.URLs[(home+i)%len(r.opt.URLs)])
	}
	cfg := link.ClientConfig{
		URL:            r.opt.URLs[home],
		Fallbacks:      fallbacks,
		PeerID:         r.peerID(d),
		DeviceName:     "termrig load " + r.runID,
		Token:          r.opt.Token,
		TLSConfig:      r.tlsConf,
		ConnectTimeout: r.opt.ConnectTimeout,
		Logger:         r.opt.Logger,
	}
	if r.opt.Outbox == OutboxFile {
		cfg.StateDir = filepath.Join(r.stateDir, strconv.Itoa(d.index))
	}
	if box == nil {
		if r.opt.Outbox == OutboxFile {
			fo, err := link.OpenFallbackOutbox(cfg.StateDir, link.FallbackOptions{
				FileOutboxOptions: link.FileOutboxOptions{Logger: r.opt.Logger}})
			if err != nil {
				return nil, fmt.Errorf("open the file outbox: %w", err)
			}
			box = fo
		} else {
			box = link.NewMemoryOutbox()
		}
	}
	cfg.Outbox = box
	cd := &clientDev{box: box, result: make(chan connectResult, 1), done: make(chan struct{})}
	c, err := link.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("new link.Client: %w", err)
	}
	cd.c = c
	return cd, nil
}

// runClient runs cd, d's client, and reads its events; both goroutines
// are counted in r.devWG.
func (r *runner) runClient(d *device, cd *clientDev) {
	r.devWG.Add(2)
	go func() {
		defer r.devWG.Done()
		// Close, not a context, stops it: the run's ctx ending only stops
		// the sending, like in lean mode.
		_ = cd.c.Run(context.Background())
	}()
	go func() {
		defer r.devWG.Done()
		defer close(cd.done)
		r.clientEvents(d, cd)
	}()
}

// startClient makes d's client, runs it and waits until it reached
// connected (d is then in use) or failed its first attempt, or the connect
// timeout passed (d is then closed). Its goroutines are counted in
// r.devWG.
func (r *runner) startClient(ctx context.Context, d *device) {
	cd, err := r.newClient(d, nil)
	if err != nil {
		r.connectFailed(d, err)
		return
	}
	d.cl = cd
	start := time.Now()
	r.runClient(d, cd)

	// The client bounds dial+upgrade and the connect/connected exchange by
	// ConnectTimeout each and reports a failure as StateWaiting; the timer
	// is only a backstop.
	guard := time.NewTimer(2*r.opt.ConnectTimeout + time.Second)
	defer guard.Stop()
	var res connectResult
	select {
	case res = <-cd.result:
	case <-guard.C:
		res = r.giveUp(cd, fmt.Errorf("not connected within %v", 2*r.opt.ConnectTimeout+time.Second))
	case <-ctx.Done():
		res = r.giveUp(cd, errors.New("interrupted during handshake"))
	}
	if res.err != nil {
		r.connectFailed(d, res.err)
		r.closeClient(cd)
		return
	}
	r.mu.Lock()
	r.connectLat = append(r.connectLat, res.at.Sub(start))
	r.mu.Unlock()
	d.state.Store(devUp)
	d.alive.Store(true)
}

// giveUp decides that cd failed to connect, with err, unless its event
// reader has just decided otherwise; it returns the decision.
func (r *runner) giveUp(cd *clientDev, err error) connectResult {
	if cd.phase.CompareAndSwap(phaseConnecting, phaseFailed) {
		return connectResult{err: err}
	}
	return <-cd.result // the event reader decided first
}

// connectFailed records a device that did not connect.
func (r *runner) connectFailed(d *device, err error) {
	r.log.Debug("device failed to connect", "peer", r.peerID(d), "err", err)
	r.mu.Lock()
	r.failed++
	r.connectErrs.add(err.Error())
	r.mu.Unlock()
}

// clientEvents reads the events of cd, d's client, until the client
// closes them.
func (r *runner) clientEvents(d *device, cd *clientDev) {
	connected := false // the link is up now
	for e := range cd.c.Events() {
		switch e.Kind {
		case link.EventState:
			r.clientState(d, cd, e, connected)
			connected = e.State == link.StateConnected
		case link.EventAck:
			a := *e.Ack
			// The client turns a cached reply into an EventReply of
			// its own: count it there, once.
			a.Reply = nil
			cd.smu.Lock()
			r.track.ack(&a, e.Time)
			cd.smu.Unlock()
		case link.EventReply:
			cd.smu.Lock()
			r.track.reply(e.Reply, e.Time)
			cd.smu.Unlock()
		case link.EventError:
			r.track.errorText(e.Err.Error())
		}
		if e.Final { // counted: the message may leave the outbox
			_ = cd.c.Delivered(e.MessageID)
		}
	}
}

// clientState takes one state change of the link of cd, d's client.
func (r *runner) clientState(d *device, cd *clientDev, e link.Event, wasConnected bool) {
	switch phase := cd.phase.Load(); {
	case phase == phaseConnecting && e.State == link.StateConnected:
		if cd.phase.CompareAndSwap(phaseConnecting, phaseInUse) {
			cd.result <- connectResult{at: e.Time}
		}
		return
	case phase == phaseConnecting && e.State == link.StateWaiting:
		// The first attempt failed: count the device failed, like lean
		// mode, instead of waiting for a retry.
		if cd.phase.CompareAndSwap(phaseConnecting, phaseFailed) {
			cd.result <- connectResult{err: errors.New(e.Reason)}
		}
		return
	case phase != phaseInUse:
		return
	}
	if cd.awaitMove.Load() { // a move's first connect: it decides the move
		switch e.State {
		case link.StateConnected:
			cd.awaitMove.Store(false)
			return
		case link.StateWaiting:
			cd.awaitMove.Store(false)
			r.moveFailed(d, e.Reason)
			return
		}
	}
	switch e.State {
	case link.StateWaiting:
		cd.waitFrom = e.Time
	case link.StateConnecting:
		if !cd.waitFrom.IsZero() {
			cd.waited += e.Time.Sub(cd.waitFrom)
			cd.waitFrom = time.Time{}
		}
	}
	switch {
	case e.State == link.StateConnected:
		r.mu.Lock()
		r.reconnects++
		if !cd.downAt.IsZero() {
			r.reconnectLat = append(r.reconnectLat, e.Time.Sub(cd.downAt))
			r.reconnectWait = append(r.reconnectWait, cd.waited)
		}
		r.mu.Unlock()
		if !cd.downAt.IsZero() {
			r.reconnLog.add(d.index, e.Time, ReconnectUp, "")
		}
		cd.downAt, cd.waitFrom, cd.waited = time.Time{}, time.Time{}, 0
	case wasConnected && !r.closing.Load() && !cd.leaving.Load():
		cd.downAt = e.Time
		reason := e.Reason
		if reason == "" {
			reason = "link left connected: " + e.State.String()
		}
		r.log.Debug("device disconnected", "peer", r.peerID(d), "reason", reason)
		r.mu.Lock()
		r.disconnected++
		r.disconnErrs.add(reason)
		r.mu.Unlock()
		r.reconnLog.add(d.index, e.Time, ReconnectDown, reason)
	case e.State == link.StateWaiting && !cd.downAt.IsZero() && !r.closing.Load():
		// A failed attempt to get the link back: the reason is the
		// attempt's.
		class := RefusalClass(e.Reason)
		r.mu.Lock()
		if r.refusals == nil {
			r.refusals = map[string]int{}
		}
		r.refusals[class]++
		r.mu.Unlock()
		r.reconnLog.add(d.index, e.Time, ReconnectFailed, e.Reason)
	case e.State == link.StateConnecting && !cd.downAt.IsZero() && !r.closing.Load():
		r.reconnLog.add(d.index, e.Time, ReconnectDial, "")
	}
}

// clientSend sends one message through d's client if d is in use. It
// holds d.wmu so that a move does not close the client meanwhile.
func (r *runner) clientSend(d *device) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if !d.alive.Load() {
		return
	}
	cd := d.cl
	cd.smu.Lock()
	defer cd.smu.Unlock()
	at := time.Now()
	id, err := cd.c.Send(context.Background(), r.opt.Text)
	if err != nil {
		r.log.Debug("send failed", "peer", r.peerID(d), "err", err)
		r.track.sendError()
		return
	}
	r.track.sending(id, at)
}

// closeClient stops cd's client (Run returns, Events is closed) and
// closes its outbox, once.
func (r *runner) closeClient(cd *clientDev) {
	cd.closeOnce.Do(func() {
		if err := cd.c.Close(); err != nil {
			r.log.Debug("closing link.Client", "err", err)
		}
		if err := cd.box.Close(); err != nil {
			r.log.Debug("closing the outbox", "err", err)
		}
	})
}

// closeClients closes every client, sums their counters and returns when
// every device goroutine has ended. The state dir of the file outboxes is
// removed by Run.
func (r *runner) closeClients() {
	r.closing.Store(true)
	var wg sync.WaitGroup
	ch := make(chan *clientDev)
	for range min(len(r.devs), 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cd := range ch {
				r.closeClient(cd)
			}
		}()
	}
	for _, d := range r.devs {
		// A move in progress (alive clear) sees closing and leaves d.cl
		// for this loop.
		d.wmu.Lock()
		cd := d.cl
		d.wmu.Unlock()
		if cd != nil {
			ch <- cd
		}
	}
	close(ch)
	wg.Wait()
	r.devWG.Wait()

	var sum ClientStats
	for _, d := range r.devs {
		if d.cl == nil {
			continue
		}
		var st link.ClientStats
		if d.clStats != nil {
			st = *d.clStats
		}
		addClientStats(&st, d.cl.c.Stats())
		sum.Dials += st.Dials
		sum.Sessions += st.Sessions
		sum.FramesSent += st.Sent
		sum.Resent += st.Resent
		sum.DroppedDuplicates += st.DuplicateReplies
	}
	r.clientStats = &sum
}

// makeStateDir makes the parent of the per-device state dirs of the file
// outbox.
func makeStateDir() (string, error) {
	dir, err := os.MkdirTemp("", "termrig-load-*")
	if err != nil {
		return "", fmt.Errorf("load: make the state dir for the file outboxes: %w", err)
	}
	return dir, nil
}
