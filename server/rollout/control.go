package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"termlink/server/events"
)

// Manager runs the rollouts. It is a part of the server's fleet
// operations (DeviceConnected, Answers, Report).
//
// Its rules are written once, above a Storage: each rollout is one
// record, kept in memory as it was last read or written (base, at rev)
// and as this node changed it since (r). Device reports and the waves
// are written behind, within a tick; operator actions before they are
// answered. A write that finds its record changed by another node
// (ErrConflict), and a change another node made (Follow), are merged
// into this node's (merge): each device keeps the side that changed it
// (both: the later change), the rollout's state the side that changed
// it (both: aborted, then done, win over the rest), the waves the
// furthest. An operator action is instead done again on the new record
// (its checks too: a pause of a rollout another node aborted meanwhile
// is refused), and refused after a few conflicts in a row.
//
// With a shared Storage (a cluster) every node sends the update frames
// to the devices connected to it and takes their reports, and one node
// at a time, the holder of the lease (Storage.Lease), advances the
// rollouts: it releases the waves, finds the devices gone offline, ends
// the rollouts, and keeps one active rollout per channel. When it dies
// its lease expires and another node goes on from the stored state.
type Manager struct {
	opt      Options
	channels map[string]bool
	st       Storage
	info     StorageInfo
	grace    time.Duration // the registry's lag: offline only past it

	saveMu sync.Mutex // orders the records' writes

	mu      sync.Mutex
	byID    map[string]*entry
	order   []string          // ids, oldest first
	dirty   map[string]bool   // ids whose record is behind
	gone    map[string]uint64 // ids dropped here, their record's revision (save removes it)
	stopped bool
	loaded  bool
	control bool // this node advances the rollouts (the lease's holder; always alone)

	lease leaseState // the ticker's alone

	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	stop   chan struct{}
	// changed is closed (and made again) when another node's change of a
	// rollout was taken in (Create waits on it for the controller).
	changed chan struct{}
	done    chan struct{}
	follow  chan struct{} // closed once Follow returns
}

// leaseState is what the ticker knows of the controller's lease.
type leaseState struct {
	rev      uint64    // the revision this node wrote (held)
	held     bool      // this node holds it
	renewed  time.Time // when this node last wrote it
	seen     string    // another's holder and revision, as last read
	seenRev  uint64
	seenAt   time.Time // when that was first read
	reported bool      // a lease error was logged
}

// entry is one rollout, its index, and its record as last read or
// written.
type entry struct {
	r    Rollout
	idx  map[string]int // peer id -> index in r.Devices
	base Rollout        // the record at rev
	rev  uint64
}

// maxConflicts bounds the writes again of one change after conflicts.
const maxConflicts = 5

// Open loads the rollouts kept in opt.Dir (LocalStorage: a file that
// does not parse is moved aside as <name>.bad, with the reason logged)
// and starts the Manager's ticker; Close stops it.
func Open(opt Options) (*Manager, error) {
	st, err := OpenLocal(opt.Dir, opt.NoSync)
	if err != nil {
		return nil, err
	}
	return New(context.Background(), st, opt)
}

// New returns the rollouts over st: it follows st (Storage.Follow) and
// returns once the records are loaded, or ctx ends; Close stops it and
// closes st.
func New(ctx context.Context, st Storage, opt Options) (*Manager, error) {
	if opt.Tick <= 0 {
		opt.Tick = time.Second
	}
	if opt.Lease <= 0 {
		opt.Lease = 5 * time.Second
	}
	info := st.Info()
	if opt.MaxRollouts <= 0 {
		opt.MaxRollouts = DefaultMaxRollouts
	}
	if info.MaxRecords > 0 {
		opt.MaxRollouts = min(opt.MaxRollouts, info.MaxRecords)
	}
	if opt.MaxDevices <= 0 {
		opt.MaxDevices = DefaultMaxDevices
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Event == nil {
		opt.Event = func(string, events.Event) {}
	}
	m := &Manager{opt: opt, channels: map[string]bool{}, st: st, info: info, byID: map[string]*entry{}, dirty: map[string]bool{},
		gone: map[string]uint64{}, control: !info.Shared,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), changed: make(chan struct{}), done: make(chan struct{}), follow: make(chan struct{})}
	if info.Shared {
		m.opt.Tick = min(m.opt.Tick, opt.Lease/3)
		m.grace = 2 * opt.Lease
	}
	for _, c := range opt.Channels {
		m.channels[c] = true
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	ready := make(chan struct{})
	f := &feed{m: m, ready: ready}
	var ferr error
	go func() {
		defer close(m.follow)
		ferr = st.Follow(m.ctx, f)
		f.loaded() // a store that failed
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		m.cancel()
		<-m.follow
		return nil, fmt.Errorf("rollouts: not loaded: %w", ctx.Err())
	}
	if !info.Shared {
		<-m.follow
		if ferr != nil {
			return nil, fmt.Errorf("rollouts: %w", ferr)
		}
	}
	m.mu.Lock()
	m.loaded = true
	n := len(m.order)
	m.mu.Unlock()
	if n > 0 {
		m.opt.Log.Info("rollouts loaded", "count", n)
	}
	go m.run()
	return m, nil
}

// feed takes a Storage's Follow into the rollouts.
type feed struct {
	m     *Manager
	ready chan struct{}
	once  sync.Once
}

func (f *feed) loaded() { f.once.Do(func() { close(f.ready) }) }

func (f *feed) Loaded() { f.loaded() }

func (f *feed) Put(id string, value []byte, rev uint64) {
	m := f.m
	r, err := Parse(value, m.opt.MaxDevices)
	if err == nil && r.ID != id {
		err = fmt.Errorf("the record holds rollout %s", r.ID)
	}
	if err != nil {
		m.opt.Log.Error("rollout record refused: not loaded", "record", m.st.Where(id), "err", err)
		if q, ok := m.st.(interface{ Quarantine(string) }); ok {
			q.Quarantine(id)
		}
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byID[id]
	if e == nil {
		if _, dropped := m.gone[id]; dropped {
			return
		}
		if !m.channels[r.ChannelID] && r.Active() {
			m.opt.Log.Warn("rollout of a channel no longer configured: kept, inert", "rollout", r.ID, "channel_id", r.ChannelID)
		}
		e = newEntry(*r)
		e.base, e.rev = cloneRollout(r), rev
		m.byID[id] = e
		i := sort.Search(len(m.order), func(i int) bool { return m.byID[m.order[i]].r.CreatedAt.After(r.CreatedAt) })
		m.order = slices.Insert(m.order, i, id)
	} else if rev > e.rev {
		m.rebaseLocked(e, r, rev)
	} else {
		return
	}
	if m.loaded {
		m.sweepLocked(e)
		m.advanceLocked(e)
		if m.dirty[id] {
			m.poke() // what this node did about it, written at once
		}
		close(m.changed)
		m.changed = make(chan struct{})
	}
}

// awaitRelease waits, a little, for the controller (maybe another
// node) to release e's first wave and for the nodes the released
// devices are connected to to send them their frame, so that the
// operator who started it through any node is answered as on one
// server: the canaries sent. Past a lease (no controller yet, or a
// registry that is behind) it answers what it has.
func (m *Manager) awaitRelease(e *entry) Rollout {
	t := time.NewTimer(m.opt.Lease)
	defer t.Stop()
	for {
		m.mu.Lock()
		ch := m.changed
		if !m.releasingLocked(e) || m.byID[e.r.ID] != e {
			ch = nil
		}
		out := m.viewLocked(e, true)
		m.mu.Unlock()
		if ch == nil {
			return out
		}
		select {
		case <-ch:
		case <-t.C:
			return out
		case <-m.stop:
			return out
		}
	}
}

func (f *feed) Gone(id string, rev uint64) {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.byID[id]; e != nil && rev > e.rev {
		m.dropLocked(id)
		delete(m.gone, id)
	}
}

// dropLocked forgets rollout id.
func (m *Manager) dropLocked(id string) {
	delete(m.byID, id)
	delete(m.dirty, id)
	m.order = slices.DeleteFunc(m.order, func(s string) bool { return s == id })
}

// rebaseLocked takes remote, the record at rev, with this node's changes
// since e.base merged in.
func (m *Manager) rebaseLocked(e *entry, remote *Rollout, rev uint64) {
	e.r = merge(&e.base, &e.r, remote)
	e.base, e.rev = cloneRollout(remote), rev
	if !sameRollout(&e.r, remote) {
		m.dirty[e.r.ID] = true
	}
}

// refresh reads id's record at the store and merges it in.
func (m *Manager) refresh(id string) error {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	data, rev, err := m.st.Get(ctx, id)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byID[id]
	switch {
	case e == nil || rev <= e.rev && rev != 0:
		return nil
	case rev == 0:
		m.dropLocked(id) // removed by another node
		return nil
	}
	r, err := Parse(data, m.opt.MaxDevices)
	if err != nil {
		return fmt.Errorf("%s is refused: %w", m.st.Where(id), err)
	}
	m.rebaseLocked(e, r, rev)
	return nil
}

func newEntry(r Rollout) *entry {
	e := &entry{r: r, idx: make(map[string]int, len(r.Devices))}
	for i, d := range r.Devices {
		e.idx[d.PeerID] = i
	}
	return e
}

func cloneRollout(r *Rollout) Rollout {
	c := *r
	c.Target.Peers = slices.Clone(r.Target.Peers)
	if r.Paused != nil {
		p := *r.Paused
		c.Paused = &p
	}
	c.Devices = slices.Clone(r.Devices)
	c.Counts = nil
	return c
}

func sameDevice(a, b *Device) bool {
	return a.PeerID == b.PeerID && a.Platform == b.Platform && a.Wave == b.Wave && a.State == b.State && a.Reason == b.Reason &&
		a.Since.Equal(b.Since) && a.Running == b.Running && a.Was == b.Was && a.Attempt == b.Attempt &&
		a.Delivery == b.Delivery
}

func samePause(a, b *Pause) bool {
	return (a == nil) == (b == nil) && (a == nil || a.PeerID == b.PeerID && a.State == b.State && a.Reason == b.Reason && a.By == b.By && a.At.Equal(b.At))
}

func sameRollout(a, b *Rollout) bool {
	if a.State != b.State || !samePause(a.Paused, b.Paused) || a.Wave != b.Wave || a.Note != b.Note ||
		!a.UpdatedAt.Equal(b.UpdatedAt) || len(a.Devices) != len(b.Devices) {
		return false
	}
	for i := range a.Devices {
		if !sameDevice(&a.Devices[i], &b.Devices[i]) {
			return false
		}
	}
	return true
}

// stateRank orders the rollout states two nodes set at once: an abort
// wins, then the end; else the record's.
func stateRank(s string) int {
	switch s {
	case Aborted:
		return 2
	case Done:
		return 1
	}
	return 0
}

// merge is remote with local's changes since base: a device local
// changed (and remote did not, or earlier) is local's; the state local
// changed, when remote did not or local's ranks higher; the furthest
// wave; the later update time. A base whose devices do not line up
// with local's (none: the record was never read back, as when a
// node's watch brings its own first write before the write returns)
// cannot say which side changed a device: each device is then the
// side that changed it last, remote's on a tie. Taking remote's
// devices whole there would keep local's furthest wave without the
// devices local released in it, which no node would then send.
func merge(base, local, remote *Rollout) Rollout {
	out := cloneRollout(remote)
	if len(local.Devices) == len(remote.Devices) {
		aligned := len(base.Devices) == len(local.Devices)
		for i := range local.Devices {
			l, r := &local.Devices[i], &remote.Devices[i]
			if l.PeerID != r.PeerID {
				continue
			}
			if !aligned {
				if l.Since.After(r.Since) {
					out.Devices[i] = *l
				}
				continue
			}
			b := &base.Devices[i]
			if l.PeerID != b.PeerID || sameDevice(l, b) {
				continue
			}
			if sameDevice(r, b) || !l.Since.Before(r.Since) {
				out.Devices[i] = *l
			}
		}
	}
	if local.State != base.State || !samePause(local.Paused, base.Paused) {
		if (remote.State == base.State && samePause(remote.Paused, base.Paused)) || stateRank(local.State) > stateRank(remote.State) {
			out.State, out.Paused = local.State, local.Paused
			if local.Paused != nil {
				p := *local.Paused
				out.Paused = &p
			}
			out.Note = local.Note
		}
	} else if local.Note != base.Note && remote.Note == base.Note {
		out.Note = local.Note
	}
	out.Wave = max(local.Wave, remote.Wave)
	if local.UpdatedAt.After(out.UpdatedAt) {
		out.UpdatedAt = local.UpdatedAt
	}
	return out
}

// Close stops the ticker and the feed, writes what is behind and closes
// the storage.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return nil
	}
	m.stopped = true
	m.mu.Unlock()
	close(m.stop)
	<-m.done
	err := m.flush()
	m.cancel()
	<-m.follow
	return errors.Join(err, m.st.Close())
}

// run is the ticker: the lease, offline devices, waves, and the records
// behind.
func (m *Manager) run() {
	defer close(m.done)
	t := time.NewTicker(m.opt.Tick)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.tick()
		case <-m.wake:
		}
		if err := m.flush(); err != nil {
			m.opt.Log.Error("rollouts not written", "err", err)
		}
	}
}

// poke asks the ticker to write the records behind now.
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// flush writes every rollout whose record is behind.
func (m *Manager) flush() error {
	m.mu.Lock()
	ids := make([]string, 0, len(m.dirty)+len(m.gone))
	for id := range m.dirty {
		if e := m.byID[id]; e != nil && e.rev == 0 {
			continue // being created: Create writes it (and drops it if that fails)
		}
		ids = append(ids, id)
	}
	for id := range m.gone {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, m.save(id, true))
	}
	return errors.Join(errs...)
}

// save writes one rollout's record (or removes it when it was dropped);
// with merge, a conflict is merged and written again, else it is
// returned (ErrConflict).
func (m *Manager) save(id string, merging bool) error {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	return m.saveHeld(id, merging)
}

// saveHeld is save with m.saveMu held.
func (m *Manager) saveHeld(id string, merging bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), 10*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		m.mu.Lock()
		e := m.byID[id]
		if e == nil {
			rev, ok := m.gone[id]
			m.mu.Unlock()
			if !ok {
				return nil
			}
			if err := m.st.Delete(ctx, id, rev); err != nil && !errors.Is(err, ErrConflict) {
				return err // tried again at the next tick
			}
			m.mu.Lock()
			delete(m.gone, id)
			m.mu.Unlock()
			return nil
		}
		if !m.dirty[id] && e.rev != 0 {
			m.mu.Unlock()
			return nil
		}
		delete(m.dirty, id)
		snap, rev := cloneRollout(&e.r), e.rev
		m.mu.Unlock()
		data, err := json.Marshal(&snap)
		if err == nil && m.info.MaxRecordBytes > 0 && len(data) > m.info.MaxRecordBytes {
			err = fmt.Errorf("%w: %s: %d bytes, more than the store's %d", ErrFull, m.st.Where(id), len(data), m.info.MaxRecordBytes)
		}
		var nrev uint64
		if err == nil {
			nrev, err = m.st.Put(ctx, id, data, rev)
		}
		m.mu.Lock()
		if err == nil {
			if e.rev == rev {
				e.base, e.rev = snap, nrev
			}
			if _, dropped := m.gone[id]; dropped && m.byID[id] != e {
				m.gone[id] = nrev // dropped while it was written: remove what was written
			}
			m.mu.Unlock()
			return nil
		}
		if m.byID[id] == e {
			m.dirty[id] = true // try again at the next tick
		}
		m.mu.Unlock()
		if !errors.Is(err, ErrConflict) || !merging || attempt >= maxConflicts {
			return err
		}
		if err := m.refresh(id); err != nil {
			return err
		}
	}
}

// tick renews (or takes) the lease; every node sends the released
// devices connected to it their frame; the controller marks the devices
// that went offline mid-update, sends the ones released while offline
// that are online now (a queue that was full), and advances the waves.
func (m *Manager) tick() {
	ctl := m.leaseTick()
	m.mu.Lock()
	defer m.mu.Unlock()
	if ctl != m.control {
		m.control = ctl
		if ctl {
			m.opt.Log.Info("rollouts: this node advances the rollouts (it holds their lease)", "node", m.opt.Node)
		} else {
			m.opt.Log.Warn("rollouts: this node no longer advances the rollouts (their lease is another's, or not renewed)", "node", m.opt.Node)
		}
	}
	if ctl && m.info.Shared {
		m.oneActiveLocked()
	}
	now := m.now()
	for _, id := range m.order {
		e := m.byID[id]
		r := &e.r
		if r.State != Running || e.rev == 0 {
			continue // nothing is done for a rollout before its record is stored (Create)
		}
		if m.info.Shared {
			m.sweepLocked(e)
		}
		if !ctl {
			continue
		}
		for i := range r.Devices {
			d := &r.Devices[i]
			switch d.State {
			case Sent, Downloading, Restarting:
				if p, ok := m.opt.Devices.Get(r.ChannelID, d.PeerID); (!ok || !p.Online) && now.Sub(d.Since) >= m.grace {
					was := d.State
					m.setLocked(e, d, Offline, "went offline while "+was)
					d.Was = was
				}
			case Waiting:
				if p, ok := m.opt.Devices.Get(r.ChannelID, d.PeerID); (!ok || !p.Online) && now.Sub(d.Since) >= m.grace {
					m.setLocked(e, d, Offline, "went offline while waiting ("+d.Reason+"): sent when it connects")
					d.Was = ""
				} else if !m.info.Shared {
					m.sendLocked(e, d) // sent once nothing holds it
				}
			case Offline:
				if !m.info.Shared && (d.Was == "" || d.Was == Sent) {
					if p, ok := m.opt.Devices.Get(r.ChannelID, d.PeerID); ok && p.Online {
						m.sendLocked(e, d)
					}
				}
			}
		}
		m.advanceLocked(e)
	}
}

// sweepLocked sends the released devices of a running rollout that are
// connected here and wait for their frame (offline when released,
// released by another node, or held by the window or their use, no
// longer) their frame.
func (m *Manager) sweepLocked(e *entry) {
	r := &e.r
	if r.State != Running || !m.info.Shared || e.rev == 0 {
		return
	}
	for i := range r.Devices {
		if d := &r.Devices[i]; d.State == Waiting || (d.State == Offline && (d.Was == "" || d.Was == Sent)) {
			m.trySendLocked(e, d)
		}
	}
}

// releasingLocked reports whether e's first wave is still on its way:
// not released yet, or a released device online (on another node) not
// sent its frame yet.
func (m *Manager) releasingLocked(e *entry) bool {
	r := &e.r
	if r.State != Running {
		return false
	}
	if r.Wave < 0 {
		return true
	}
	for i := range r.Devices {
		if d := &r.Devices[i]; d.Wave >= 0 && d.Wave <= r.Wave && d.State == Offline && d.Was == "" {
			if p, ok := m.opt.Devices.Get(r.ChannelID, d.PeerID); ok && p.Online {
				return true
			}
		}
	}
	return false
}

// oneActiveLocked keeps one active rollout per channel: two started at
// once through two nodes both got in; the later one is aborted.
func (m *Manager) oneActiveLocked() {
	first := map[string]*entry{}
	for _, id := range m.order { // oldest first
		e := m.byID[id]
		r := &e.r
		if !r.Active() {
			continue
		}
		f := first[r.ChannelID]
		if f == nil {
			first[r.ChannelID] = e
			continue
		}
		r.State, r.Paused, r.UpdatedAt = Aborted, nil, m.now()
		r.Note = fmt.Sprintf("aborted: rollout %s of %s was started on channel %s at the same time through another node (one active rollout per channel)", f.r.ID, f.r.Version, r.ChannelID)
		m.dirty[r.ID] = true
		m.event(r, events.RolloutAborted, "", "rollout "+r.ID+" of "+r.Version+" "+r.Note)
	}
}

// leaseTick renews or takes the controller's lease (a shared store) and
// reports whether this node may advance the rollouts now: always alone;
// in a cluster while it holds the lease, renewed within 2/3 of it.
func (m *Manager) leaseTick() bool {
	if !m.info.Shared {
		return true
	}
	l, me, lease := &m.lease, m.opt.Node, m.opt.Lease
	ctx, cancel := context.WithTimeout(m.ctx, lease/3)
	defer cancel()
	now := m.opt.Now()
	holder, rev, err := m.st.Lease(ctx)
	if err == nil {
		switch {
		case l.held && holder == me && rev == l.rev: // ours: renew
			var nrev uint64
			if nrev, err = m.st.TakeLease(ctx, me, rev); err == nil {
				l.rev, l.renewed = nrev, now
			}
		case rev == 0 || (holder == l.seen && rev == l.seenRev && now.Sub(l.seenAt) >= lease):
			// Nobody's, or another's unrenewed for a whole lease.
			var nrev uint64
			if nrev, err = m.st.TakeLease(ctx, me, rev); err == nil {
				l.held, l.rev, l.renewed = true, nrev, now
				m.opt.Log.Info("rollouts: took the controller's lease", "node", me, "from", holder)
			}
		default:
			l.held = false
			if holder != l.seen || rev != l.seenRev {
				l.seen, l.seenRev, l.seenAt = holder, rev, now
			}
		}
	}
	if errors.Is(err, ErrConflict) {
		l.held, err = false, nil
	}
	if err != nil && !l.reported {
		m.opt.Log.Warn("rollouts: the controller's lease cannot be read or written; retrying", "err", err)
	}
	l.reported = err != nil
	return l.held && now.Sub(l.renewed) < lease*2/3
}

// Controlling reports whether this node advances the rollouts now (it
// holds their lease; always on a single server).
func (m *Manager) Controlling() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.control && !m.stopped
}
