package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/notices"
)

// The notice mailboxes of the cluster (issue 25) are package notices'
// Service over NoticeStorage: the records in KV termlink_notices, so that
// a notice POSTed to any node reaches its device on whichever edge holds
// it, and a device that moves to another edge (its edge died) is sent
// there what it has not acked. This file is storage only: every rule
// (the bound per peer, pruning, expiry, events, metrics) is package
// notices'.
//
// Every node follows the whole bucket with a watch (Follow) into the
// Service's state; a change seen by the watch is pushed to the peer's
// connection if this node holds it (Options.Push answers false
// otherwise): the edge that holds a device is the one that sends it its
// notices, with no lookup of where it is.

// NoticesBucket holds the notices, their deliveries and the mailboxes'
// records of open deliveries, of every channel (keys: notices.NoticeKey,
// notices.DeliveryKey, and "m." for a mailbox).
//
// Every write carries a message TTL: the notice's expires_at plus
// notices.KeepExpired, so a record leaves the bucket by itself once it
// is no longer listed (the watch sees a marker and the state forgets it).
const NoticesBucket = "termlink_notices"

const (
	// DefaultNoticesMaxBytes bounds the bucket when NoticesOptions sets no
	// MaxBytes: past it a create is refused (the API answers 503) until
	// notices expire or are withdrawn.
	DefaultNoticesMaxBytes = 256 << 20
	// noticesMaxValue bounds a record: a notice is at most 1,000
	// characters; a mailbox's record lists its open notices (id and
	// expiry, about 45 bytes each, up to maxNoticesPerPeer's 10,000);
	// under NATS's default max_payload of 1 MiB.
	noticesMaxValue = 768 << 10
	// noticesMarkerTTL is how long a key's removal (its TTL ran out, or
	// a prune) stays in the bucket for watchers.
	noticesMarkerTTL = 10 * time.Minute
	// noticesCreateTry bounds one try to make the bucket: an answer
	// takes milliseconds, or never comes (a concurrent create).
	noticesCreateTry = 3 * time.Second
	// The bucket is made by the first create of a notice, not at start:
	// nodes started at once would all make it, and JetStream may leave a
	// concurrent create unanswered for seconds (nats.go#949). Until then
	// each node looks for it every noticesLookEvery
	// (NoticesOptions.LookEvery) and follows it once it is there.
	noticesLookEvery = 2 * time.Second
)

// NoticesOptions configure Node.OpenNotices.
type NoticesOptions struct {
	// The mailboxes' options (NoSync and SnapshotBytes are the local
	// store's).
	notices.Options
	// MaxBytes bounds the bucket (0: DefaultNoticesMaxBytes).
	MaxBytes int64
	// LookEvery is how often a node looks for the bucket until the
	// first notice made it (0: noticesLookEvery; tests take a short one).
	LookEvery time.Duration
}

// NoticeStorage is notices.Storage on KV termlink_notices, shared by
// every node.
type NoticeStorage struct {
	n        *Node
	log      *slog.Logger
	maxBytes int64
	look     time.Duration

	makeMu sync.Mutex // one make of the bucket at a time

	mu     sync.Mutex
	kv     jetstream.KeyValue // set once before made is closed
	made   chan struct{}      // closed once the bucket is there
	failed error              // the bucket cannot be made
}

var (
	_ notices.Storage  = (*NoticeStorage)(nil)
	_ notices.Presence = (*NoticeStorage)(nil)
)

// NoticeStorage returns the node's notice store.
func (n *Node) NoticeStorage(maxBytes int64, lookEvery time.Duration) *NoticeStorage {
	if maxBytes <= 0 {
		maxBytes = DefaultNoticesMaxBytes
	}
	if lookEvery <= 0 {
		lookEvery = noticesLookEvery
	}
	return &NoticeStorage{n: n, log: n.log, maxBytes: maxBytes, look: lookEvery, made: make(chan struct{})}
}

// OpenNotices returns the cluster's notice mailboxes: package notices'
// Service over the node's NoticeStorage. The bucket (made by the first
// notice's create) is followed into the state in the background:
// OpenNotices waits for that until ctx ends.
func (n *Node) OpenNotices(ctx context.Context, opt NoticesOptions) (*notices.Service, error) {
	o := opt.Options
	if o.Logger == nil {
		o.Logger = n.log
	}
	return notices.New(ctx, n.NoticeStorage(opt.MaxBytes, opt.LookEvery), o)
}

// Info implements notices.Storage.
func (s *NoticeStorage) Info() notices.StorageInfo {
	return notices.StorageInfo{Shared: true, ExpiresRecords: true, Node: s.n.Name()}
}

// Maintain implements notices.Storage: nothing (the TTLs keep the bucket).
func (s *NoticeStorage) Maintain() error { return nil }

// Close implements notices.Storage: the node is its owner's to close.
func (s *NoticeStorage) Close() error { return nil }

// Elsewhere implements notices.Presence: the cluster's presence.
func (s *NoticeStorage) Elsewhere(ctx context.Context, ch, peer string) bool {
	edge, err := s.n.Presence(ctx, ch, peer)
	return err == nil && edge != ""
}

// errNoticesLoading is lookBucket's answer while the bucket is not made.
var errNoticesLoading = errors.New("cluster: the notice bucket is not made yet")

func (s *NoticeStorage) failedErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// lookBucket returns the bucket: known, found, or (create) made now;
// errNoticesLoading when it is not there and create is false.
func (s *NoticeStorage) lookBucket(ctx context.Context, create bool) (jetstream.KeyValue, error) {
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
		// One make at a time on this node: a create's writes run
		// together, and concurrent creates and updates of a stream race
		// in nats-server.
		s.makeMu.Lock()
		select {
		case <-s.made:
			s.makeMu.Unlock()
			return s.kv, nil
		default:
		}
		kv, err = s.n.noticesBucket(ctx, s.maxBytes)
		if err == nil {
			s.setBucket(kv)
		}
		s.makeMu.Unlock()
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
	return s.setBucket(kv), nil
}

// setBucket keeps the bucket found or made first.
func (s *NoticeStorage) setBucket(kv jetstream.KeyValue) jetstream.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv == nil {
		s.kv = kv
		close(s.made)
	}
	return s.kv
}

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

// Follow implements notices.Storage: until the bucket is there (made by
// this node or another) the store is empty; then a watch of the whole
// bucket, made again when it ends, until ctx or the node's own ends.
//
// Begin comes before the watch is made: this node's own writes from then
// on are of the new load. A write made after the watch's start is not in
// its load but comes through it afterwards; with Begin after the watch
// was made, such a write counted as older and the load's end forgot it.
func (s *NoticeStorage) Follow(ctx context.Context, f notices.Feed) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.n.bgCtx, cancel)
	defer stop()
	kv, err := s.find(ctx, f)
	if kv == nil {
		return err
	}
	for ctx.Err() == nil {
		f.Begin()
		w, err := watchKV(ctx, kv, nil)
		if err != nil {
			s.log.Warn("cluster: cannot watch the notices; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		follow(ctx, w, f)
		_ = w.Stop()
	}
	return nil
}

// find looks for the bucket every look until it is there or ctx ends;
// meanwhile the store is loaded, and empty.
func (s *NoticeStorage) find(ctx context.Context, f notices.Feed) (jetstream.KeyValue, error) {
	empty := false
	for ctx.Err() == nil {
		kv, err := s.lookBucket(ctx, false)
		if kv != nil {
			return kv, nil
		}
		switch {
		case errors.Is(err, errNoticesLoading):
			if !empty { // no bucket: no notices
				empty = true
				f.Begin()
				f.Loaded()
			}
		case s.failedErr() != nil:
			return nil, err
		default:
			s.log.Warn("cluster: cannot look up the notice bucket; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-s.made:
		case <-time.After(s.look):
		}
	}
	return nil, nil
}

func follow(ctx context.Context, w jetstream.KeyWatcher, f notices.Feed) {
	loaded := false
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				if !loaded {
					loaded = true
					f.Loaded()
				}
				continue
			}
			if e.Operation() == jetstream.KeyValuePut {
				f.Put(e.Key(), e.Value(), e.Revision())
			} else {
				f.Gone(e.Key(), e.Revision())
			}
		}
	}
}

// Get implements notices.Storage, at the stream's leader; no bucket yet
// is no key.
func (s *NoticeStorage) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	kv, err := s.lookBucket(ctx, false)
	if errors.Is(err, errNoticesLoading) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	data, rev, err := s.n.kvGet(ctx, kv, key)
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: reading notice key %s: %w", key, err)
	}
	return data, rev, nil
}

// Put implements notices.Storage: compare-and-set on the key's last
// sequence, with the TTL that takes it away KeepExpired after expires.
// The first write makes the bucket.
func (s *NoticeStorage) Put(ctx context.Context, key string, value []byte, rev uint64, expires time.Time) (uint64, error) {
	if _, err := s.lookBucket(ctx, true); err != nil {
		return 0, err
	}
	ttl := time.Until(expires.Add(notices.KeepExpired)).Round(time.Second)
	if ttl < time.Second {
		ttl = time.Second
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	for try := 0; ; try++ {
		pa, err := s.n.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + NoticesBucket + "." + key, Data: value},
			jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
		if isWrongLastSequence(err) {
			if rev == 0 && try == 0 {
				// A new key over a removal's marker: it is new all the same.
				if seq, gone := s.removedAt(ctx, key); gone {
					rev = seq
					continue
				}
			}
			return 0, notices.ErrConflict
		}
		if err != nil {
			return 0, fmt.Errorf("cluster: writing notice key %s: %w", key, err)
		}
		return pa.Sequence, nil
	}
}

// removedAt is the sequence of key's last message when it is a removal
// (a delete, a purge or a TTL's marker).
func (s *NoticeStorage) removedAt(ctx context.Context, key string) (uint64, bool) {
	st, err := s.n.js.Stream(ctx, "KV_"+NoticesBucket)
	if err != nil {
		return 0, false
	}
	m, err := st.GetLastMsgForSubject(ctx, "$KV."+NoticesBucket+"."+key)
	if err != nil {
		return 0, false
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" || m.Header.Get("Nats-Marker-Reason") != "" || len(bytes.TrimSpace(m.Data)) == 0 {
		return m.Sequence, true
	}
	return 0, false
}

// Delete implements notices.Storage: a purge leaving a marker for
// watchers; no bucket is nothing to delete.
func (s *NoticeStorage) Delete(ctx context.Context, key string, rev uint64) error {
	kv, err := s.lookBucket(ctx, false)
	if errors.Is(err, errNoticesLoading) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	opts := []jetstream.KVDeleteOpt{jetstream.PurgeTTL(noticesMarkerTTL)}
	if rev != 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err = kv.Purge(ctx, key, opts...)
	if isWrongLastSequence(err) {
		return notices.ErrConflict
	}
	return err
}
