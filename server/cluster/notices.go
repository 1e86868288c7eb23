package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/metrics"
	"termlink/server/notices"
)

// The notice mailboxes of the cluster (issue 25): every delivery of a
// notice in KV termlink_notices, so that a notice POSTed to any node
// reaches its device on whichever edge holds it, and a device that moves
// to another edge (its edge died) is sent there what it has not acked.
//
// Every node follows the whole bucket with a watch into a mirror in
// memory (notices_mirror.go); the connections read the mirror (Due,
// Count, ForPeer and the API's lists), so nothing on a device's path
// waits for NATS, except an ack (read and written at the bucket). A change
// to a peer's deliveries seen by the watch is pushed to the peer's
// connection if this node holds it (Options.Push answers false
// otherwise): the edge that holds a device is the one that sends it its
// notices, with no lookup of where it is. The device shows a notice once
// per notice id and acks it; a resend (a reconnect, a move to another
// edge) is normal.
//
// Writes go to the bucket (compare-and-set on the key's revision) and
// into the mirror at once, so the node that writes sees its write
// before the watch brings it back. The mirror holds what the bucket
// holds (at most its MaxBytes) on every node.

// NoticesBucket holds the notices and their deliveries, of every channel.
const NoticesBucket = "termlink_notices"

// Keys of NoticesBucket:
//
//	n.<notice id>                               the notice (noticeValue)
//	d.<channel b64>.<peer b64>.<notice id>      one peer's delivery (deliveryValue)
//
// Every write carries a message TTL: the notice's expires_at plus
// notices.KeepExpired, so a notice and its deliveries leave the bucket
// by themselves once they are no longer listed (the watch sees a marker
// and the mirror forgets them). The sweeper marks the open deliveries of
// an expired notice expired first (the notice_expired event).
const (
	// DefaultNoticesMaxBytes bounds the bucket when NoticesOptions sets no
	// MaxBytes: past it a create is refused (the API answers 503) until
	// notices expire or are withdrawn.
	DefaultNoticesMaxBytes = 256 << 20
	noticesMaxValue        = 16 << 10 // a notice is at most 1,000 characters
	// noticesMarkerTTL is how long a key's removal (its TTL ran out, or
	// a prune) stays in the bucket for watchers.
	noticesMarkerTTL = 10 * time.Minute
	// noticeWriters is how many delivery writes of one create run at once.
	noticeWriters = 16
	noticeTries   = 8
	// noticesCreateTry bounds one try to make the bucket: an answer
	// takes milliseconds, or never comes (a concurrent create).
	noticesCreateTry = 3 * time.Second
)

// noticeValue is a notice as the bucket holds it.
type noticeValue struct {
	Channel string `json:"channel_id"`
	notices.Content
}

// deliveryValue is one peer's delivery of a notice.
type deliveryValue struct {
	State   string     `json:"state"` // notices.Pending, Sent, Acked, Expired or Withdrawn
	Expires time.Time  `json:"expires_at"`
	SentAt  *time.Time `json:"sent_at,omitempty"`
	AckedAt *time.Time `json:"acked_at,omitempty"`
	By      string     `json:"by,omitempty"` // the node that wrote it
}

func (v *deliveryValue) open() bool { return v.State == notices.Pending || v.State == notices.Sent }

// NoticesOptions configure Node.OpenNotices.
type NoticesOptions struct {
	// Of Options the mailboxes take MaxPerPeer, Push, Event, Changed,
	// Directory, Channel, Metrics, Sweep and Logger (NoSync and
	// SnapshotBytes are the local store's).
	notices.Options
	// MaxBytes bounds the bucket (0: DefaultNoticesMaxBytes).
	MaxBytes int64
	// LookEvery is how often a node looks for the bucket until the
	// first notice made it (0: noticesLookEvery; tests take a short one).
	LookEvery time.Duration
}

// Notices is notices.Mailboxes shared by every node of the cluster.
type Notices struct {
	n        *Node
	opt      notices.Options
	log      *slog.Logger
	met      noticeMetrics
	maxBytes int64
	look     time.Duration      // NoticesOptions.LookEvery
	kv       jetstream.KeyValue // set once (s.mu held) before made is closed
	made     chan struct{}      // closed once the bucket is there

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ready  chan struct{} // closed once the mirror holds the bucket
	kick   chan struct{} // the pusher has dirty peers
	sent   chan sentWrite

	mu      sync.Mutex
	failed  error // the bucket cannot be made
	started bool
	seq     uint64 // numbers deliveries in the order this mirror took them
	gen     uint64 // the watch's generation (a new watch reloads all)
	byID    map[string]*mnotice
	boxes   map[string]map[string]*mbox // channel -> peer
	dirty   map[chanPeer]bool
}

type chanPeer struct{ ch, peer string }

// noticeMetrics are the local store's series: the counters count what
// this node wrote; the gauges are the cluster's, from the mirror.
type noticeMetrics struct {
	created, acked, expired, withdrawn *metrics.CounterVec
}

func (s *Notices) registerMetrics(reg *metrics.Registry) {
	if reg == nil {
		reg = &metrics.Registry{}
	}
	s.met = noticeMetrics{
		created:   reg.NewCounterVec("termlink_notices_created_total", "Notices put in a peer's mailbox by this node (a broadcast counts once per peer).", "channel"),
		acked:     reg.NewCounterVec("termlink_notices_acked_total", "Notice acks this node recorded.", "channel"),
		expired:   reg.NewCounterVec("termlink_notices_expired_total", "Notice deliveries this node marked expired before their device acked them.", "channel"),
		withdrawn: reg.NewCounterVec("termlink_notices_withdrawn_total", "Notice deliveries this node withdrew before their device acked them.", "channel"),
	}
	reg.NewGaugeSet("termlink_notices_pending", "Notices in the cluster's mailboxes not yet acked, expired or withdrawn.", []string{"channel"},
		func(emit func(int64, ...string)) { s.gauges(emit, false) })
	reg.NewGaugeSet("termlink_notice_mailboxes", "Peers of the cluster with at least one notice not yet acked.", []string{"channel"},
		func(emit func(int64, ...string)) { s.gauges(emit, true) })
}

type sentWrite struct {
	key string
	v   deliveryValue
	rev uint64
}

var (
	_ notices.Mailboxes = (*Notices)(nil)
	_ notices.Store     = (*Notices)(nil)
)

// OpenNotices returns the cluster's notice mailboxes. The bucket (made by
// the first notice's create, noticesLookEvery) is followed into the
// mirror in the background: OpenNotices waits for that until ctx ends;
// until it is done a create answers errNoticesLoading (the API's 503),
// and the connections are pushed their notices once it is.
func (n *Node) OpenNotices(ctx context.Context, opt NoticesOptions) (*Notices, error) {
	o := opt.Options
	if o.Logger == nil {
		o.Logger = n.log
	}
	if o.Sweep <= 0 {
		o.Sweep = time.Second
	}
	if o.MaxPerPeer == nil {
		o.MaxPerPeer = func(string) int { return notices.DefaultMaxPerPeer }
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultNoticesMaxBytes
	}
	if opt.LookEvery <= 0 {
		opt.LookEvery = noticesLookEvery
	}
	s := &Notices{n: n, opt: o, log: o.Logger, made: make(chan struct{}), maxBytes: opt.MaxBytes, look: opt.LookEvery,
		ready: make(chan struct{}), kick: make(chan struct{}, 1), sent: make(chan sentWrite, 1024),
		byID: map[string]*mnotice{}, boxes: map[string]map[string]*mbox{}, dirty: map[chanPeer]bool{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.registerMetrics(o.Metrics)
	s.goRun(func(ctx context.Context) {
		if s.find(ctx) {
			s.watch(ctx)
		}
	})
	select {
	case <-s.ready:
	case <-ctx.Done():
		s.log.Warn("cluster: the notice mailboxes are not loaded yet; they load in the background (until then the notice API answers 503)", "err", ctx.Err())
	}
	return s, nil
}

// errNoticesLoading is the answer while the bucket is not made yet.
var errNoticesLoading = errors.New("cluster: the notice mailboxes are not loaded yet; try again")

// The bucket is made by the first create of a notice, not at start:
// nodes started at once would all make it, and JetStream may leave a
// concurrent create unanswered for seconds (nats.go#949). Until then
// each node looks for it every noticesLookEvery (NoticesOptions.LookEvery)
// and follows it once it is there.
const noticesLookEvery = 2 * time.Second

// find looks for the bucket until it is there (made by this node or
// another) or ctx ends; meanwhile the mirror (empty) is complete.
func (s *Notices) find(ctx context.Context) bool {
	for ctx.Err() == nil {
		kv, err := s.lookBucket(ctx, false)
		if kv != nil {
			return true
		}
		if errors.Is(err, errNoticesLoading) {
			s.markReady() // no bucket: no notices
		} else if s.failedErr() != nil {
			return false
		} else {
			s.log.Warn("cluster: cannot look up the notice bucket; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-s.made:
		case <-time.After(s.look):
		}
	}
	return false
}

func (s *Notices) markReady() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

func (s *Notices) failedErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// lookBucket returns the bucket: known, found, or (create) made now;
// errNoticesLoading when it is not there and create is false.
func (s *Notices) lookBucket(ctx context.Context, create bool) (jetstream.KeyValue, error) {
	select {
	case <-s.made:
		return s.kv, nil
	default:
	}
	if err := s.failedErr(); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, noticesCreateTry)
	kv, err := s.n.js.KeyValue(lctx, NoticesBucket)
	cancel()
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if !create {
			return nil, errNoticesLoading
		}
		kv, err = s.n.noticesBucket(ctx, s.maxBytes)
		if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
			s.log.Error("cluster: the notice mailboxes cannot work", "err", err)
			s.mu.Lock()
			s.failed = err
			s.mu.Unlock()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: bucket %s: %w", NoticesBucket, err)
	}
	s.mu.Lock()
	if s.kv == nil {
		s.kv = kv
		close(s.made)
	}
	kv = s.kv
	s.mu.Unlock()
	return kv, nil
}

// bucket is the bucket, if there is one.
func (s *Notices) bucket() (jetstream.KeyValue, error) { return s.lookBucket(s.ctx, false) }

// noticesBucket creates or updates the bucket. Nodes started at once
// all create it, and JetStream may leave a concurrent create unanswered
// (nats.go#949): each try has noticesCreateTry, and another follows
// until ctx ends.
func (n *Node) noticesBucket(ctx context.Context, maxBytes int64) (jetstream.KeyValue, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, noticesCreateTry)
		kv, err := n.js.CreateOrUpdateKeyValue(actx, jetstream.KeyValueConfig{Bucket: NoticesBucket,
			Description: "termlink: notice mailboxes (notices and their deliveries), by channel and peer",
			History:     1, Replicas: n.cfg.Replicas, Storage: jetstream.FileStorage,
			MaxBytes: maxBytes, MaxValueSize: noticesMaxValue,
			// A backstop: every write carries its own TTL (expires_at + KeepExpired).
			TTL:            30*24*time.Hour + notices.KeepExpired + time.Hour,
			LimitMarkerTTL: noticesMarkerTTL})
		acancel()
		switch {
		case err == nil:
			return kv, nil
		case errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported):
			return nil, fmt.Errorf("cluster: bucket %s needs nats-server 2.11 or later (per-message TTLs): %w", NoticesBucket, err)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("cluster: bucket %s: %w", NoticesBucket, err)
		}
		n.log.Warn("cluster: the notice bucket not made yet; retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: bucket %s: %w", NoticesBucket, err)
		case <-time.After(time.Duration(min(attempt, 5)) * 200 * time.Millisecond):
		}
	}
}

// goRun runs fn on a goroutine the node owns, until Close or the node's.
func (s *Notices) goRun(fn func(ctx context.Context)) {
	s.wg.Add(1)
	s.n.Go(func(nctx context.Context) {
		defer s.wg.Done()
		ctx, cancel := context.WithCancel(s.ctx)
		defer cancel()
		stop := context.AfterFunc(nctx, cancel)
		defer stop()
		fn(ctx)
	})
}

// Start implements notices.Mailboxes: the pusher, the sweeper and the
// writer of "sent" run until Close.
func (s *Notices) Start() {
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	s.goRun(s.pusher)
	s.goRun(s.sweeper)
	s.goRun(s.sentWriter)
	s.signal()
}

// Close implements notices.Mailboxes.
func (s *Notices) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// Routes implements notices.Mailboxes: package notices' routes over
// these mailboxes.
func (s *Notices) Routes(mux httpapi.Mux) { notices.NewAPI(s, s.opt).Routes(mux) }

// Keys.

func noticeKey(id string) string { return "n." + id }

func deliveryKey(ch, peer, id string) string {
	return "d." + keyPart(ch) + "." + keyPart(peer) + "." + id
}

// validNoticeID reports whether id can be a key's last token (an ack's
// notice_id comes from a device).
func validNoticeID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// parseDeliveryKey splits a delivery's key.
func parseDeliveryKey(key string) (ch, peer, id string, ok bool) {
	parts := strings.Split(key, ".")
	if len(parts) != 4 || parts[0] != "d" {
		return "", "", "", false
	}
	c, err1 := base64.RawURLEncoding.DecodeString(parts[1])
	p, err2 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || !validNoticeID(parts[3]) {
		return "", "", "", false
	}
	return string(c), string(p), parts[3], true
}

// put writes v at key if the key is at rev (0: new), with the TTL that
// takes it away KeepExpired after expires; ErrConflict when another
// write came first.
func (s *Notices) put(ctx context.Context, key string, v any, rev uint64, expires time.Time) (uint64, error) {
	if _, err := s.bucket(); err != nil {
		return 0, err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	ttl := time.Until(expires.Add(notices.KeepExpired)).Round(time.Second)
	if ttl < time.Second {
		ttl = time.Second
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	pa, err := s.n.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + NoticesBucket + "." + key, Data: data},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if isWrongLastSequence(err) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: writing notice key %s: %w", key, err)
	}
	return pa.Sequence, nil
}

// The device's side.

// Due implements notices.Mailboxes, from the mirror; after is a number of
// this node's mirror (a connection's cursor).
func (s *Notices) Due(ch, peer string, after uint64, limit int, now time.Time) (frames [][]byte, ids []string, last uint64, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last = after
	b := s.box(ch, peer, false)
	if b == nil {
		return nil, nil, last, false
	}
	for _, d := range b.list {
		if d.seq <= after || !d.v.open() || !now.Before(d.n.c.ExpiresAt) {
			continue
		}
		if len(frames) == limit {
			return frames, ids, last, true
		}
		frames = append(frames, d.n.wire)
		ids = append(ids, d.n.c.NoticeID)
		last = d.seq
	}
	return frames, ids, last, false
}

// MarkSent implements notices.Mailboxes: the mirror says sent at once;
// the bucket is told by a writer of its own (sent is for the API only:
// a connection sends what is open, sent or not), and a write that finds
// the delivery changed (acked meanwhile) is dropped.
func (s *Notices) MarkSent(ch, peer string, ids []string, at time.Time) {
	at = at.UTC()
	for _, id := range ids {
		s.mu.Lock()
		var d *mdelivery
		if n := s.byID[id]; n != nil && n.ch == ch {
			d = n.peers[peer]
		}
		ok := d != nil && d.v.open()
		var w sentWrite
		if ok {
			d.v.State, d.v.SentAt, d.v.By = notices.Sent, &at, s.n.Name()
			w = sentWrite{key: deliveryKey(ch, peer, id), v: d.v, rev: d.rev}
		}
		s.mu.Unlock()
		if !ok {
			continue
		}
		select {
		case s.sent <- w:
		default: // the writer is behind: the bucket keeps "pending"
		}
		s.event(ch, events.Event{Event: "notice_sent", PeerID: peer, MessageID: id})
	}
}

func (s *Notices) sentWriter(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-s.sent:
			rev, err := s.put(ctx, w.key, w.v, w.rev, w.v.Expires)
			if err == nil {
				s.applyPut(w.key, mustJSON(w.v), rev, 0)
			} else if !errors.Is(err, ErrConflict) && ctx.Err() == nil {
				s.log.Debug("cluster: notice not marked sent in the bucket", "key", w.key, "err", err)
			}
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Ack implements notices.Mailboxes, on the bucket (read at its leader):
// a device may ack on this edge a notice another edge sent it.
func (s *Notices) Ack(ch, peer, id string) error {
	if !validNoticeID(id) {
		return notices.ErrUnknownNotice
	}
	key := deliveryKey(ch, peer, id)
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	for try := 0; try < noticeTries; try++ {
		kv, err := s.bucket()
		if err != nil {
			return err
		}
		data, rev, err := s.n.kvGet(ctx, kv, key)
		if err != nil {
			return fmt.Errorf("cluster: reading the notice delivery: %w", err)
		}
		if rev == 0 {
			return notices.ErrUnknownNotice
		}
		var v deliveryValue
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("cluster: notice delivery %s: %w", key, err)
		}
		if !v.open() {
			return nil
		}
		at := time.Now().UTC()
		v.State, v.AckedAt, v.By = notices.Acked, &at, s.n.Name()
		nrev, err := s.put(ctx, key, v, rev, v.Expires)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		s.applyPut(key, mustJSON(v), nrev, 0)
		s.met.acked.Inc(ch)
		s.event(ch, events.Event{Event: "notice_acked", PeerID: peer, MessageID: id})
		return nil
	}
	return fmt.Errorf("cluster: notice %s of %s changed %d times while being acked", id, peer, noticeTries)
}

// FromAgent implements notices.Mailboxes.
func (s *Notices) FromAgent(ch, peer, text string) error {
	_, err := s.Create(ch, []string{peer}, notices.AgentSpec(text, time.Now()))
	return err
}

// Count implements notices.Mailboxes, from the mirror.
func (s *Notices) Count(ch, peer string) int {
	now := time.Now()
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

// ForPeer implements notices.Mailboxes.
func (s *Notices) ForPeer(ch, peer string) any { return s.ListPeer(ch, peer, false) }

// The operator's side (notices.Store).

// Create implements notices.Store: the notice, then each peer's delivery
// (a few at once), each in the bucket and the mirror. The per-peer bound
// is checked on this node's mirror: creates on several nodes at the
// same moment may each take a mailbox's last place.
func (s *Notices) Create(ch string, peers []string, sp notices.Spec) (notices.Created, error) {
	var res notices.Created
	select {
	case <-s.ready: // the bound is checked on the whole mirror
	default:
		return res, errNoticesLoading
	}
	if _, err := s.lookBucket(s.ctx, true); err != nil {
		return res, err
	}
	limit := s.opt.MaxPerPeer(ch)
	for _, p := range peers {
		if s.Count(ch, p) >= limit {
			res.Skipped = append(res.Skipped, p)
		} else {
			res.Targets = append(res.Targets, p)
		}
	}
	if len(res.Targets) == 0 {
		return res, &notices.MailboxFullError{Peers: res.Skipped, Max: limit}
	}
	c := notices.Content{NoticeID: notices.NewID(), Text: sp.Text, Priority: sp.Priority, DisplaySeconds: sp.DisplaySeconds,
		ExpiresAt: sp.ExpiresAt.UTC().Truncate(time.Second), CreatedAt: time.Now().UTC().Truncate(time.Millisecond), Source: sp.Source}
	res.NoticeID = c.NoticeID
	ctx := s.ctx
	nv := noticeValue{Channel: ch, Content: c}
	rev, err := s.put(ctx, noticeKey(c.NoticeID), nv, 0, c.ExpiresAt)
	if err != nil {
		return notices.Created{}, fmt.Errorf("the cluster's notice store did not take it: %w", err)
	}
	s.applyPut(noticeKey(c.NoticeID), mustJSON(nv), rev, 0)
	dv := deliveryValue{State: notices.Pending, Expires: c.ExpiresAt, By: s.n.Name()}
	errs := make([]error, len(res.Targets))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(noticeWriters, len(res.Targets)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				key := deliveryKey(ch, res.Targets[i], c.NoticeID)
				rev, err := s.put(ctx, key, dv, 0, c.ExpiresAt)
				if err == nil {
					s.applyPut(key, mustJSON(dv), rev, 0)
				}
				errs[i] = err
			}
		}()
	}
	for i := range res.Targets {
		next <- i
	}
	close(next)
	wg.Wait()
	stored := res.Targets[:0:0]
	var failed error
	for i, p := range res.Targets {
		if errs[i] != nil {
			failed = errs[i]
			continue
		}
		stored = append(stored, p)
	}
	if failed != nil {
		s.log.Warn("cluster: a notice stored for some of its peers only", "notice_id", c.NoticeID, "stored", len(stored), "of", len(res.Targets), "err", failed)
		return notices.Created{}, fmt.Errorf("the cluster's notice store took it for %d of %d peers: %w", len(stored), len(res.Targets), failed)
	}
	s.met.created.Add(ch, uint64(len(res.Targets)))
	s.event(ch, events.Event{Event: "notice_created", MessageID: c.NoticeID, Preview: events.Preview(sp.Text),
		Detail: fmt.Sprintf("source=%s targets=%d skipped=%d priority=%s node=%s", sp.Source, len(res.Targets), len(res.Skipped), sp.Priority, s.n.Name())})
	res.Online = s.online(ch, res.Targets)
	for _, p := range res.Targets {
		s.prune(ch, p, limit)
	}
	return res, nil
}

// online counts the peers connected with notices here (pushed now) or
// held by another edge (the cluster's presence).
func (s *Notices) online(ch string, peers []string) int {
	var mu sync.Mutex
	count := 0
	next := make(chan string)
	var wg sync.WaitGroup
	for range min(noticeWriters, len(peers)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				on := s.opt.Push != nil && s.opt.Push(ch, p)
				if !on {
					edge, err := s.n.Presence(s.ctx, ch, p)
					on = err == nil && edge != ""
				}
				if on {
					mu.Lock()
					count++
					mu.Unlock()
				}
			}
		}()
	}
	for _, p := range peers {
		next <- p
	}
	close(next)
	wg.Wait()
	return count
}

// prune removes peer's oldest finished deliveries beyond limit (as many
// finished as open ones are kept, like the local mailboxes), and a
// notice whose last delivery went.
func (s *Notices) prune(ch, peer string, limit int) {
	type gone struct {
		key string
		rev uint64
		n   *mnotice
	}
	var drop []gone
	s.mu.Lock()
	if b := s.box(ch, peer, false); b != nil {
		finished := 0
		for _, d := range b.list {
			if !d.v.open() {
				finished++
			}
		}
		for _, d := range b.list {
			if finished <= limit {
				break
			}
			if !d.v.open() {
				drop = append(drop, gone{deliveryKey(ch, peer, d.n.c.NoticeID), d.rev, d.n})
				finished--
			}
		}
	}
	s.mu.Unlock()
	kv, err := s.bucket()
	if err != nil {
		return
	}
	for _, g := range drop {
		ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
		err := kv.Purge(ctx, g.key, jetstream.LastRevision(g.rev), jetstream.PurgeTTL(noticesMarkerTTL))
		cancel()
		if err != nil {
			continue // changed meanwhile, or NATS away: the TTL takes it later
		}
		s.mu.Lock()
		if d := g.n.peers[peer]; d != nil && d.rev == g.rev {
			s.dropDelivery(d)
		}
		last := len(g.n.peers) == 0 && s.byID[g.n.c.NoticeID] == g.n
		if last {
			delete(s.byID, g.n.c.NoticeID)
		}
		s.mu.Unlock()
		if last {
			ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
			_ = kv.Purge(ctx, noticeKey(g.n.c.NoticeID), jetstream.PurgeTTL(noticesMarkerTTL))
			cancel()
		}
	}
}

// Withdraw implements notices.Store.
func (s *Notices) Withdraw(ch, id, peer string) (int, error) {
	s.mu.Lock()
	n := s.byID[id]
	if n == nil || n.ch != ch || (peer != "" && n.peers[peer] == nil) {
		s.mu.Unlock()
		return 0, notices.ErrUnknownNotice
	}
	type open struct {
		peer string
		v    deliveryValue
		rev  uint64
	}
	var todo []open
	for p, d := range n.peers {
		if d.v.open() && (peer == "" || p == peer) {
			todo = append(todo, open{p, d.v, d.rev})
		}
	}
	s.mu.Unlock()
	withdrawn := 0
	for _, o := range todo {
		ok, err := s.finish(ch, o.peer, id, o.v, o.rev, notices.Withdrawn)
		if err != nil {
			return withdrawn, err
		}
		if ok {
			withdrawn++
		}
	}
	if withdrawn > 0 {
		s.met.withdrawn.Add(ch, uint64(withdrawn))
		s.event(ch, events.Event{Event: "notice_withdrawn", MessageID: id, PeerID: peer, Detail: fmt.Sprintf("peers=%d", withdrawn)})
	}
	return withdrawn, nil
}

// finish moves an open delivery (v at rev, as the mirror had it) to a
// final state, reading it again when it changed meanwhile; false when it
// was no longer open.
func (s *Notices) finish(ch, peer, id string, v deliveryValue, rev uint64, state string) (bool, error) {
	key := deliveryKey(ch, peer, id)
	ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
	defer cancel()
	for try := 0; try < noticeTries; try++ {
		if !v.open() {
			return false, nil
		}
		v.State, v.By = state, s.n.Name()
		nrev, err := s.put(ctx, key, v, rev, v.Expires)
		if err == nil {
			s.applyPut(key, mustJSON(v), nrev, 0)
			return true, nil
		}
		if !errors.Is(err, ErrConflict) {
			return false, err
		}
		kv, err := s.bucket()
		if err != nil {
			return false, err
		}
		data, r, err := s.n.kvGet(ctx, kv, key)
		if err != nil || r == 0 {
			return false, err
		}
		v, rev = deliveryValue{}, r
		if err := json.Unmarshal(data, &v); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("cluster: notice %s of %s changed %d times", id, peer, noticeTries)
}

// sweeper marks the open deliveries of expired notices expired (the node
// whose write lands records notice_expired), and forgets what stayed in
// the mirror past its TTL (a removal the watch did not see).
func (s *Notices) sweeper(ctx context.Context) {
	t := time.NewTicker(s.opt.Sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sweep(now)
		}
	}
}

func (s *Notices) sweep(now time.Time) {
	type open struct {
		n    *mnotice
		peer string
		v    deliveryValue
		rev  uint64
	}
	var due []open
	s.mu.Lock()
	for _, n := range s.byID {
		if now.Before(n.c.ExpiresAt) {
			continue
		}
		if !now.Before(n.c.ExpiresAt.Add(notices.KeepExpired + time.Minute)) {
			s.dropNotice(n)
			continue
		}
		for p, d := range n.peers {
			if d.v.open() {
				due = append(due, open{n, p, d.v, d.rev})
			}
		}
	}
	s.mu.Unlock()
	expired := map[*mnotice]int{}
	for _, o := range due {
		if ok, err := s.finish(o.n.ch, o.peer, o.n.c.NoticeID, o.v, o.rev, notices.Expired); ok && err == nil {
			expired[o.n]++
		}
	}
	for n, peers := range expired {
		s.met.expired.Add(n.ch, uint64(peers))
		s.event(n.ch, events.Event{Event: "notice_expired", MessageID: n.c.NoticeID, Preview: events.Preview(n.c.Text),
			Detail: fmt.Sprintf("%d peers had not acked it by %s", peers, n.c.ExpiresAt.UTC().Format(time.RFC3339))})
	}
}

func (s *Notices) event(ch string, e events.Event) {
	if s.opt.Event != nil {
		s.opt.Event(ch, e)
	}
}

// The lists, from the mirror.

func (d *mdelivery) state(now time.Time) notices.DeliveryState {
	st := d.v.State
	if d.v.open() && !now.Before(d.n.c.ExpiresAt) {
		st = notices.Expired // the sweeper has not got to it yet
	}
	return notices.DeliveryState{State: st, SentAt: d.v.SentAt, AckedAt: d.v.AckedAt}
}

// ListPeer implements notices.Store.
func (s *Notices) ListPeer(ch, peer string, all bool) []notices.PeerNotice {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []notices.PeerNotice{}
	if b := s.box(ch, peer, false); b != nil {
		for _, d := range b.list {
			st := d.state(now)
			if all || st.State == notices.Pending || st.State == notices.Sent {
				out = append(out, notices.PeerNotice{Content: d.n.c, DeliveryState: st})
			}
		}
	}
	return out
}

// List implements notices.Store.
func (s *Notices) List(ch string, all bool) []notices.Notice {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var list []*mnotice
	for _, n := range s.byID {
		if n.ch == ch && len(n.peers) > 0 {
			list = append(list, n)
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if !list[i].c.CreatedAt.Equal(list[j].c.CreatedAt) {
			return list[i].c.CreatedAt.Before(list[j].c.CreatedAt)
		}
		return list[i].seq < list[j].seq
	})
	out := []notices.Notice{}
	for _, n := range list {
		v := notices.Notice{Content: n.c, Peers: make([]notices.Delivery, 0, len(n.peers))}
		open := false
		for p, d := range n.peers {
			st := d.state(now)
			open = open || st.State == notices.Pending || st.State == notices.Sent
			v.Peers = append(v.Peers, notices.Delivery{PeerID: p, DeliveryState: st})
		}
		if open || all {
			sort.Slice(v.Peers, func(i, j int) bool { return v.Peers[i].PeerID < v.Peers[j].PeerID })
			out = append(out, v)
		}
	}
	return out
}
