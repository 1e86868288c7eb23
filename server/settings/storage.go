package settings

import (
	"context"
	"errors"
)

// Storage is where the settings keep their documents: one record per
// channel (its version, its tag and peer documents, as JSON) with a
// revision. It holds no rule: the documents, their bounds and the
// channel's version, what a device's settings are, every push, the acks
// and the API are the Store's, which parses every record it reads with
// the strict parser (a record that does not parse is refused, naming
// it, and changes nothing). The workspace's file (LocalStorage) and the
// cluster's (package cluster: KV termlink_settings, shared by every
// node) implement it, and the contract suite (settingstest) runs on
// both.
//
// A channel's revision grows with every write of its record (0: no
// record). A write names the revision it read (compare-and-set), and
// ErrConflict says another write came first: two nodes' changes of one
// channel at once are both kept, one after the other, and the channel's
// version stays one sequence across them.
type Storage interface {
	// Follow feeds f every channel's record (Put each, then Loaded),
	// then every change another writer makes, until ctx ends. A store
	// no one else writes returns after Loaded.
	Follow(ctx context.Context, f Feed) error
	// Get reads channelID's record at the store itself (not a copy):
	// value and revision, 0 when there is none.
	Get(ctx context.Context, channelID string) ([]byte, uint64, error)
	// Put writes channelID's record if it is at rev (0: none yet) and
	// returns the new revision; ErrConflict when it is at another.
	Put(ctx context.Context, channelID string, value []byte, rev uint64) (uint64, error)
	// Info says how the store is shared and bounded.
	Info() StorageInfo
	// Where names channelID's record in errors and logs.
	Where(channelID string) string
	// Close releases the store.
	Close() error
}

// StorageInfo says how a Storage is shared and bounded.
type StorageInfo struct {
	// Shared: other processes (nodes) write the store too, and Follow
	// brings their changes.
	Shared bool
	// MaxRecordBytes bounds one channel's record (0: none but the
	// documents' own bounds); a change past it is refused (ErrFull).
	MaxRecordBytes int
}

// Feed is what a Storage's Follow tells the store.
type Feed interface {
	// Put is channelID's record at rev.
	Put(channelID string, value []byte, rev uint64)
	// Gone is channelID's record removed (by hand: the store never
	// removes one), at rev.
	Gone(channelID string, rev uint64)
	// Loaded ends the first load.
	Loaded()
}

// ErrConflict is a Put that found its record at another revision.
var ErrConflict = errors.New("settings: the channel's record changed meanwhile")
