package rollout

import (
	"context"
	"errors"
)

// Storage is where the rollouts are kept: one record per rollout (its
// JSON, as Parse reads it) with a revision, and the controller's lease.
// It holds no rule: the plan, the waves, the device states, the merges
// of two nodes' writes and the API are the Manager's, which parses every
// record it reads with the strict parser (a record that does not parse
// is refused, naming it, and changes nothing). The workspace's files
// (LocalStorage) and the cluster's (package cluster: KV
// termlink_rollouts, shared by every node) implement it, and the
// contract suite (rollouttest) runs on both.
//
// A record's revision grows with every write of it (0: no record). A
// write names the revision it read (compare-and-set); ErrConflict says
// another write came first, and the Manager merges the two (merge) and
// writes again.
type Storage interface {
	// Follow feeds f every record (Put each, then Loaded), then every
	// change another writer makes, until ctx ends. A store no one else
	// writes returns after Loaded.
	Follow(ctx context.Context, f Feed) error
	// Get reads rollout id's record at the store itself: value and
	// revision, 0 when there is none.
	Get(ctx context.Context, id string) ([]byte, uint64, error)
	// Put writes id's record if it is at rev (0: none yet) and returns
	// the new revision; ErrConflict when it is at another, ErrFull past
	// the store's bounds.
	Put(ctx context.Context, id string, value []byte, rev uint64) (uint64, error)
	// Delete removes id's record if it is at rev; ErrConflict when it
	// is at another (none: nil).
	Delete(ctx context.Context, id string, rev uint64) error
	// Lease reads the controller's lease: who holds it and its revision
	// (0: nobody ever took it).
	Lease(ctx context.Context) (holder string, rev uint64, err error)
	// TakeLease writes holder as the lease's if it is at rev (0: none
	// yet): a renewal when holder held it, a take-over else. ErrConflict
	// when it is at another revision.
	TakeLease(ctx context.Context, holder string, rev uint64) (uint64, error)
	// Info says how the store is shared and bounded.
	Info() StorageInfo
	// Where names id's record in errors and logs.
	Where(id string) string
	// Close releases the store.
	Close() error
}

// StorageInfo says how a Storage is shared and bounded.
type StorageInfo struct {
	// Shared: other processes (nodes) write the store too, and Follow
	// brings their changes; the rollouts advance only on the node that
	// holds the lease.
	Shared bool
	// MaxRecordBytes bounds one record (0: maxFileBytes).
	MaxRecordBytes int
	// MaxRecords bounds the rollouts kept (0: none but
	// Options.MaxRollouts).
	MaxRecords int
}

// Feed is what a Storage's Follow tells the Manager.
type Feed interface {
	// Put is id's record at rev.
	Put(id string, value []byte, rev uint64)
	// Gone is id's record removed, at rev.
	Gone(id string, rev uint64)
	// Loaded ends the first load.
	Loaded()
}

var (
	// ErrConflict is a write that found its record at another revision.
	ErrConflict = errors.New("rollout: the record changed meanwhile")
	// ErrFull is a record past the store's bounds.
	ErrFull = errors.New("rollout: past the store's bounds")
)
