package notices

import (
	"bufio"
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"termlink/internal/durable"
	"termlink/link"
	"termlink/server/events"
	"termlink/server/metrics"
	"termlink/server/wal"
)

// Local is the mailboxes kept in the workspace (the package doc's
// Durability and Bounds): the Mailboxes of a single termserver.
type Local struct {
	path    string // workspace/notices
	log     *slog.Logger
	wl      *wal.Log
	opt     Options
	met     noticeMetrics
	snap    string // snapshot file path
	started bool

	createMu sync.Mutex   // one create at a time: bound check, seq, apply
	logMu    sync.RWMutex // appends and their apply hold it for reading; a snapshot for writing

	mu        sync.Mutex
	byID      map[string]*notice
	boxes     map[string]map[string]*mailbox // channel -> peer -> mailbox
	seq       uint64
	expiry    expiryHeap
	sinceSnap int // payload bytes logged since the last snapshot
	failed    error

	stop chan struct{}
	done chan struct{}
}

// Options are everything the mailboxes need of the rest of the server,
// given at Open. The functions are called without the mailboxes' locks
// held, and only once Start ran (Open's replay calls none of them) or an
// API call was made.
type Options struct {
	NoSync bool
	// MaxPerPeer is the bound of a channel's mailboxes (nil: DefaultMaxPerPeer).
	MaxPerPeer func(channelID string) int
	// Push pushes the notices due for peer into the channel's live
	// connection of peer; it reports whether the peer is online and takes
	// notices.
	Push func(channelID, peerID string) bool
	// Event records a channel event.
	Event func(channelID string, e events.Event)
	// Changed is told of each peer whose count of open notices changed
	// (the device registry's notices_pending).
	Changed func(channelID, peerID string)
	// Directory knows the channels' peers and tags, for broadcasts by tag
	// or to all: the device registry (nil: no peer is known).
	Directory PeerDirectory
	// Channel says whether a channel is configured and enabled, for the
	// HTTP API's answers (nil: every channel is).
	Channel func(channelID string) (configured, enabled bool)
	// Metrics registers the notice series here (nil: none kept).
	Metrics *metrics.Registry
	// Sweep is how often expiry is checked (default 1s).
	Sweep time.Duration
	// SnapshotBytes is how much is logged before a snapshot (default 8 MiB).
	SnapshotBytes int
	Logger        *slog.Logger
}

const (
	// DefaultMaxPerPeer bounds a mailbox when the channel sets no
	// maxNoticesPerPeer.
	DefaultMaxPerPeer = 100
	// KeepExpired is how long an expired notice stays listed.
	KeepExpired        = 10 * time.Minute
	noticeSnapshotFile = "snapshot.json"
	// noticeSegmentBytes is the notice log's segment size: released
	// segments are deleted, so the log holds at most about this much
	// beyond what the snapshot holds.
	noticeSegmentBytes = 16 << 20
)

// Notice states, as the API names them.
const (
	Pending   = "pending"
	Sent      = "sent"
	Acked     = "acked"
	Expired   = "expired"
	Withdrawn = "withdrawn"
)

type notice struct {
	id, channel, text, priority, source string
	display                             int
	seq                                 uint64
	created, expires                    time.Time
	peers                               map[string]*delivery
	wire                                []byte // the encoded link.Notice
	gone                                bool   // pruned
}

type delivery struct {
	n               *notice
	peer            string
	state           string
	sentAt, ackedAt time.Time
}

func (d *delivery) open() bool { return d.state == Pending || d.state == Sent }

// mailbox is one peer's deliveries in created order.
type mailbox struct {
	list []*delivery
	open int
}

// noticeRecord is one log record; Op "create" carries the notice.
type noticeRecord struct {
	Op       string     `json:"op"` // "create", "ack", "withdraw"
	Channel  string     `json:"ch"`
	ID       string     `json:"id"`
	Peers    []string   `json:"peers,omitempty"`
	At       *time.Time `json:"at,omitempty"`
	Seq      uint64     `json:"seq,omitempty"`
	Text     string     `json:"text,omitempty"`
	Priority string     `json:"priority,omitempty"`
	Display  int        `json:"display,omitempty"`
	Source   string     `json:"source,omitempty"`
	Created  *time.Time `json:"created,omitempty"`
	Expires  *time.Time `json:"expires,omitempty"`
}

// Errors of the Go API; the HTTP API turns them into statuses.
var (
	ErrUnknownNotice = errors.New("unknown notice")
)

// MailboxFullError names the peers whose mailbox is full.
type MailboxFullError struct {
	Peers []string
	Max   int
}

func (e *MailboxFullError) Error() string {
	if len(e.Peers) == 1 {
		return fmt.Sprintf("the notice mailbox of peer %s is full: %d notices are pending (maxNoticesPerPeer); withdraw some or wait for acks", e.Peers[0], e.Max)
	}
	return fmt.Sprintf("the notice mailboxes of peers %v are full: %d notices pending each (maxNoticesPerPeer)", e.Peers, e.Max)
}

type noticeMetrics struct {
	created, acked, expired, withdrawn *metrics.CounterVec
	pending, mailboxes                 *metrics.GaugeVec
}

// Open opens (or creates) the mailboxes in dir; Start runs their sweeper.
func Open(dir string, opt Options) (*Local, error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Sweep <= 0 {
		opt.Sweep = time.Second
	}
	if opt.SnapshotBytes <= 0 {
		opt.SnapshotBytes = 8 << 20
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
	reg := opt.Metrics
	if reg == nil {
		reg = &metrics.Registry{}
	}
	ns := &Local{path: dir, log: opt.Logger, opt: opt, snap: filepath.Join(dir, noticeSnapshotFile),
		byID: map[string]*notice{}, boxes: map[string]map[string]*mailbox{},
		stop: make(chan struct{}), done: make(chan struct{})}
	ns.met = noticeMetrics{
		created:   reg.NewCounterVec("termlink_notices_created_total", "Notices put in a peer's mailbox (a broadcast counts once per peer).", "channel"),
		acked:     reg.NewCounterVec("termlink_notices_acked_total", "Notices a device acked (drawn).", "channel"),
		expired:   reg.NewCounterVec("termlink_notices_expired_total", "Notices that expired before their device acked them.", "channel"),
		withdrawn: reg.NewCounterVec("termlink_notices_withdrawn_total", "Notices withdrawn before their device acked them.", "channel"),
		pending:   reg.NewGaugeVec("termlink_notices_pending", "Notices in mailboxes not yet acked, expired or withdrawn.", "channel"),
		mailboxes: reg.NewGaugeVec("termlink_notice_mailboxes", "Peers with at least one notice not yet acked.", "channel"),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("opening the notice mailboxes: %w", err)
	}
	t0 := time.Now()
	snapLSN, err := ns.loadSnapshot()
	if err != nil {
		return nil, err
	}
	replayed := 0
	wl, err := wal.Open(filepath.Join(dir, "wal"), wal.Options{NoSync: opt.NoSync, Logger: opt.Logger, SegmentBytes: noticeSegmentBytes}, func(lsn wal.LSN, p []byte) error {
		if uint64(lsn) <= snapLSN {
			return nil // the snapshot holds it
		}
		var r noticeRecord
		if err := json.Unmarshal(p, &r); err != nil {
			ns.log.Warn("notice log: skipping a record", "lsn", lsn, "err", err)
			return nil
		}
		ns.apply(&r, false)
		replayed++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("opening the notice log: %w", err)
	}
	ns.wl = wl
	if replayed > 0 {
		ns.sinceSnap = opt.SnapshotBytes // the sweeper's first round writes a snapshot
	}
	ns.log.Info("notice mailboxes opened", "notices", len(ns.byID), "replayed", replayed, "took", time.Since(t0).Round(time.Millisecond))
	return ns, nil
}

// Start runs the sweeper (expiry, pruning, snapshots) until Close; the
// server calls it once what the Options' functions reach is built.
func (ns *Local) Start() {
	ns.started = true
	go ns.sweeper()
}

// Close stops the sweeper, writes a snapshot and closes the log.
func (ns *Local) Close() error {
	if ns.started {
		close(ns.stop)
		<-ns.done
	}
	err := ns.snapshot()
	return errors.Join(err, ns.wl.Close())
}

// append logs r (durable on return) and applies it.
func (ns *Local) append(r *noticeRecord) error {
	p, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding a notice record: %w", err)
	}
	ns.logMu.RLock()
	defer ns.logMu.RUnlock()
	// Not cancellable: a record whose Append was abandoned may still be
	// logged, and would then appear after a restart.
	if _, err := ns.wl.Append(context.Background(), p); err != nil {
		if errors.Is(err, wal.ErrFailed) {
			ns.mu.Lock()
			ns.failed = fmt.Errorf("the notice log failed and takes no more writes until termserver restarts: %w", err)
			ns.mu.Unlock()
		}
		return fmt.Errorf("writing the notice log: %w", err)
	}
	ev := ns.apply(r, true)
	ns.mu.Lock()
	ns.sinceSnap += len(p)
	ns.mu.Unlock()
	if ev != nil {
		ns.event(r.Channel, *ev)
	}
	return nil
}

// apply changes the state by r; live says it happens now (counters, and
// the event it returns for the caller to record), not in a replay.
// Applying a record twice changes nothing.
func (ns *Local) apply(r *noticeRecord, live bool) *events.Event {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	switch r.Op {
	case "create":
		if ns.byID[r.ID] != nil || r.Created == nil || r.Expires == nil {
			return nil
		}
		n := &notice{id: r.ID, channel: r.Channel, text: r.Text, priority: r.Priority, source: r.Source,
			display: r.Display, seq: r.Seq, created: *r.Created, expires: *r.Expires, peers: make(map[string]*delivery, len(r.Peers))}
		n.wire = link.MustEncode(&link.Notice{NoticeID: n.id, Text: n.text, Priority: n.priority,
			DisplaySeconds: n.display, ExpiresAt: n.expires.UTC().Format(time.RFC3339)})
		ns.seq = max(ns.seq, r.Seq)
		ns.byID[n.id] = n
		ds := make([]*delivery, len(r.Peers))
		for i, p := range r.Peers {
			ds[i] = &delivery{peer: p, state: Pending}
		}
		ns.addDeliveries(n, ds)
		heap.Push(&ns.expiry, expiryEntry{at: n.expires, n: n})
		if live {
			ns.met.created.Add(n.channel, uint64(len(r.Peers)))
		}
	case "ack":
		n := ns.byID[r.ID]
		if n == nil {
			return nil
		}
		d := n.peers[firstOr(r.Peers)]
		if d == nil || !d.open() {
			return nil
		}
		at := time.Now()
		if r.At != nil {
			at = *r.At
		}
		ns.finish(d, Acked)
		d.ackedAt = at
		if live {
			ns.met.acked.Inc(n.channel)
			return &events.Event{Event: "notice_acked", PeerID: d.peer, MessageID: n.id}
		}
	case "withdraw":
		n := ns.byID[r.ID]
		if n == nil {
			return nil
		}
		for _, p := range r.Peers {
			if d := n.peers[p]; d != nil && d.open() {
				ns.finish(d, Withdrawn)
				if live {
					ns.met.withdrawn.Inc(n.channel)
				}
			}
		}
	}
	return nil
}

func firstOr(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// addDeliveries puts n in the mailboxes of ds's peers (ns.mu held).
// Finished deliveries beyond the bound are pruned, oldest first.
func (ns *Local) addDeliveries(n *notice, ds []*delivery) {
	ch := n.channel
	limit := ns.opt.MaxPerPeer(ch)
	boxes := ns.boxes[ch]
	if boxes == nil {
		boxes = map[string]*mailbox{}
		ns.boxes[ch] = boxes
	}
	var open, opened int64
	for _, d := range ds {
		d.n = n
		n.peers[d.peer] = d
		box := boxes[d.peer]
		if box == nil {
			box = &mailbox{}
			boxes[d.peer] = box
		}
		box.list = append(box.list, d)
		if d.open() {
			if box.open == 0 {
				opened++
			}
			box.open++
			open++
		}
		if finished := len(box.list) - box.open; finished > limit {
			ns.prune(box, finished-limit)
		}
	}
	ns.met.pending.Add(ch, open)
	ns.met.mailboxes.Add(ch, opened)
}

// prune drops box's drop oldest finished deliveries (ns.mu held).
func (ns *Local) prune(box *mailbox, drop int) {
	kept := box.list[:0]
	for _, x := range box.list {
		if drop > 0 && !x.open() {
			drop--
			ns.forget(x)
			continue
		}
		kept = append(kept, x)
	}
	clear(box.list[len(kept):])
	box.list = kept
}

// forget removes d from its notice, and the notice once it has no peer
// (ns.mu held; d's mailbox is the caller's to fix).
func (ns *Local) forget(d *delivery) {
	n := d.n
	delete(n.peers, d.peer)
	if len(n.peers) == 0 {
		n.gone = true
		delete(ns.byID, n.id)
	}
}

func (ns *Local) box(channel, peer string, create bool) *mailbox {
	m := ns.boxes[channel]
	if m == nil {
		if !create {
			return nil
		}
		m = map[string]*mailbox{}
		ns.boxes[channel] = m
	}
	b := m[peer]
	if b == nil && create {
		b = &mailbox{}
		m[peer] = b
	}
	return b
}

// finish moves an open delivery to a final state (ns.mu held).
func (ns *Local) finish(d *delivery, state string) {
	d.state = state
	ch := d.n.channel
	ns.met.pending.Add(ch, -1)
	if b := ns.box(ch, d.peer, false); b != nil {
		b.open--
		if b.open == 0 {
			ns.met.mailboxes.Add(ch, -1)
		}
	}
}

func (ns *Local) event(channel string, e events.Event) {
	if ns.opt.Event != nil {
		ns.opt.Event(channel, e)
	}
}

// Spec is a notice to create.
type Spec struct {
	Text           string
	Priority       string
	DisplaySeconds int
	ExpiresAt      time.Time
	Source         string // "api" or "agent"
}

// Created is what a create did.
type Created struct {
	NoticeID string
	Targets  []string // peers whose mailbox took it
	Online   int      // of those, connected with the notice capability
	Skipped  []string // peers whose mailbox was full
}

// Create puts a new notice in the mailboxes of peers (no duplicates),
// durably, then pushes it to those online. A peer whose mailbox is full is
// skipped; when every peer is, the error is a *mailboxFullError.
func (ns *Local) Create(channel string, peers []string, sp Spec) (Created, error) {
	ns.createMu.Lock()
	defer ns.createMu.Unlock()
	var res Created
	limit := ns.opt.MaxPerPeer(channel)
	ns.mu.Lock()
	if ns.failed != nil {
		err := ns.failed
		ns.mu.Unlock()
		return res, err
	}
	for _, p := range peers {
		if b := ns.box(channel, p, false); b != nil && b.open >= limit {
			res.Skipped = append(res.Skipped, p)
		} else {
			res.Targets = append(res.Targets, p)
		}
	}
	seq := ns.seq + 1
	ns.mu.Unlock()
	if len(res.Targets) == 0 {
		return res, &MailboxFullError{Peers: res.Skipped, Max: limit}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	exp := sp.ExpiresAt.UTC().Truncate(time.Second)
	res.NoticeID = NewID()
	r := &noticeRecord{Op: "create", Channel: channel, ID: res.NoticeID, Peers: res.Targets, Seq: seq,
		Text: sp.Text, Priority: sp.Priority, Display: sp.DisplaySeconds, Source: sp.Source, Created: &now, Expires: &exp}
	if err := ns.append(r); err != nil {
		return Created{}, err
	}
	ns.event(channel, events.Event{Event: "notice_created", MessageID: res.NoticeID, Preview: events.Preview(sp.Text),
		Detail: fmt.Sprintf("source=%s targets=%d skipped=%d priority=%s", sp.Source, len(res.Targets), len(res.Skipped), sp.Priority)})
	if ns.opt.Push != nil {
		for _, p := range res.Targets {
			if ns.opt.Push(channel, p) {
				res.Online++
			}
		}
	}
	ns.changed(channel, res.Targets...)
	return res, nil
}

// NewID is a new notice id ("n-" and 18 random hex digits).
func NewID() string {
	var b [9]byte
	_, _ = rand.Read(b[:])
	return "n-" + hex.EncodeToString(b[:])
}

// ack records that peer's device drew notice id. An ack for a notice
// already finished changes nothing; one for a notice the peer was never
// sent is ErrUnknownNotice.
func (ns *Local) Ack(channel, peer, id string) error {
	ns.mu.Lock()
	n := ns.byID[id]
	var d *delivery
	if n != nil && n.channel == channel {
		d = n.peers[peer]
	}
	open := d != nil && d.open()
	ns.mu.Unlock()
	switch {
	case d == nil:
		return ErrUnknownNotice
	case !open:
		return nil
	}
	at := time.Now().UTC()
	if err := ns.append(&noticeRecord{Op: "ack", Channel: channel, ID: id, Peers: []string{peer}, At: &at}); err != nil {
		return err
	}
	ns.changed(channel, peer)
	return nil
}

func (ns *Local) changed(channel string, peers ...string) {
	if ns.opt.Changed != nil {
		for _, p := range peers {
			ns.opt.Changed(channel, p)
		}
	}
}

// Withdraw withdraws notice id from peer ("" = every peer) where it is
// not yet acked; it returns how many deliveries it withdrew.
func (ns *Local) Withdraw(channel, id, peer string) (int, error) {
	ns.mu.Lock()
	n := ns.byID[id]
	if n == nil || n.channel != channel || (peer != "" && n.peers[peer] == nil) {
		ns.mu.Unlock()
		return 0, ErrUnknownNotice
	}
	var peers []string
	for p, d := range n.peers {
		if d.open() && (peer == "" || p == peer) {
			peers = append(peers, p)
		}
	}
	ns.mu.Unlock()
	if len(peers) == 0 {
		return 0, nil
	}
	sort.Strings(peers)
	if err := ns.append(&noticeRecord{Op: "withdraw", Channel: channel, ID: id, Peers: peers}); err != nil {
		return 0, err
	}
	ns.event(channel, events.Event{Event: "notice_withdrawn", MessageID: id, PeerID: peer, Detail: fmt.Sprintf("peers=%d", len(peers))})
	ns.changed(channel, peers...)
	return len(peers), nil
}

// due returns the encoded notices of peer's mailbox a connection has not
// sent yet (created after the one numbered after), oldest first, at most
// limit, leaving out expired ones; more says some were left for the next
// call.
func (ns *Local) Due(channel, peer string, after uint64, limit int, now time.Time) (frames [][]byte, ids []string, last uint64, more bool) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	last = after
	b := ns.box(channel, peer, false)
	if b == nil {
		return nil, nil, last, false
	}
	for _, d := range b.list {
		if d.n.seq <= after || !d.open() || !now.Before(d.n.expires) {
			continue
		}
		if len(frames) == limit {
			return frames, ids, last, true
		}
		frames = append(frames, d.n.wire)
		ids = append(ids, d.n.id)
		last = d.n.seq
	}
	return frames, ids, last, false
}

// markSent records that ids were queued on peer's connection.
func (ns *Local) MarkSent(channel, peer string, ids []string, at time.Time) {
	for _, id := range ids {
		ns.mu.Lock()
		var d *delivery
		if n := ns.byID[id]; n != nil {
			d = n.peers[peer]
		}
		ok := d != nil && d.open()
		if ok {
			d.state, d.sentAt = Sent, at
		}
		ns.mu.Unlock()
		if ok {
			ns.event(channel, events.Event{Event: "notice_sent", PeerID: peer, MessageID: id})
		}
	}
}

// Content is what a notice says (the API's notice fields).
type Content struct {
	NoticeID       string    `json:"notice_id"`
	Text           string    `json:"text"`
	Priority       string    `json:"priority"`
	DisplaySeconds int       `json:"display_seconds"`
	ExpiresAt      time.Time `json:"expires_at"`
	CreatedAt      time.Time `json:"created_at"`
	Source         string    `json:"source"`
}

// DeliveryState is where a notice is with one peer.
type DeliveryState struct {
	State   string     `json:"state"` // Pending, Sent, Acked, Expired or Withdrawn
	SentAt  *time.Time `json:"sent_at"`
	AckedAt *time.Time `json:"acked_at"`
}

// Delivery is one peer's delivery state of a notice.
type Delivery struct {
	PeerID string `json:"peer_id"`
	DeliveryState
}

// Notice is a notice as the API shows it, with every peer's state.
type Notice struct {
	Content
	Peers []Delivery `json:"peers"`
}

// PeerNotice is a notice as one peer's mailbox holds it.
type PeerNotice struct {
	Content
	DeliveryState
}

func (n *notice) content() Content {
	return Content{NoticeID: n.id, Text: n.text, Priority: n.priority, DisplaySeconds: n.display,
		ExpiresAt: n.expires, CreatedAt: n.created, Source: n.source}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func (d *delivery) shown(now time.Time) string {
	if d.open() && !now.Before(d.n.expires) {
		return Expired // the sweeper has not got to it yet
	}
	return d.state
}

func (d *delivery) delivery(now time.Time) DeliveryState {
	return DeliveryState{State: d.shown(now), SentAt: timePtr(d.sentAt), AckedAt: timePtr(d.ackedAt)}
}

// Pending returns peer's notices not yet acked, expired or withdrawn,
// oldest first.
func (ns *Local) pending(channelID, peerID string) []PeerNotice {
	return ns.ListPeer(channelID, peerID, false)
}

// Count is how many notices peer's mailbox holds not yet acked, expired or
// withdrawn.
func (ns *Local) Count(channelID, peerID string) int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if b := ns.box(channelID, peerID, false); b != nil {
		return b.open
	}
	return 0
}

// ListPeer implements Store.
func (ns *Local) ListPeer(channel, peer string, all bool) []PeerNotice {
	now := time.Now()
	ns.mu.Lock()
	defer ns.mu.Unlock()
	out := []PeerNotice{}
	if b := ns.box(channel, peer, false); b != nil {
		for _, d := range b.list {
			if all || d.shown(now) == Pending || d.shown(now) == Sent {
				out = append(out, PeerNotice{Content: d.n.content(), DeliveryState: d.delivery(now)})
			}
		}
	}
	return out
}

// List returns the channel's notices with an open delivery (all: every
// notice kept), oldest first, with every peer's state.
func (ns *Local) List(channel string, all bool) []Notice {
	now := time.Now()
	ns.mu.Lock()
	var list []*notice
	for _, n := range ns.byID {
		if n.channel == channel {
			list = append(list, n)
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].seq < list[j].seq })
	out := []Notice{}
	for _, n := range list {
		v := Notice{Content: n.content(), Peers: make([]Delivery, 0, len(n.peers))}
		open := false
		for _, d := range n.peers {
			st := d.delivery(now)
			open = open || st.State == Pending || st.State == Sent
			v.Peers = append(v.Peers, Delivery{PeerID: d.peer, DeliveryState: st})
		}
		if open || all {
			sort.Slice(v.Peers, func(i, j int) bool { return v.Peers[i].PeerID < v.Peers[j].PeerID })
			out = append(out, v)
		}
	}
	ns.mu.Unlock()
	return out
}

// expiryEntry is when something happens to a notice: at expires_at its
// open deliveries expire; KeepExpired later (final) it is pruned.
type expiryEntry struct {
	at    time.Time
	n     *notice
	final bool
}

type expiryHeap []expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = expiryEntry{}
	*h = old[:len(old)-1]
	return e
}

// sweeper expires and prunes notices, and snapshots once enough is
// logged, until Close.
func (ns *Local) sweeper() {
	defer close(ns.done)
	t := time.NewTicker(ns.opt.Sweep)
	defer t.Stop()
	for {
		select {
		case <-ns.stop:
			return
		case now := <-t.C:
			ns.sweep(now)
			ns.mu.Lock()
			due := ns.sinceSnap >= ns.opt.SnapshotBytes
			ns.mu.Unlock()
			if due {
				if err := ns.snapshot(); err != nil {
					ns.log.Warn("notice snapshot failed; retrying later", "err", err)
				}
			}
		}
	}
}

// sweep expires the notices due by now and prunes those kept long enough.
func (ns *Local) sweep(now time.Time) {
	type expired struct {
		n     *notice
		peers []string
	}
	var done []expired
	ns.mu.Lock()
	for len(ns.expiry) > 0 && !now.Before(ns.expiry[0].at) {
		e := heap.Pop(&ns.expiry).(expiryEntry)
		n := e.n
		if n.gone {
			continue
		}
		if e.final {
			for _, d := range n.peers {
				if b := ns.box(n.channel, d.peer, false); b != nil {
					b.list = removeDelivery(b.list, d)
					if len(b.list) == 0 {
						delete(ns.boxes[n.channel], d.peer)
					}
				}
			}
			n.gone = true
			delete(ns.byID, n.id)
			continue
		}
		x := expired{n: n}
		for _, d := range n.peers {
			if d.open() {
				ns.finish(d, Expired)
				x.peers = append(x.peers, d.peer)
			}
		}
		if len(x.peers) > 0 {
			ns.met.expired.Add(n.channel, uint64(len(x.peers)))
			done = append(done, x)
		}
		heap.Push(&ns.expiry, expiryEntry{at: n.expires.Add(KeepExpired), n: n, final: true})
	}
	ns.mu.Unlock()
	for _, x := range done {
		ns.event(x.n.channel, events.Event{Event: "notice_expired", MessageID: x.n.id, Preview: events.Preview(x.n.text),
			Detail: fmt.Sprintf("%d peers had not acked it by %s", len(x.peers), x.n.expires.UTC().Format(time.RFC3339))})
		ns.changed(x.n.channel, x.peers...)
	}
}

func removeDelivery(list []*delivery, d *delivery) []*delivery {
	for i, x := range list {
		if x == d {
			copy(list[i:], list[i+1:])
			list[len(list)-1] = nil
			return list[:len(list)-1]
		}
	}
	return list
}

// The snapshot: every kept notice with its peers by state. Open
// deliveries are listed without a state (sent is not kept).
type noticeSnapshot struct {
	LSN     uint64         `json:"lsn"` // every log record up to it is in here
	Seq     uint64         `json:"seq"`
	Notices []snapshotItem `json:"notices"`
}

type snapshotItem struct {
	noticeRecord
	Open      []string      `json:"open,omitempty"`
	Acked     []snapshotAck `json:"acked,omitempty"`
	Withdrawn []string      `json:"withdrawn,omitempty"`
	Expired   []string      `json:"expired,omitempty"`
}

type snapshotAck struct {
	Peer string `json:"p"`
	At   int64  `json:"at"` // Unix milliseconds
}

// snapshot writes the state to snapshot.json and releases the log up to it.
func (ns *Local) snapshot() error {
	ns.logMu.Lock() // no append in flight: the state holds every durable record
	lsn := ns.wl.Durable()
	ns.mu.Lock()
	s := noticeSnapshot{LSN: uint64(lsn), Seq: ns.seq, Notices: make([]snapshotItem, 0, len(ns.byID))}
	for _, n := range ns.byID {
		created, expires := n.created, n.expires
		it := snapshotItem{noticeRecord: noticeRecord{Op: "create", Channel: n.channel, ID: n.id, Seq: n.seq, Text: n.text,
			Priority: n.priority, Display: n.display, Source: n.source, Created: &created, Expires: &expires}}
		for _, d := range n.peers {
			switch d.state {
			case Pending, Sent:
				it.Open = append(it.Open, d.peer)
			case Acked:
				it.Acked = append(it.Acked, snapshotAck{Peer: d.peer, At: d.ackedAt.UnixMilli()})
			case Withdrawn:
				it.Withdrawn = append(it.Withdrawn, d.peer)
			case Expired:
				it.Expired = append(it.Expired, d.peer)
			}
		}
		s.Notices = append(s.Notices, it)
	}
	ns.sinceSnap = 0
	ns.mu.Unlock()
	ns.logMu.Unlock()
	sort.Slice(s.Notices, func(i, j int) bool { return s.Notices[i].Seq < s.Notices[j].Seq })
	if err := durable.WriteFile(ns.snap, func(w *bufio.Writer) error { return json.NewEncoder(w).Encode(&s) }, ns.opt.NoSync); err != nil {
		return fmt.Errorf("writing the notice snapshot: %w", err)
	}
	if err := ns.wl.Release(lsn); err != nil {
		return fmt.Errorf("releasing the notice log: %w", err)
	}
	return nil
}

// loadSnapshot reads snapshot.json, if any, and returns its LSN.
func (ns *Local) loadSnapshot() (uint64, error) {
	f, err := os.Open(ns.snap)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the notice snapshot: %w", err)
	}
	defer f.Close()
	var s noticeSnapshot
	if err := json.NewDecoder(bufio.NewReaderSize(f, 256<<10)).Decode(&s); err != nil {
		return 0, fmt.Errorf("reading the notice snapshot %s: %w (move it away to start with empty mailboxes)", ns.snap, err)
	}
	sort.Slice(s.Notices, func(i, j int) bool { return s.Notices[i].Seq < s.Notices[j].Seq })
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for i := range s.Notices {
		it := &s.Notices[i]
		r := &it.noticeRecord
		if r.Created == nil || r.Expires == nil || ns.byID[r.ID] != nil {
			continue
		}
		n := &notice{id: r.ID, channel: r.Channel, text: r.Text, priority: r.Priority, source: r.Source,
			display: r.Display, seq: r.Seq, created: *r.Created, expires: *r.Expires}
		n.wire = link.MustEncode(&link.Notice{NoticeID: n.id, Text: n.text, Priority: n.priority,
			DisplaySeconds: n.display, ExpiresAt: n.expires.UTC().Format(time.RFC3339)})
		ns.byID[n.id] = n
		ds := make([]*delivery, 0, len(it.Open)+len(it.Acked)+len(it.Withdrawn)+len(it.Expired))
		for _, p := range it.Open {
			ds = append(ds, &delivery{peer: p, state: Pending})
		}
		for _, a := range it.Acked {
			ds = append(ds, &delivery{peer: a.Peer, state: Acked, ackedAt: time.UnixMilli(a.At).UTC()})
		}
		for _, p := range it.Withdrawn {
			ds = append(ds, &delivery{peer: p, state: Withdrawn})
		}
		for _, p := range it.Expired {
			ds = append(ds, &delivery{peer: p, state: Expired})
		}
		n.peers = make(map[string]*delivery, len(ds))
		ns.addDeliveries(n, ds)
		if len(n.peers) == 0 {
			delete(ns.byID, n.id)
			continue
		}
		at, final := n.expires, len(it.Open) == 0 && len(it.Expired) > 0
		if final {
			at = at.Add(KeepExpired)
		}
		heap.Push(&ns.expiry, expiryEntry{at: at, n: n, final: final})
	}
	ns.seq = max(ns.seq, s.Seq)
	return s.LSN, nil
}
