package cluster

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/config"
	"termlink/server/identity"
)

// Device identity in the cluster (issue 25): the token bindings of every
// channel in KV termlink_bindings and the pending pairing codes in KV
// termlink_codes (codes.go), so that a token bound on one edge holds on
// every edge and a code asked for through one edge is approved on any
// node. The rules are identity's (Decide, Pending.DropDue, Victim): these
// stores only read, decide with them and write with compare-and-set.

// BindingsBucket holds every channel's learnt bindings.
const BindingsBucket = "termlink_bindings"

// A binding is two keys of the channel c (base64url of its id):
//
//	c.<c>.p.<peer, base64url>   the Binding (identity.Binding, JSON)
//	c.<c>.d.<token digest, hex> the peer_id the token is bound to
//
// It holds only when both name each other: a binder writes the peer's
// key first (create, or update at the revision it decided on), then the
// token's, then checks the peer's key is still its own; a reset deletes
// the peer's key first. So a half-written binding (a binder died, or
// lost a race and undid its write) binds nothing. Two binders of one
// token as two peers both write their peer keys, and only one creates
// the token's key; two binders of one peer: only one creates its key.
// A peer's key that names a token whose key does not name it back is a
// binding being written while younger than bindingSettle (a connect
// waits for it), and debris after.

// bindingSettle is how long a half-written binding may be a binding in
// progress: older, it is debris that another binding replaces.
const bindingSettle = 30 * time.Second

// bindTries bounds the read-decide-write rounds of one call.
const bindTries = 8

// readFailed is the decision when the bindings cannot be read.
var readFailed = identity.Decision{Why: "the server could not read the device credentials (the cluster's store); try again later"}

// Bindings is identity.Bindings for one channel, shared by every node of
// the cluster.
type Bindings struct {
	n      *Node
	kv     jetstream.KeyValue
	prefix string // c.<channel>.
	log    *slog.Logger
}

var _ identity.Bindings = (*Bindings)(nil)

// OpenBindings returns channel's bindings, creating the bucket if this is
// the first node to ask (replicas as the other buckets).
func (n *Node) OpenBindings(ctx context.Context, channel string) (*Bindings, error) {
	kv, err := n.identityBucket(ctx, jetstream.KeyValueConfig{Bucket: BindingsBucket,
		Description: "termlink: device token bindings (first use and enrolled), by channel", Storage: jetstream.FileStorage})
	if err != nil {
		return nil, err
	}
	return &Bindings{n: n, kv: kv, prefix: "c." + keyPart(channel) + ".", log: n.log.With("channel_id", channel)}, nil
}

// identityBucket creates or updates one of identity's buckets.
func (n *Node) identityBucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	cfg.History, cfg.Replicas = 1, n.cfg.Replicas
	return ensure(ctx, "bucket "+cfg.Bucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return n.js.CreateOrUpdateKeyValue(ctx, cfg)
	})
}

// keyPart is s as one token of a KV key.
func keyPart(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func (b *Bindings) peerKey(peer string) string { return b.prefix + "p." + keyPart(peer) }
func (b *Bindings) digestKey(d config.Digest) string {
	return b.prefix + "d." + hex.EncodeToString(d[:])
}

// kvGet reads key of kv from its stream's leader (leaderGet); rev 0: none.
func (n *Node) kvGet(ctx context.Context, kv jetstream.KeyValue, key string) ([]byte, uint64, error) {
	bucket := kv.Bucket()
	data, rev, found, err := n.leaderGet(ctx, "KV_"+bucket, "$KV."+bucket+"."+key)
	if err != nil || !found {
		return nil, 0, err
	}
	return data, rev, nil
}

// kvWrite creates key (rev 0) or replaces it at rev; ErrConflict when
// another write came first.
func kvWrite(ctx context.Context, kv jetstream.KeyValue, key string, v []byte, rev uint64) (uint64, error) {
	var err error
	var nrev uint64
	if rev == 0 {
		nrev, err = kv.Create(ctx, key, v)
	} else {
		nrev, err = kv.Update(ctx, key, v, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		return 0, ErrConflict
	}
	return nrev, err
}

// kvDelete deletes key at rev (0: whatever it holds); ErrConflict when it
// changed since.
func kvDelete(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64) error {
	var opts []jetstream.KVDeleteOpt
	if rev != 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err := kv.Delete(ctx, key, opts...)
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		return ErrConflict
	}
	return err
}

// bindState is what the bucket holds for one peer and one token.
type bindState struct {
	peer       *identity.Binding // the peer's key, whole or half-written
	peerRev    uint64
	peerWhole  bool              // its token's key names it back
	byDigest   *identity.Binding // the binding the token is part of, whole
	digestPeer string            // the token's key (a peer_id), whole or not
	digestRev  uint64
}

// settling reports a binding of the peer being written by another call.
func (s bindState) settling() bool {
	return s.peer != nil && !s.peerWhole && time.Since(s.peer.BoundAt) < bindingSettle
}

// byPeer is the peer's binding if whole.
func (s bindState) byPeer() *identity.Binding {
	if s.peerWhole {
		return s.peer
	}
	return nil
}

// readPeer reads peer's key, and whether the token it names names it back.
func (b *Bindings) readPeer(ctx context.Context, peer string) (bd *identity.Binding, rev uint64, whole bool, err error) {
	data, rev, err := b.n.kvGet(ctx, b.kv, b.peerKey(peer))
	if err != nil || rev == 0 {
		return nil, 0, false, err
	}
	bd = new(identity.Binding)
	if err := json.Unmarshal(data, bd); err != nil {
		return nil, 0, false, fmt.Errorf("binding of %s: %w", peer, err)
	}
	d, err := hex.DecodeString(bd.Digest)
	if err != nil || len(d) != len(config.Digest{}) {
		return bd, rev, false, nil
	}
	owner, _, err := b.n.kvGet(ctx, b.kv, b.digestKey(config.Digest(d)))
	return bd, rev, err == nil && string(owner) == peer, err
}

// read reads what the bucket holds for peer and d.
func (b *Bindings) read(ctx context.Context, peer string, d config.Digest) (s bindState, err error) {
	if s.peer, s.peerRev, s.peerWhole, err = b.readPeer(ctx, peer); err != nil {
		return s, err
	}
	owner, rev, err := b.n.kvGet(ctx, b.kv, b.digestKey(d))
	if err != nil || rev == 0 {
		return s, err
	}
	s.digestPeer, s.digestRev = string(owner), rev
	if s.digestPeer == peer {
		if bp := s.byPeer(); bp != nil && bp.Digest == hex.EncodeToString(d[:]) {
			s.byDigest = bp
		}
		return s, nil
	}
	other, _, whole, err := b.readPeer(ctx, s.digestPeer)
	if err == nil && whole && other.Digest == hex.EncodeToString(d[:]) {
		s.byDigest = other
	}
	return s, err
}

// bind writes bd (its Digest set to d) as decided on s: true when it
// holds, false when another write came first (read again and decide).
func (b *Bindings) bind(ctx context.Context, s bindState, d config.Digest, bd identity.Binding) (bool, error) {
	bd.Digest = hex.EncodeToString(d[:])
	v, _ := json.Marshal(bd)
	prev := s.peer
	peerRev, err := kvWrite(ctx, b.kv, b.peerKey(bd.PeerID), v, s.peerRev)
	if errors.Is(err, ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// The token's key: created, or taken from debris at its revision.
	digestRev, err := kvWrite(ctx, b.kv, b.digestKey(d), []byte(bd.PeerID), s.digestRev)
	if err != nil {
		// Undo ours (at its revision: nobody else's write is undone).
		_ = kvDelete(ctx, b.kv, b.peerKey(bd.PeerID), peerRev)
		if errors.Is(err, ErrConflict) {
			return false, nil
		}
		return false, err
	}
	// A binder that waited past bindingSettle may have lost the peer's
	// key meanwhile: the binding holds only if the key is still ours.
	if _, rev, err := b.n.kvGet(ctx, b.kv, b.peerKey(bd.PeerID)); err != nil || rev != peerRev {
		_ = kvDelete(ctx, b.kv, b.digestKey(d), digestRev)
		return false, err
	}
	// The token the peer had before (a stale first use, debris): its key
	// no longer names a binding; remove it if it still names the peer.
	if prev != nil && prev.Digest != bd.Digest {
		if od, err := hex.DecodeString(prev.Digest); err == nil && len(od) == len(d) {
			key := b.digestKey(config.Digest(od))
			if owner, rev, err := b.n.kvGet(ctx, b.kv, key); err == nil && string(owner) == bd.PeerID {
				_ = kvDelete(ctx, b.kv, key, rev)
			}
		}
	}
	return true, nil
}

// settle waits a little for a binding another call is writing.
func settle(try int) { time.Sleep(time.Duration(try+1) * 20 * time.Millisecond) }

// Known implements identity.Bindings.
func (b *Bindings) Known(d config.Digest) bool {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	owner, rev, err := b.n.kvGet(ctx, b.kv, b.digestKey(d))
	if err != nil || rev == 0 {
		return false
	}
	bd, _, whole, err := b.readPeer(ctx, string(owner))
	return err == nil && whole && bd.Source == identity.BindEnrolled && bd.Digest == hex.EncodeToString(d[:])
}

// Authorize implements identity.Bindings: identity.Decide on what the
// bucket holds, and a first-use binding written (compare-and-set) before
// the answer; a lost race reads again and decides again.
func (b *Bindings) Authorize(tokens config.Tokens, peerID, token, remote string) identity.Decision {
	if token == "" {
		return identity.NoToken
	}
	d := config.DigestOf(token)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for try := range bindTries {
		s, err := b.read(ctx, peerID, d)
		if err != nil {
			b.log.Error("cluster: reading a device's binding", "peer_id", peerID, "err", err)
			return readFailed
		}
		if s.settling() {
			settle(try)
			continue
		}
		res, bind := identity.Decide(tokens, peerID, d, s.byPeer(), s.byDigest)
		if !bind {
			return res
		}
		ok, err := b.bind(ctx, s, d, identity.Binding{PeerID: peerID, Source: identity.BindFirstUse, BoundAt: time.Now().UTC(), Remote: remote})
		if err != nil {
			b.log.Error("cluster: binding a token to its first peer not kept", "peer_id", peerID, "err", err)
			return identity.BindFailed
		}
		if ok {
			return res
		}
	}
	b.log.Warn("cluster: binding a token to its first peer: the bindings kept changing; refused for now", "peer_id", peerID)
	return identity.BindFailed
}

// Enroll implements identity.Bindings.
func (b *Bindings) Enroll(d config.Digest, bd identity.Binding) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for try := range bindTries {
		s, err := b.read(ctx, bd.PeerID, d)
		if err != nil {
			return fmt.Errorf("cluster: reading the bindings: %w", err)
		}
		old := s.byPeer()
		if old == nil && s.settling() {
			if try < bindTries-1 {
				settle(try)
				continue
			}
			old = s.peer
		}
		if old != nil {
			return fmt.Errorf("%w: peer_id %s is bound (%s since %s); reset it with DELETE /api/channels/{channel_id}/bindings/%s, or choose another peer_id",
				identity.ErrClaimed, bd.PeerID, old.Source, old.BoundAt.UTC().Format(time.RFC3339), bd.PeerID)
		}
		ok, err := b.bind(ctx, s, d, bd)
		if err != nil {
			return fmt.Errorf("cluster: writing the binding: %w", err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("cluster: binding peer_id %s: the bindings kept changing; try again", bd.PeerID)
}

// Reset implements identity.Bindings: the peer's key goes first (the
// binding stops holding at once), then the token's.
func (b *Bindings) Reset(peerID string) (*identity.Binding, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for range bindTries {
		bd, rev, whole, err := b.readPeer(ctx, peerID)
		if err != nil {
			return nil, fmt.Errorf("cluster: reading the binding: %w", err)
		}
		if rev == 0 {
			return nil, nil
		}
		if err := kvDelete(ctx, b.kv, b.peerKey(peerID), rev); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("cluster: removing the binding: %w", err)
		}
		if d, err := hex.DecodeString(bd.Digest); err == nil && len(d) == len(config.Digest{}) {
			key := b.digestKey(config.Digest(d))
			if owner, rev, err := b.n.kvGet(ctx, b.kv, key); err == nil && string(owner) == peerID {
				_ = kvDelete(ctx, b.kv, key, rev) // debris if it stays: it names no binding
			}
		}
		if !whole {
			return nil, nil // half written: there was no binding
		}
		return bd, nil
	}
	return nil, errors.New("cluster: removing the binding: it kept changing; try again")
}

// List implements identity.Bindings: the whole bindings, by peer_id.
func (b *Bindings) List() []identity.Binding {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	entries, err := watchAll(ctx, b.kv, b.prefix+">")
	if err != nil {
		b.log.Error("cluster: listing the bindings", "err", err)
		return nil
	}
	peers, owners := map[string]identity.Binding{}, map[string]string{} // by peer; token digest -> peer
	for _, e := range entries {
		rest := strings.TrimPrefix(e.Key(), b.prefix)
		switch {
		case strings.HasPrefix(rest, "p."):
			var bd identity.Binding
			if json.Unmarshal(e.Value(), &bd) == nil {
				peers[bd.PeerID] = bd
			}
		case strings.HasPrefix(rest, "d."):
			owners[strings.TrimPrefix(rest, "d.")] = string(e.Value())
		}
	}
	out := make([]identity.Binding, 0, len(peers))
	for peer, bd := range peers {
		if owners[bd.Digest] == peer {
			out = append(out, bd)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PeerID < out[j].PeerID })
	return out
}

// watchAll reads every live entry of kv under filter (a snapshot).
func watchAll(ctx context.Context, kv jetstream.KeyValue, filter string) ([]jetstream.KeyValueEntry, error) {
	w, err := watchKV(ctx, kv, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return out, errors.New("the watch ended early")
			}
			if e == nil { // the snapshot is read
				return out, nil
			}
			out = append(out, e)
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}
