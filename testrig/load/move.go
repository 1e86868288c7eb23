package load

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
)

// Device states for moves (device.state). A device that failed its first
// connect stays devDead; the mover moves devUp devices and wakes devDown
// ones; only the device's own mover (the lean reader, or moveClient) takes
// it out of devClosing and devDialing.
const (
	devDead    int32 = iota // never connected: not moved
	devUp                   // connected (lean) or in use (client)
	devClosing              // the mover closed its connection for a move
	devDialing              // reconnecting to the next server
	devDown                 // lean: lost its connection or failed a move; waits for the mover
)

// mover moves the devices, one at a time in index order, so that device
// i moves at Move*(i+1)/N after the start and then every Move: the moves
// are spread evenly over each Move period. It returns when ctx ends.
func (r *runner) mover(ctx context.Context) {
	n := len(r.devs)
	start := time.Now()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for k := int64(0); ; k++ {
		at := start.Add(moveOffset(r.opt.Move, n, k))
		if wait := time.Until(at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		} else if ctx.Err() != nil {
			return
		}
		d := r.devs[k%int64(n)]
		if r.opt.Client {
			r.moveClientDevice(d)
		} else {
			r.moveLeanDevice(d)
		}
	}
}

// moveOffset is when the k-th move of the run is due after the mover's
// start: the moves go round-robin over n devices, one every move/n, so
// device i moves at move*(i+1)/n, move*(i+1)/n + move, ...
func moveOffset(move time.Duration, n int, k int64) time.Duration {
	return time.Duration(float64(move) * float64(k+1) / float64(n))
}

// moveStarted counts a move.
func (r *runner) moveStarted() {
	r.mu.Lock()
	r.moves++
	r.mu.Unlock()
}

// moveFailed counts a move whose device did not get connected to its
// next server.
func (r *runner) moveFailed(d *device, reason string) {
	r.log.Debug("move failed", "peer", r.peerID(d), "server", r.opt.URLs[d.server.Load()], "err", reason)
	r.mu.Lock()
	r.movesFailed++
	r.moveErrs.add(reason)
	r.mu.Unlock()
}

// moveLeanDevice starts d's move: a connected device gets a close frame
// (its reader then dials the next server), a device that is down is woken
// to dial it. A device in the middle of a move is left alone.
func (r *runner) moveLeanDevice(d *device) {
	switch {
	case d.state.CompareAndSwap(devUp, devClosing):
		r.moveStarted()
		msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "moving to the next server")
		d.wmu.Lock()
		d.alive.Store(false)
		if err := d.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(writeWait)); err != nil {
			d.conn.Close()
		} else {
			// The server answers with a close frame; replies it sends
			// before that are still read. Do not wait for it long.
			_ = d.conn.SetReadDeadline(time.Now().Add(closeWait))
		}
		d.wmu.Unlock()
	case d.state.CompareAndSwap(devDown, devDialing):
		r.moveStarted()
		d.moveCh <- struct{}{} // cap 1 and empty: only this CAS sends
	}
}

// rejoin takes d, whose connection has ended, to the next server: at once
// when the mover closed it, else (lost, or a failed move) when the mover
// wakes it. It reports whether d is connected again; false when the run
// stops moving devices.
func (r *runner) rejoin(d *device) bool {
	for {
		if !d.state.CompareAndSwap(devClosing, devDialing) {
			// devDown: wait for the mover (it sets devDialing).
			if r.moveCtx.Err() != nil {
				return false
			}
			select {
			case <-d.moveCh:
			case <-r.moveCtx.Done():
				return false
			}
		}
		if r.moveCtx.Err() != nil || r.closing.Load() {
			return false
		}
		d.server.Store((d.server.Load() + 1) % int32(len(r.opt.URLs)))
		if r.reconnect(d) {
			return true
		}
	}
}

// reconnect dials d's (new) server with the same peer id and, once
// connected, resends d's unanswered messages with their message ids
// before anything new goes out. On failure d is devDown.
func (r *runner) reconnect(d *device) bool {
	conn, every, err := r.dialAndConnect(r.moveCtx, d)
	if err != nil {
		if r.moveCtx.Err() == nil {
			r.moveFailed(d, err.Error())
		}
		d.state.Store(devDown)
		return false
	}
	d.setHeartbeat(every)
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if r.closing.Load() {
		conn.Close()
		d.state.Store(devDown)
		return false
	}
	d.conn = conn
	r.resendLocked(d)
	d.state.Store(devUp)
	d.alive.Store(true)
	return true
}

// remember notes id as sent by d and unanswered (wmu held), for resending
// after a move.
func (r *runner) remember(d *device, id string) {
	if r.opt.Move <= 0 {
		return
	}
	if d.pending == nil {
		d.pending = make(map[string]int64)
	}
	d.seq++
	d.pending[id] = d.seq
}

// answered forgets id: d got its final reply.
func (r *runner) answered(d *device, id string) {
	if r.opt.Move <= 0 {
		return
	}
	d.wmu.Lock()
	delete(d.pending, id)
	d.wmu.Unlock()
}

// resendLocked writes d's unanswered messages again, oldest first, on its
// new connection (wmu held). A failed write drops the connection: the
// reader then sees it end.
func (r *runner) resendLocked(d *device) {
	if len(d.pending) == 0 {
		return
	}
	ids := make([]string, 0, len(d.pending))
	for id := range d.pending {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(d.pending[a], d.pending[b]) })
	for _, id := range ids {
		b, err := link.Encode(&link.Message{MessageID: id, Text: r.opt.Text})
		if err != nil { // cannot happen for a plain string
			panic(err)
		}
		if err := d.writeLocked(b); err != nil {
			r.writeFailed(d, err)
			return
		}
		r.track.resend()
	}
}

// moveClientDevice starts the move of a client-mode device that is in use.
func (r *runner) moveClientDevice(d *device) {
	// A client a move started and that has not connected yet is left
	// for a later tick: closing it mid-handshake would count a dial with
	// no session and a move its first connect never decided (stress run
	// 24, connects taking 300-400 ms against moves every 500 ms).
	d.wmu.Lock()
	connecting := d.cl != nil && d.cl.awaitMove.Load()
	d.wmu.Unlock()
	if connecting || !d.state.CompareAndSwap(devUp, devClosing) {
		return
	}
	r.moveStarted()
	r.devWG.Add(1)
	go func() {
		defer r.devWG.Done()
		r.moveClient(d)
	}()
}

// moveClient closes d's link.Client and starts a new one on the next
// server with the same outbox: the new client resends what the old one
// left unanswered, with the same message ids. Its first connect counts
// the move done or failed (after that it reconnects by itself).
func (r *runner) moveClient(d *device) {
	d.wmu.Lock()
	d.alive.Store(false) // no Send meanwhile
	old := d.cl
	d.wmu.Unlock()

	old.leaving.Store(true)
	if err := old.c.Close(); err != nil {
		r.log.Debug("closing link.Client for a move", "peer", r.peerID(d), "err", err)
	}
	<-old.done // every final answer it handed over is confirmed in the outbox

	d.server.Store((d.server.Load() + 1) % int32(len(r.opt.URLs)))
	cd, err := r.newClient(d, old.box)
	if err != nil {
		r.moveFailed(d, err.Error())
		d.state.Store(devDead)
		return
	}
	cd.phase.Store(phaseInUse)
	cd.awaitMove.Store(true)

	d.wmu.Lock()
	defer d.wmu.Unlock()
	if r.closing.Load() {
		// closeClients closes d.cl (old) and the outbox; cd never ran.
		_ = cd.c.Close()
		d.state.Store(devDead)
		return
	}
	// old's counters move to clStats as cd takes its place (while d.cl
	// is old, closeClients counts them from there).
	if d.clStats == nil {
		d.clStats = new(link.ClientStats)
	}
	addClientStats(d.clStats, old.c.Stats())
	d.cl = cd
	r.runClient(d, cd)
	d.state.Store(devUp)
	d.alive.Store(true)
}

// movesSettled reports whether no device is in the middle of a move: it
// is on its next server (a client: connected there, or its first attempt
// failed) or down.
func (r *runner) movesSettled() bool {
	if r.opt.Move <= 0 {
		return true
	}
	for _, d := range r.devs {
		if st := d.state.Load(); st == devClosing || st == devDialing {
			return false
		}
		if r.opt.Client {
			d.wmu.Lock()
			waiting := d.cl != nil && d.cl.awaitMove.Load()
			d.wmu.Unlock()
			if waiting {
				return false
			}
		}
	}
	return true
}

// addClientStats adds what a closed client counted to sum.
func addClientStats(sum *link.ClientStats, st link.ClientStats) {
	sum.Dials += st.Dials
	sum.Sessions += st.Sessions
	sum.Sent += st.Sent
	sum.Resent += st.Resent
	sum.DuplicateReplies += st.DuplicateReplies
}

// countServers counts the devices connected to each server into the
// field of ServerCount that field picks. The lean devices count when
// alive, the clients when their link is up.
func (r *runner) countServers(field func(*ServerCount) *int) {
	for _, d := range r.devs {
		up := d.alive.Load()
		if r.opt.Client {
			d.wmu.Lock()
			up = up && d.cl != nil && d.cl.c.Status().State == link.StateConnected
			d.wmu.Unlock()
		}
		if up {
			(*field(&r.servers[d.server.Load()]))++
		}
	}
}
