package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/rollout"
)

// The staged rollouts (issue 28, issue 39 item 3) are package rollout's
// Manager over RolloutStorage: each rollout one record of KV
// termlink_rollouts, written by compare-and-set on its revision, and the
// controller's lease key "rollouts" of the partitions' lease bucket
// (KV termlink_parts: in memory, its keys expire a lease after their
// last write, off every message's path), renewed by revision: the
// holder writes it every lease/3; another node takes it once it is gone
// or it has seen it unchanged for a whole lease. Every node follows the
// rollouts' bucket with a watch: a rollout started through any node
// reaches every node, each sends the update frames to the devices
// connected to it and writes their update_status into the record; the
// lease's holder alone advances the waves. This file is storage only: every rule is package
// rollout's, which parses every record read here as strictly as its
// files.

// RolloutsBucket holds the rollouts (key "r.<rollout id>").
const RolloutsBucket = "termlink_rollouts"

const (
	// rolloutsMaxValue bounds one rollout's record (under NATS's
	// default max_payload of 1 MiB): a rollout is created only while
	// its record is half of it (room for the devices' reasons).
	rolloutsMaxValue = 768 << 10
	// rolloutsMaxRecords bounds the rollouts kept in the cluster, so
	// that they fit the bucket whole.
	rolloutsMaxRecords = 16
	// rolloutsMaxBytes bounds the bucket (History 1): every NATS node
	// reserves it in its max_file_store (13 MiB).
	rolloutsMaxBytes = rolloutsMaxRecords*rolloutsMaxValue + 1<<20
	// rolloutsRewatch is the pause before a lost watch is made again.
	rolloutsRewatch = time.Second
	// rolloutsLeaseKey is the controller's lease in PartsBucket (the
	// partitions' are "p.<n>").
	rolloutsLeaseKey = "rollouts"
)

// RolloutStorage is rollout.Storage on KV termlink_rollouts, shared by
// every node.
type RolloutStorage struct {
	n   *Node
	kv  jetstream.KeyValue
	log *slog.Logger
}

var _ rollout.Storage = (*RolloutStorage)(nil)

// RolloutStorage makes (or finds) the rollouts' bucket, trying again
// while JetStream does not answer, until ctx ends; log (nil: the
// node's) takes what it refuses.
func (n *Node) RolloutStorage(ctx context.Context, log *slog.Logger) (*RolloutStorage, error) {
	if log == nil {
		log = n.log
	}
	kv, err := ensure(ctx, "bucket "+RolloutsBucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return n.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: RolloutsBucket,
			Description: "termlink: staged rollouts of releases, one record each",
			History:     1, Replicas: n.cfg.Replicas, Storage: jetstream.FileStorage,
			MaxBytes: rolloutsMaxBytes, MaxValueSize: rolloutsMaxValue})
	})
	if err != nil {
		return nil, err
	}
	return &RolloutStorage{n: n, kv: kv, log: log}, nil
}

// OpenRollouts returns the cluster's rollouts: package rollout's Manager
// over the node's RolloutStorage, loaded (the watch's first values)
// before it returns, or an error once ctx ends. The node's name holds
// the lease, for the cluster's lease time.
func (n *Node) OpenRollouts(ctx context.Context, opt rollout.Options) (*rollout.Manager, error) {
	if opt.Log == nil {
		opt.Log = n.log
	}
	st, err := n.RolloutStorage(ctx, opt.Log)
	if err != nil {
		return nil, err
	}
	opt.Node, opt.Lease = n.cfg.Name, n.cfg.Lease
	return rollout.New(ctx, st, opt)
}

// RolloutKey is rollout id's key in the bucket.
func RolloutKey(id string) string { return "r." + id }

// Info implements rollout.Storage.
func (s *RolloutStorage) Info() rollout.StorageInfo {
	return rollout.StorageInfo{Shared: true, MaxRecordBytes: rolloutsMaxValue, MaxRecords: rolloutsMaxRecords}
}

// Where implements rollout.Storage.
func (s *RolloutStorage) Where(id string) string {
	return "KV " + RolloutsBucket + " key " + RolloutKey(id)
}

// Close implements rollout.Storage: the node is its owner's to close.
func (s *RolloutStorage) Close() error { return nil }

// Follow implements rollout.Storage: a watch of the rollouts' keys (the
// records, then Loaded, then every change), made again when it ends,
// until ctx or the node's own ends. A watch made again brings every
// record again: the Manager keeps only what is newer than what it
// holds. A key that is not a rollout's is refused, naming it.
func (s *RolloutStorage) Follow(ctx context.Context, f rollout.Feed) error {
	s.n.followKV(ctx, s.log, s.kv, []string{"r.>"}, "rollouts", rolloutsRewatch, f.Loaded, func(e jetstream.KeyValueEntry) {
		id, ok := strings.CutPrefix(e.Key(), "r.")
		if !ok || !rollout.ValidID(id) {
			s.log.Error("cluster: a key in the rollouts bucket is refused: not a rollout's (r.<rollout id>)",
				"bucket", RolloutsBucket, "key", e.Key())
			return
		}
		if e.Operation() == jetstream.KeyValuePut {
			f.Put(id, e.Value(), e.Revision())
		} else {
			f.Gone(id, e.Revision())
		}
	})
	return nil
}

// Get implements rollout.Storage, at the stream's leader.
func (s *RolloutStorage) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	data, rev, err := s.n.kvGet(ctx, s.kv, RolloutKey(id))
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: reading %s: %w", s.Where(id), err)
	}
	return data, rev, nil
}

// Put implements rollout.Storage: a create (rev 0) or an update at rev.
func (s *RolloutStorage) Put(ctx context.Context, id string, value []byte, rev uint64) (uint64, error) {
	if len(value) > rolloutsMaxValue {
		return 0, fmt.Errorf("%w: %s: %d bytes, more than %d", rollout.ErrFull, s.Where(id), len(value), rolloutsMaxValue)
	}
	return s.write(ctx, s.kv, RolloutKey(id), value, rev)
}

func (s *RolloutStorage) write(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, rev uint64) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	nrev, err := kvWrite(ctx, kv, key, value, rev)
	if errors.Is(err, ErrConflict) {
		return 0, rollout.ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: writing KV %s key %s: %w", kv.Bucket(), key, err)
	}
	return nrev, nil
}

// Delete implements rollout.Storage.
func (s *RolloutStorage) Delete(ctx context.Context, id string, rev uint64) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	err := s.kv.Delete(ctx, RolloutKey(id), jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		if _, cur, gerr := s.Get(ctx, id); gerr == nil && cur == 0 {
			return nil // removed already
		}
		return rollout.ErrConflict
	}
	if err != nil {
		return fmt.Errorf("cluster: removing %s: %w", s.Where(id), err)
	}
	return nil
}

// Lease implements rollout.Storage, at the stream's leader.
func (s *RolloutStorage) Lease(ctx context.Context) (string, uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	data, rev, err := s.n.kvGet(ctx, s.n.parts, rolloutsLeaseKey)
	if err != nil {
		return "", 0, fmt.Errorf("cluster: reading the rollouts' lease: %w", err)
	}
	return string(data), rev, nil
}

// TakeLease implements rollout.Storage.
func (s *RolloutStorage) TakeLease(ctx context.Context, holder string, rev uint64) (uint64, error) {
	return s.write(ctx, s.n.parts, rolloutsLeaseKey, []byte(holder), rev)
}
