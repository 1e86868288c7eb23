package notices

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/metrics"
)

// Service is the notice mailboxes over a Storage: every rule of a
// notice's life is here, once, whatever keeps the records (the package
// doc). It implements Mailboxes and Store.
//
// The Service keeps the whole store in memory (the state): Follow loads
// it and, for a shared store, brings every other node's writes; this
// process's own writes are taken into it as soon as the store holds
// them. The connections read the state (Due, Count, ForPeer and the
// API's lists), so nothing on a device's path waits for the store,
// except an ack (read and written at the store: a device may ack here a
// notice another node sent it).
type Service struct {
	st   Storage
	info StorageInfo
	opt  Options
	log  *slog.Logger
	met  noticeMetrics
	now  func() time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ready  chan struct{} // closed once the state holds the store

	closeOnce sync.Once
	closeErr  error
	kick      chan struct{} // the pusher has dirty peers
	sent      chan sentWrite

	createMu sync.Mutex // a store not shared: one create at a time (the bound check, then the writes)

	mu      sync.Mutex
	started bool
	seq     uint64 // numbers notices and deliveries in the order the state took them
	gen     uint64 // the feed's load (a new load forgets what it did not bring)
	byID    map[string]*notice
	boxes   map[string]map[string]*mailbox // channel -> peer
	byKey   map[string]*mailbox            // a delivery key's "<channel b64>.<peer b64>" -> its mailbox
	dirty   map[chanPeer]bool
	pruned  []keyRev // pruned by this node's writes, for their writer to delete

	loading bool       // between the feed's Begin and Loaded
	touched []*mailbox // the mailboxes the load changed: marked for the pusher at Loaded, once each

	block []delivery // a load's deliveries not yet used (newDelivery)

	gaugeCh                  string // a load's changes of the gauges not set yet: of this channel
	gaugePending, gaugeBoxes int64

	lastRaw   []byte // the last delivery value decoded, and what it said
	lastValue deliveryValue
}

type chanPeer struct{ ch, peer string }

// notice is a notice in the state.
type notice struct {
	ch    string
	c     Content
	wire  []byte // the encoded link.Notice
	rev   uint64
	seq   uint64
	gen   uint64
	peers []*delivery // in no order; a delivery knows its place (pi)
	// keyable: the id can end a delivery's key (ValidID), checked once
	keyable bool
}

// delivery is one peer's delivery in the state.
type delivery struct {
	n    *notice
	peer string
	v    deliveryValue
	rev  uint64
	seq  uint64
	gen  uint64
	pi   int // its place in n.peers
}

// mailbox is one peer's deliveries, oldest notice first (by the
// notice's seq: a peer's delivery of a notice is found by a search).
type mailbox struct {
	ch, peer string
	key      string // "<channel b64>.<peer b64>", as in a delivery's key
	list     []*delivery
	open     int
	newest   uint64 // the seq of list's last notice (0: empty)
	touched  uint64 // the load (gen) that last listed it in touched
}

// find returns the mailbox's delivery of n, if any.
func (b *mailbox) find(n *notice) *delivery {
	if b == nil || b.newest < n.seq {
		return nil
	}
	i := sort.Search(len(b.list), func(i int) bool { return b.list[i].n.seq >= n.seq })
	if i < len(b.list) && b.list[i].n == n {
		return b.list[i]
	}
	return nil
}

// add puts d in the list, in its notice's place.
func (b *mailbox) add(d *delivery) {
	if d.n.seq > b.newest {
		b.list = append(b.list, d) // the newest notice: a load's order
		b.newest = d.n.seq
		return
	}
	i := sort.Search(len(b.list), func(i int) bool { return b.list[i].n.seq > d.n.seq })
	b.list = append(b.list, nil)
	copy(b.list[i+1:], b.list[i:])
	b.list[i] = d
}

// remove takes d out of the list.
func (b *mailbox) remove(d *delivery) {
	i := sort.Search(len(b.list), func(i int) bool { return b.list[i].n.seq >= d.n.seq })
	if i == len(b.list) || b.list[i] != d {
		return
	}
	copy(b.list[i:], b.list[i+1:])
	b.list[len(b.list)-1] = nil
	b.list = b.list[:len(b.list)-1]
	b.newest = 0
	if k := len(b.list); k > 0 {
		b.newest = b.list[k-1].n.seq
	}
}

type sentWrite struct {
	key string
	v   deliveryValue
	rev uint64
}

type noticeMetrics struct {
	created, acked, expired, withdrawn *metrics.CounterVec
	pending, mailboxes                 *metrics.GaugeVec
}

const (
	// noticeWriters is how many delivery writes of one create run at once.
	noticeWriters = 16
	// noticeTries bounds the compare-and-set retries of one change.
	noticeTries = 8
	// writeTimeout bounds one change's writes.
	writeTimeout = 10 * time.Second
)

// ErrLoading is the answer of a create while the state is not loaded
// yet (the API's 503).
var ErrLoading = errors.New("the notice mailboxes are not loaded yet; try again")

var (
	_ Mailboxes = (*Service)(nil)
	_ Store     = (*Service)(nil)
)

// New returns the mailboxes over st. It loads the state in the
// background and waits for that until ctx ends; until it is done a
// create answers ErrLoading, and the connections are pushed their
// notices once it is. Start runs the background work; Close stops it
// and closes st.
func New(ctx context.Context, st Storage, opt Options) (*Service, error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Sweep <= 0 {
		opt.Sweep = time.Second
	}
	if opt.MaxPerPeer == nil {
		opt.MaxPerPeer = func(string) int { return DefaultMaxPerPeer }
	}
	if opt.Directory == nil {
		opt.Directory = noPeers{}
	}
	if opt.Channel == nil {
		opt.Channel = func(string) (bool, bool) { return true, true }
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	s := &Service{st: st, info: st.Info(), opt: opt, log: opt.Logger, now: opt.Now,
		ready: make(chan struct{}), kick: make(chan struct{}, 1), sent: make(chan sentWrite, 1024),
		byID: map[string]*notice{}, boxes: map[string]map[string]*mailbox{}, byKey: map[string]*mailbox{}, dirty: map[chanPeer]bool{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.registerMetrics(opt.Metrics)
	s.goRun(func(ctx context.Context) {
		if err := st.Follow(ctx, &feed{s: s}); err != nil && ctx.Err() == nil {
			s.log.Error("notice mailboxes: the store's feed ended", "err", err)
		}
	})
	select {
	case <-s.ready:
	case <-ctx.Done():
		s.log.Warn("the notice mailboxes are not loaded yet; they load in the background (until then the notice API answers 503)", "err", ctx.Err())
	}
	return s, nil
}

func (s *Service) registerMetrics(reg *metrics.Registry) {
	if reg == nil {
		reg = &metrics.Registry{}
	}
	s.met = noticeMetrics{
		created:   reg.NewCounterVec("termlink_notices_created_total", "Notices put in a peer's mailbox (a broadcast counts once per peer).", "channel"),
		acked:     reg.NewCounterVec("termlink_notices_acked_total", "Notices a device acked (drawn).", "channel"),
		expired:   reg.NewCounterVec("termlink_notices_expired_total", "Notices that expired before their device acked them.", "channel"),
		withdrawn: reg.NewCounterVec("termlink_notices_withdrawn_total", "Notices withdrawn before their device acked them.", "channel"),
		pending:   reg.NewGaugeVec("termlink_notices_pending", "Notices in mailboxes not yet acked, expired or withdrawn.", "channel"),
		mailboxes: reg.NewGaugeVec("termlink_notice_mailboxes", "Peers with at least one notice not yet acked.", "channel"),
	}
}

// goRun runs fn on a goroutine the Service owns, until Close.
func (s *Service) goRun(fn func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn(s.ctx)
	}()
}

// Storage returns the storage the mailboxes keep their records in.
func (s *Service) Storage() Storage { return s.st }

// Start implements Mailboxes: the pusher, the sweeper (expiry, pruning,
// the store's upkeep) and the writer of "sent" run until Close.
func (s *Service) Start() {
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	s.goRun(s.pusher)
	s.goRun(s.sweeper)
	s.goRun(s.sentWriter)
	s.signal()
}

// Close implements Mailboxes: it stops the background work and closes
// the store.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		started := s.started
		s.mu.Unlock()
		if started { // what is queued for the sent writer is written first
			for drained := false; !drained; {
				select {
				case w := <-s.sent:
					s.writeSent(s.ctx, w)
				default:
					drained = true
				}
			}
		}
		s.cancel()
		s.wg.Wait()
		s.closeErr = s.st.Close()
	})
	return s.closeErr
}

// Routes implements Mailboxes: the notice API over these mailboxes.
func (s *Service) Routes(mux httpapi.Mux) { NewAPI(s, s.opt).Routes(mux) }

// Ready is closed once the state holds the store.
func (s *Service) Ready() <-chan struct{} { return s.ready }

func (s *Service) loaded() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// The state.

// feed takes a Storage's Follow into the state.
type feed struct {
	s      *Service
	gen    uint64
	pruned []keyRev // while loading a store that does not expire records: deleted once loaded
}

type keyRev struct {
	key string
	rev uint64
}

func (f *feed) Begin() {
	s := f.s
	s.mu.Lock()
	s.gen++
	f.gen = s.gen
	s.flushGauges()
	s.loading = true
	s.mu.Unlock()
}

func (f *feed) Put(key string, value []byte, rev uint64) {
	s := f.s
	s.mu.Lock()
	pruned := s.applyPut(key, value, rev, f.gen, false)
	s.mu.Unlock()
	if !s.info.ExpiresRecords {
		f.pruned = append(f.pruned, pruned...)
	}
}

func (f *feed) Gone(key string, rev uint64) {
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := strings.CutPrefix(key, "n."); ok {
		if n := s.byID[id]; n != nil && rev > n.rev {
			s.dropNotice(n, true)
		}
		return
	}
	ch, peer, id, ok := ParseDeliveryKey(key)
	if !ok {
		return
	}
	if n := s.byID[id]; n != nil && n.ch == ch {
		if d := s.deliveryOf(n, peer); d != nil && rev > d.rev {
			s.dropDelivery(d, true)
		}
	}
}

func (f *feed) Loaded() {
	s := f.s
	s.mu.Lock()
	s.flushGauges()
	s.loading = false
	s.block = nil
	// The load's changes are marked once per mailbox, not per record.
	for _, b := range s.touched {
		s.markDirty(b.ch, b.peer)
	}
	s.touched = nil
	for _, n := range s.byID {
		if n.gen < f.gen {
			s.dropNotice(n, true)
			continue
		}
		for i := len(n.peers) - 1; i >= 0; i-- { // a drop moves the last one here
			if d := n.peers[i]; d.gen < f.gen {
				s.dropDelivery(d, true)
			}
		}
	}
	if !s.loaded() {
		// The first load numbers the deliveries in created order (a
		// store's load brings them in the order of their last write):
		// no connection holds a cursor yet.
		for _, m := range s.boxes {
			for _, b := range m {
				for _, d := range b.list {
					s.seq++
					d.seq = s.seq
				}
			}
		}
	}
	s.mu.Unlock()
	s.deleteAll(f.pruned)
	f.pruned = nil
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// applyOwn takes this process's own write of key into the state, and
// deletes from the store what it pruned.
func (s *Service) applyOwn(key string, value []byte, rev uint64) {
	s.mu.Lock()
	s.applyPut(key, value, rev, s.gen, true)
	pruned := s.pruned
	s.pruned = nil
	s.mu.Unlock()
	s.deleteAll(pruned)
}

func (s *Service) deleteAll(keys []keyRev) {
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(s.ctx, writeTimeout)
		if err := s.st.Delete(ctx, k.key, k.rev); err != nil && !errors.Is(err, ErrConflict) && s.ctx.Err() == nil {
			s.log.Debug("notice record not pruned from the store", "key", k.key, "err", err)
		}
		cancel()
	}
}

// applyPut takes key's value at rev into the state (a revision it holds
// already, or an older one, changes nothing); it returns the records of
// the deliveries it pruned (s.mu held). own says this process wrote it
// (the caller tells the hooks); a change another wrote marks its peer
// for the pusher.
func (s *Service) applyPut(key string, data []byte, rev, gen uint64, own bool) []keyRev {
	if id, ok := strings.CutPrefix(key, "n."); ok {
		if n := s.byID[id]; n != nil {
			n.gen = max(n.gen, gen)
			return nil // a notice is never rewritten
		}
		var v noticeValue
		if err := json.Unmarshal(data, &v); err != nil || v.NoticeID != id {
			s.log.Warn("skipping a notice the store holds", "key", key, "err", err)
			return nil
		}
		s.seq++
		s.byID[id] = &notice{ch: v.Channel, c: v.Content, wire: Frame(v.Content), rev: rev, seq: s.seq, gen: gen, keyable: ValidID(id)}
		return nil
	}
	ch, peer, id, b, ok := s.parseDelivery(key)
	if !ok {
		return nil // a mailbox's record: the bound's, not the state's
	}
	n := s.byID[id]
	if n == nil || n.ch != ch || !n.keyable {
		return nil // its notice is gone (expired)
	}
	var v deliveryValue               // on the stack: decoded into another (it escapes), copied here
	if bytes.Equal(data, s.lastRaw) { // a broadcast's deliveries are alike: a load decodes each value once
		v = s.lastValue
	} else {
		p := new(deliveryValue)
		if err := json.Unmarshal(data, p); err != nil {
			s.log.Warn("skipping a notice delivery the store holds", "key", key, "err", err)
			return nil
		}
		v = *p
		s.lastRaw, s.lastValue = append(s.lastRaw[:0], data...), v
	}
	if b == nil {
		b = s.box(n.ch, peer, true) // the notice's channel string: compared by pointer after
	}
	d := b.find(n)
	if d != nil {
		d.gen = max(d.gen, gen)
		if rev <= d.rev {
			return nil
		}
		s.setValue(b, d, v)
		d.rev = rev
	} else {
		s.seq++
		d = s.newDelivery()
		*d = delivery{n: n, peer: b.peer, rev: rev, seq: s.seq, gen: gen, pi: len(n.peers)}
		n.peers = append(n.peers, d)
		b.add(d)
		s.setValue(b, d, v)
	}
	mine := own || (s.info.Node != "" && v.By == s.info.Node)
	switch {
	case mine:
	case s.loading:
		// A load's: its mailbox is marked once, at Loaded.
		if b.touched != s.gen {
			b.touched = s.gen
			s.touched = append(s.touched, b)
		}
	default:
		// Another writer's change (this node's own come back through
		// the feed too, maybe before the writer took them: their
		// writer tells the hooks).
		s.markDirty(ch, peer)
	}
	pruned := s.prune(b, ch, peer)
	if mine {
		// This node's write pruned them: its writer deletes them from
		// the store (applyOwn), whichever of the two took it first.
		s.pruned = append(s.pruned, pruned...)
		return nil
	}
	return pruned
}

// newDelivery allocates a delivery: a load takes them from blocks of
// 256 (a block stays in memory while one of its deliveries does; a
// load brings a notice's deliveries one after the other, and they go
// together), else one at a time (s.mu held).
func (s *Service) newDelivery() *delivery {
	if !s.loading {
		return new(delivery)
	}
	if len(s.block) == 0 {
		s.block = make([]delivery, 256)
	}
	d := &s.block[0]
	s.block = s.block[1:]
	return d
}

// setValue sets d's value, keeping the open counts and gauges (s.mu held).
func (s *Service) setValue(b *mailbox, d *delivery, v deliveryValue) {
	was, is := d.v.open(), v.open()
	d.v = v
	switch {
	case is && !was:
		boxes := int64(0)
		if b.open == 0 {
			boxes = 1
		}
		b.open++
		s.gauges(d.n.ch, 1, boxes)
	case was && !is:
		b.open--
		boxes := int64(0)
		if b.open == 0 {
			boxes = -1
		}
		s.gauges(d.n.ch, -1, boxes)
	}
}

// gauges adds to ch's gauges of pending notices and mailboxes; a load
// adds them up and sets them once a channel's run of records ends
// (flushGauges), rather than once per record (s.mu held).
func (s *Service) gauges(ch string, pending, boxes int64) {
	if !s.loading {
		s.met.pending.Add(ch, pending)
		if boxes != 0 {
			s.met.mailboxes.Add(ch, boxes)
		}
		return
	}
	if ch != s.gaugeCh {
		s.flushGauges()
		s.gaugeCh = ch
	}
	s.gaugePending += pending
	s.gaugeBoxes += boxes
}

func (s *Service) flushGauges() {
	if s.gaugePending != 0 {
		s.met.pending.Add(s.gaugeCh, s.gaugePending)
	}
	if s.gaugeBoxes != 0 {
		s.met.mailboxes.Add(s.gaugeCh, s.gaugeBoxes)
	}
	s.gaugeCh, s.gaugePending, s.gaugeBoxes = "", 0, 0
}

// prune forgets peer's oldest finished deliveries beyond the channel's
// bound (as many finished as open ones are kept), and a notice whose
// last delivery went; it returns their records (s.mu held).
func (s *Service) prune(b *mailbox, ch, peer string) []keyRev {
	if len(b.list) == b.open {
		return nil // nothing finished
	}
	limit := s.opt.MaxPerPeer(ch)
	drop := len(b.list) - b.open - limit
	if drop <= 0 {
		return nil
	}
	var gone []keyRev
	for _, d := range append([]*delivery(nil), b.list...) {
		if drop == 0 {
			break
		}
		if d.v.open() {
			continue
		}
		drop--
		gone = append(gone, keyRev{DeliveryKey(ch, peer, d.n.c.NoticeID), d.rev})
		n := d.n
		s.dropDelivery(d, false)
		if len(n.peers) == 0 && s.byID[n.c.NoticeID] == n {
			delete(s.byID, n.c.NoticeID)
			gone = append(gone, keyRev{NoticeKey(n.c.NoticeID), n.rev})
		}
	}
	return gone
}

// dropNotice forgets n and its deliveries (s.mu held).
func (s *Service) dropNotice(n *notice, mark bool) {
	for len(n.peers) > 0 {
		s.dropDelivery(n.peers[len(n.peers)-1], mark)
	}
	delete(s.byID, n.c.NoticeID)
}

// dropDelivery forgets d (s.mu held); mark tells the pusher.
func (s *Service) dropDelivery(d *delivery, mark bool) {
	n := d.n
	if k := len(n.peers) - 1; d.pi <= k && n.peers[d.pi] == d {
		n.peers[d.pi] = n.peers[k]
		n.peers[d.pi].pi = d.pi
		n.peers[k] = nil
		n.peers = n.peers[:k]
	}
	if b := s.box(d.n.ch, d.peer, false); b != nil {
		s.setValue(b, d, deliveryValue{})
		b.remove(d)
		if len(b.list) == 0 {
			delete(s.boxes[d.n.ch], d.peer)
			delete(s.byKey, b.key)
		}
	}
	if mark {
		s.markDirty(d.n.ch, d.peer)
	}
}

func (s *Service) box(ch, peer string, create bool) *mailbox {
	m := s.boxes[ch]
	if m == nil {
		if !create {
			return nil
		}
		m = map[string]*mailbox{}
		s.boxes[ch] = m
	}
	b := m[peer]
	if b == nil && create {
		b = &mailbox{ch: ch, peer: peer, key: keyPart(ch) + "." + keyPart(peer)}
		m[peer] = b
		s.byKey[b.key] = b
	}
	return b
}

// deliveryOf returns peer's delivery of n in the state, if any (s.mu held).
func (s *Service) deliveryOf(n *notice, peer string) *delivery {
	return s.box(n.ch, peer, false).find(n)
}

// parseDelivery splits a delivery's key (ParseDeliveryKey); b is the
// mailbox it names if the state has it: its channel and peer are then
// read from a map by the key's middle, not decoded, and the id is left
// to its notice to check (keyable) (s.mu held).
func (s *Service) parseDelivery(key string) (ch, peer, id string, b *mailbox, ok bool) {
	if j := strings.LastIndexByte(key, '.'); j > 2 && strings.HasPrefix(key, "d.") {
		if b := s.byKey[key[2:j]]; b != nil {
			return b.ch, b.peer, key[j+1:], b, true // the id is checked with its notice (keyable)
		}
	}
	ch, peer, id, ok = ParseDeliveryKey(key)
	return ch, peer, id, nil, ok
}

func (s *Service) markDirty(ch, peer string) {
	s.dirty[chanPeer{ch, peer}] = true
	s.signalLocked()
}

func (s *Service) signal() {
	s.mu.Lock()
	s.signalLocked()
	s.mu.Unlock()
}

func (s *Service) signalLocked() {
	if !s.started || len(s.dirty) == 0 {
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// pusher tells the registry of each peer whose mailbox another node
// changed and pushes its notices to its connection, if this node holds
// it (this node's own changes tell them at once).
func (s *Service) pusher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		s.mu.Lock()
		dirty := s.dirty
		s.dirty = map[chanPeer]bool{}
		s.mu.Unlock()
		for cp := range dirty {
			s.changed(cp.ch, cp.peer)
			if s.opt.Push != nil {
				s.opt.Push(cp.ch, cp.peer)
			}
		}
	}
}

func (s *Service) changed(channel string, peers ...string) {
	if s.opt.Changed != nil {
		for _, p := range peers {
			s.opt.Changed(channel, p)
		}
	}
}

func (s *Service) event(channel string, e events.Event) {
	if s.opt.Event != nil {
		s.opt.Event(channel, e)
	}
}

// put writes a record and takes it into the state.
func (s *Service) put(ctx context.Context, key string, v any, rev uint64, expires time.Time) error {
	data := mustJSON(v)
	nrev, err := s.st.Put(ctx, key, data, rev, expires)
	if err != nil {
		return err
	}
	s.applyOwn(key, data, nrev)
	return nil
}

// The operator's side (Store).

// NewID is a new notice id ("n-" and 18 random hex digits).
func NewID() string {
	var b [9]byte
	_, _ = rand.Read(b[:])
	return "n-" + hex.EncodeToString(b[:])
}

// Create implements Store: the bound checked for each peer (on the state
// under one lock, or for a shared store by a compare-and-set of the
// mailbox's record, so that creates on several nodes cannot overrun
// it), the notice, then each peer's delivery (a few at once); then the
// event, the push to the peers online and the Changed hook.
func (s *Service) Create(ch string, peers []string, sp Spec) (Created, error) {
	var res Created
	if !s.loaded() {
		return res, ErrLoading // the bound is checked on the whole state
	}
	ctx, cancel := context.WithTimeout(s.ctx, writeTimeout)
	defer cancel()
	limit := s.opt.MaxPerPeer(ch)
	c := Content{NoticeID: NewID(), Text: sp.Text, Priority: sp.Priority, DisplaySeconds: sp.DisplaySeconds,
		ExpiresAt: sp.ExpiresAt.UTC().Truncate(time.Second), CreatedAt: s.now().UTC().Truncate(time.Millisecond), Source: sp.Source}
	if s.info.Shared {
		var err error
		if res.Targets, res.Skipped, err = s.reserveAll(ctx, ch, peers, c, limit); err != nil {
			return Created{}, err
		}
	} else {
		s.createMu.Lock()
		defer s.createMu.Unlock()
		s.mu.Lock()
		for _, p := range peers {
			if b := s.box(ch, p, false); b != nil && b.open >= limit {
				res.Skipped = append(res.Skipped, p)
			} else {
				res.Targets = append(res.Targets, p)
			}
		}
		s.mu.Unlock()
	}
	if len(res.Targets) == 0 {
		return res, &MailboxFullError{Peers: res.Skipped, Max: limit}
	}
	res.NoticeID = c.NoticeID
	if err := s.put(ctx, NoticeKey(c.NoticeID), noticeValue{Channel: ch, Content: c}, 0, c.ExpiresAt); err != nil {
		s.releaseAll(ch, res.Targets, c.NoticeID)
		return Created{}, fmt.Errorf("the notice store did not take it: %w", err)
	}
	dv := deliveryValue{State: Pending, Expires: c.ExpiresAt, By: s.info.Node}
	errs := s.each(res.Targets, func(i int, p string) error {
		return s.put(ctx, DeliveryKey(ch, p, c.NoticeID), dv, 0, c.ExpiresAt)
	})
	stored := 0
	var failed error
	for _, err := range errs {
		if err != nil {
			failed = err
		} else {
			stored++
		}
	}
	if failed != nil {
		s.log.Warn("a notice stored for some of its peers only", "notice_id", c.NoticeID, "stored", stored, "of", len(res.Targets), "err", failed)
		return Created{}, fmt.Errorf("the notice store took it for %d of %d peers: %w", stored, len(res.Targets), failed)
	}
	s.met.created.Add(ch, uint64(len(res.Targets)))
	detail := fmt.Sprintf("source=%s targets=%d skipped=%d priority=%s", sp.Source, len(res.Targets), len(res.Skipped), sp.Priority)
	if s.info.Node != "" {
		detail += " node=" + s.info.Node
	}
	s.event(ch, events.Event{Event: "notice_created", MessageID: c.NoticeID, Preview: events.Preview(sp.Text), Detail: detail})
	res.Online = s.online(ch, res.Targets)
	s.changed(ch, res.Targets...)
	return res, nil
}

// each runs fn for every peer, a few at once, and returns their errors.
func (s *Service) each(peers []string, fn func(i int, p string) error) []error {
	errs := make([]error, len(peers))
	if len(peers) == 1 {
		errs[0] = fn(0, peers[0])
		return errs
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(noticeWriters, len(peers)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = fn(i, peers[i])
			}
		}()
	}
	for i := range peers {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// online pushes the notice to the peers connected here, in order, and
// counts them, with those another node holds (a shared store's
// Presence, asked a few at once).
func (s *Service) online(ch string, peers []string) int {
	count := 0
	var elsewhere []string
	for _, p := range peers {
		switch {
		case s.opt.Push != nil && s.opt.Push(ch, p):
			count++
		default:
			elsewhere = append(elsewhere, p)
		}
	}
	pres, _ := s.st.(Presence)
	if pres == nil || len(elsewhere) == 0 {
		return count
	}
	var mu sync.Mutex
	s.each(elsewhere, func(_ int, p string) error {
		if pres.Elsewhere(s.ctx, ch, p) {
			mu.Lock()
			count++
			mu.Unlock()
		}
		return nil
	})
	return count
}

// reserveAll takes a place for the notice in each peer's mailbox record
// (a shared store): the peers it got and those whose mailbox is full.
func (s *Service) reserveAll(ctx context.Context, ch string, peers []string, c Content, limit int) (targets, skipped []string, err error) {
	took := make([]bool, len(peers))
	errs := s.each(peers, func(i int, p string) error {
		ok, err := s.reserve(ctx, ch, p, c.NoticeID, c.ExpiresAt, limit)
		took[i] = ok
		return err
	})
	for i, p := range peers {
		switch {
		case errs[i] != nil:
			err = errs[i]
		case took[i]:
			targets = append(targets, p)
		default:
			skipped = append(skipped, p)
		}
	}
	if err != nil {
		s.releaseAll(ch, targets, c.NoticeID)
		return nil, nil, fmt.Errorf("the notice store did not take it: %w", err)
	}
	return targets, skipped, nil
}

// reserve takes a place for notice id in peer's mailbox record when it
// holds fewer than limit open deliveries. Places of expired notices, and
// of deliveries the state has finished (a release that did not land),
// are given back on the way.
func (s *Service) reserve(ctx context.Context, ch, peer, id string, exp time.Time, limit int) (bool, error) {
	key := boxKey(ch, peer)
	now := s.now()
	for range noticeTries {
		data, rev, err := s.st.Get(ctx, key)
		if err != nil {
			return false, err
		}
		var b boxValue
		if rev != 0 && json.Unmarshal(data, &b) != nil {
			b = boxValue{}
		}
		kept, last := b.Open[:0], exp
		for _, sl := range b.Open {
			at := time.Unix(sl.Expires, 0)
			if !now.Before(at) || s.finished(ch, peer, sl.ID) {
				continue
			}
			kept = append(kept, sl)
			if at.After(last) {
				last = at
			}
		}
		if len(kept) >= limit {
			return false, nil
		}
		b.Open = append(kept, boxSlot{ID: id, Expires: exp.Unix()})
		_, err = s.st.Put(ctx, key, mustJSON(b), rev, last)
		if errors.Is(err, ErrConflict) {
			continue
		}
		return err == nil, err
	}
	return false, fmt.Errorf("the notice mailbox of %s changed %d times while a notice was added", peer, noticeTries)
}

// finished says whether the state holds peer's delivery of id finished.
func (s *Service) finished(ch, peer, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.byID[id]; n != nil && n.ch == ch {
		d := s.deliveryOf(n, peer)
		return d != nil && !d.v.open()
	}
	return false
}

func (s *Service) releaseAll(ch string, peers []string, id string) {
	if !s.info.Shared {
		return
	}
	s.each(peers, func(_ int, p string) error { s.release(ch, p, id); return nil })
}

// release gives back notice id's place in peer's mailbox record (a
// shared store); one that does not land is given back by the next
// create.
func (s *Service) release(ch, peer, id string) {
	if !s.info.Shared {
		return
	}
	key := boxKey(ch, peer)
	ctx, cancel := context.WithTimeout(s.ctx, writeTimeout)
	defer cancel()
	for range noticeTries {
		data, rev, err := s.st.Get(ctx, key)
		if err != nil || rev == 0 {
			return
		}
		var b boxValue
		if json.Unmarshal(data, &b) != nil {
			return
		}
		i := -1
		last := time.Time{}
		for j, sl := range b.Open {
			if sl.ID == id {
				i = j
			} else if at := time.Unix(sl.Expires, 0); at.After(last) {
				last = at
			}
		}
		if i < 0 {
			return
		}
		b.Open = append(b.Open[:i], b.Open[i+1:]...)
		if last.IsZero() {
			last = s.now()
		}
		_, err = s.st.Put(ctx, key, mustJSON(b), rev, last)
		if !errors.Is(err, ErrConflict) {
			return
		}
	}
}

// Withdraw implements Store.
func (s *Service) Withdraw(ch, id, peer string) (int, error) {
	type open struct {
		peer string
		v    deliveryValue
		rev  uint64
	}
	var todo []open
	s.mu.Lock()
	n := s.byID[id]
	if n == nil || n.ch != ch || (peer != "" && s.deliveryOf(n, peer) == nil) {
		s.mu.Unlock()
		return 0, ErrUnknownNotice
	}
	for _, d := range n.peers {
		if d.v.open() && (peer == "" || d.peer == peer) {
			todo = append(todo, open{d.peer, d.v, d.rev})
		}
	}
	s.mu.Unlock()
	sort.Slice(todo, func(i, j int) bool { return todo[i].peer < todo[j].peer })
	var withdrawn []string
	var failed error
	for _, o := range todo {
		ok, err := s.finish(ch, o.peer, id, o.v, o.rev, Withdrawn)
		if err != nil {
			failed = err
			break
		}
		if ok {
			withdrawn = append(withdrawn, o.peer)
		}
	}
	if len(withdrawn) > 0 {
		s.met.withdrawn.Add(ch, uint64(len(withdrawn)))
		s.event(ch, events.Event{Event: "notice_withdrawn", MessageID: id, PeerID: peer, Detail: fmt.Sprintf("peers=%d", len(withdrawn))})
		s.changed(ch, withdrawn...)
	}
	return len(withdrawn), failed
}

// finish moves an open delivery (v at rev, as the state had it) to a
// final state, reading it again when it changed meanwhile; false when it
// was no longer open (another writer finished it: the counters and the
// event are that writer's).
func (s *Service) finish(ch, peer, id string, v deliveryValue, rev uint64, state string) (bool, error) {
	key := DeliveryKey(ch, peer, id)
	ctx, cancel := context.WithTimeout(s.ctx, writeTimeout)
	defer cancel()
	for range noticeTries {
		if !v.open() {
			return false, nil
		}
		v.State, v.By = state, s.info.Node
		if state == Acked {
			at := s.now().UTC()
			v.AckedAt = &at
		}
		err := s.put(ctx, key, v, rev, v.Expires)
		if err == nil {
			s.release(ch, peer, id)
			return true, nil
		}
		if !errors.Is(err, ErrConflict) {
			return false, err
		}
		data, r, err := s.st.Get(ctx, key)
		if err != nil || r == 0 {
			return false, err
		}
		v, rev = deliveryValue{}, r
		if err := json.Unmarshal(data, &v); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("notice %s of %s changed %d times", id, peer, noticeTries)
}

// The device's side.

// Due implements Mailboxes, from the state; after is a number of this
// process's state (a connection's cursor).
func (s *Service) Due(ch, peer string, after uint64, limit int, now time.Time) (frames [][]byte, ids []string, last uint64, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last = after
	b := s.box(ch, peer, false)
	if b == nil {
		return nil, nil, last, false
	}
	var due []*delivery
	for _, d := range b.list {
		if d.seq > after && d.v.open() && now.Before(d.n.c.ExpiresAt) {
			due = append(due, d)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].seq < due[j].seq })
	for _, d := range due {
		if len(frames) == limit {
			return frames, ids, last, true
		}
		frames = append(frames, d.n.wire)
		ids = append(ids, d.n.c.NoticeID)
		last = d.seq
	}
	return frames, ids, last, false
}

// MarkSent implements Mailboxes: the state says sent at once; the store
// is told by a writer of its own (sent is for the API only: a connection
// sends what is open, sent or not), and a write that finds the delivery
// changed (acked meanwhile) is dropped.
func (s *Service) MarkSent(ch, peer string, ids []string, at time.Time) {
	at = at.UTC()
	for _, id := range ids {
		s.mu.Lock()
		var d *delivery
		if n := s.byID[id]; n != nil && n.ch == ch {
			d = s.deliveryOf(n, peer)
		}
		ok := d != nil && d.v.open()
		var w sentWrite
		if ok {
			d.v.State, d.v.SentAt, d.v.By = Sent, &at, s.info.Node
			w = sentWrite{key: DeliveryKey(ch, peer, id), v: d.v, rev: d.rev}
		}
		s.mu.Unlock()
		if !ok {
			continue
		}
		select {
		case s.sent <- w:
		default: // the writer is behind: the store keeps "pending"
		}
		s.event(ch, events.Event{Event: "notice_sent", PeerID: peer, MessageID: id})
	}
}

func (s *Service) sentWriter(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-s.sent:
			s.writeSent(ctx, w)
		}
	}
}

func (s *Service) writeSent(ctx context.Context, w sentWrite) {
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	err := s.put(wctx, w.key, w.v, w.rev, w.v.Expires)
	cancel()
	if err != nil && !errors.Is(err, ErrConflict) && ctx.Err() == nil {
		s.log.Debug("notice not marked sent in the store", "key", w.key, "err", err)
	}
}

// Ack implements Mailboxes, at the store: a device may ack here a notice
// another node sent it. An ack for a notice already finished changes
// nothing; one for a notice the peer was never sent is ErrUnknownNotice.
func (s *Service) Ack(ch, peer, id string) error {
	if !ValidID(id) {
		return ErrUnknownNotice
	}
	ctx, cancel := context.WithTimeout(s.ctx, writeTimeout)
	data, rev, err := s.st.Get(ctx, DeliveryKey(ch, peer, id))
	cancel()
	if err != nil {
		return fmt.Errorf("reading the notice delivery: %w", err)
	}
	if rev == 0 {
		return ErrUnknownNotice
	}
	var v deliveryValue
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("notice delivery %s of %s: %w", id, peer, err)
	}
	ok, err := s.finish(ch, peer, id, v, rev, Acked)
	if err != nil || !ok {
		return err
	}
	s.met.acked.Inc(ch)
	s.event(ch, events.Event{Event: "notice_acked", PeerID: peer, MessageID: id})
	s.changed(ch, peer)
	return nil
}

// FromAgent implements Mailboxes: an agent's unsolicited output (a Nuum
// frame after its turn ended, a Terminal Protocol v1 "notice" line)
// becomes a notice for peer.
func (s *Service) FromAgent(ch, peer, text string) error {
	_, err := s.Create(ch, []string{peer}, AgentSpec(text, s.now()))
	return err
}

// Count implements Mailboxes: peer's deliveries not yet acked, expired
// or withdrawn, from the state.
func (s *Service) Count(ch, peer string) int {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := 0
	if b := s.box(ch, peer, false); b != nil {
		for _, d := range b.list {
			if d.v.open() && now.Before(d.n.c.ExpiresAt) {
				c++
			}
		}
	}
	return c
}

// ForPeer implements Mailboxes.
func (s *Service) ForPeer(ch, peer string) any { return s.ListPeer(ch, peer, false) }

// Expiry.

// sweeper expires and prunes notices, and lets the store do its upkeep,
// until Close.
func (s *Service) sweeper(ctx context.Context) {
	t := time.NewTicker(s.opt.Sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sweep(s.now())
			if err := s.st.Maintain(); err != nil {
				s.log.Warn("notice store upkeep failed; retrying later", "err", err)
			}
		}
	}
}

// Sweep is one round of the sweeper as of now: the open deliveries of a
// notice past expires_at are marked expired (the writer whose write
// lands counts them and records notice_expired), and a notice expired
// KeepExpired ago is forgotten (and deleted from a store that does not
// expire records itself).
func (s *Service) Sweep(now time.Time) {
	type open struct {
		n    *notice
		peer string
		v    deliveryValue
		rev  uint64
	}
	var due []open
	var gone []keyRev
	keep := KeepExpired
	if s.info.ExpiresRecords {
		keep += time.Minute // the store's own expiry comes first
	}
	s.mu.Lock()
	for _, n := range s.byID {
		if now.Before(n.c.ExpiresAt) {
			continue
		}
		if !now.Before(n.c.ExpiresAt.Add(keep)) {
			if !s.info.ExpiresRecords {
				for _, d := range n.peers {
					gone = append(gone, keyRev{DeliveryKey(n.ch, d.peer, n.c.NoticeID), d.rev})
				}
				gone = append(gone, keyRev{NoticeKey(n.c.NoticeID), n.rev})
			}
			s.dropNotice(n, false)
			continue
		}
		for _, d := range n.peers {
			if d.v.open() {
				due = append(due, open{n, d.peer, d.v, d.rev})
			}
		}
	}
	s.mu.Unlock()
	s.deleteAll(gone)
	sort.Slice(due, func(i, j int) bool {
		if due[i].n.seq != due[j].n.seq {
			return due[i].n.seq < due[j].n.seq
		}
		return due[i].peer < due[j].peer
	})
	var order []*notice
	expired := map[*notice][]string{}
	for _, o := range due {
		if ok, err := s.finish(o.n.ch, o.peer, o.n.c.NoticeID, o.v, o.rev, Expired); ok && err == nil {
			if expired[o.n] == nil {
				order = append(order, o.n)
			}
			expired[o.n] = append(expired[o.n], o.peer)
		}
	}
	for _, n := range order {
		peers := expired[n]
		s.met.expired.Add(n.ch, uint64(len(peers)))
		s.event(n.ch, events.Event{Event: "notice_expired", MessageID: n.c.NoticeID, Preview: events.Preview(n.c.Text),
			Detail: fmt.Sprintf("%d peers had not acked it by %s", len(peers), n.c.ExpiresAt.UTC().Format(time.RFC3339))})
		s.changed(n.ch, peers...)
	}
}

// The lists, from the state.

func (d *delivery) state(now time.Time) DeliveryState {
	st := d.v.State
	if d.v.open() && !now.Before(d.n.c.ExpiresAt) {
		st = Expired // the sweeper has not got to it yet
	}
	return DeliveryState{State: st, SentAt: timePtr(d.v.SentAt), AckedAt: timePtr(d.v.AckedAt)}
}

func timePtr(t *time.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// ListPeer implements Store.
func (s *Service) ListPeer(ch, peer string, all bool) []PeerNotice {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []PeerNotice{}
	if b := s.box(ch, peer, false); b != nil {
		for _, d := range b.list {
			st := d.state(now)
			if all || st.State == Pending || st.State == Sent {
				out = append(out, PeerNotice{Content: d.n.c, DeliveryState: st})
			}
		}
	}
	return out
}

// List implements Store.
func (s *Service) List(ch string, all bool) []Notice {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var list []*notice
	for _, n := range s.byID {
		if n.ch == ch && len(n.peers) > 0 {
			list = append(list, n)
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].seq < list[j].seq })
	out := []Notice{}
	for _, n := range list {
		v := Notice{Content: n.c, Peers: make([]Delivery, 0, len(n.peers))}
		open := false
		for _, d := range n.peers {
			st := d.state(now)
			open = open || st.State == Pending || st.State == Sent
			v.Peers = append(v.Peers, Delivery{PeerID: d.peer, DeliveryState: st})
		}
		if open || all {
			sort.Slice(v.Peers, func(i, j int) bool { return v.Peers[i].PeerID < v.Peers[j].PeerID })
			out = append(out, v)
		}
	}
	return out
}
