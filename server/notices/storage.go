package notices

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"time"
)

// Storage is where the mailboxes keep their records: a small key-value
// store with revisions. It holds no rule: which records there are, what
// they say, every transition, the bounds, expiry and pruning, the events
// and the metrics are the Service's. The local store (LocalStorage: the
// workspace's write-ahead log and snapshot) and the cluster's (package
// cluster: KV termlink_notices, shared by every node) implement it, and
// the contract suite (noticestest) runs on both.
//
// A key's revision grows with every write of the store (0: no such key).
// The records (keys below) are written with compare-and-set: a write
// names the revision it read, and ErrConflict says another write came
// first.
type Storage interface {
	// Follow feeds f every record the store holds (Begin, the records,
	// Loaded), then every change another writer makes, until ctx ends. A
	// store no one else writes returns after Loaded; one that loses its
	// feed starts again with Begin (what the new load does not bring is
	// gone).
	Follow(ctx context.Context, f Feed) error
	// Get reads key at the store itself (not a copy): value and revision,
	// 0 when there is no such key.
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	// Put writes value at key if the key is at rev (0: new), and returns
	// the new revision; ErrConflict when the key is elsewhere. expires is
	// when the record's notice expires: a store that forgets records by
	// itself (Info().ExpiresRecords) may drop it KeepExpired later.
	Put(ctx context.Context, key string, value []byte, rev uint64, expires time.Time) (uint64, error)
	// Delete removes key if it is at rev (0: at any revision).
	Delete(ctx context.Context, key string, rev uint64) error
	// Info says how the store is shared.
	Info() StorageInfo
	// Maintain is called by the sweeper each round (a local store writes
	// its snapshot there).
	Maintain() error
	// Close releases the store.
	Close() error
}

// StorageInfo says how a Storage is shared.
type StorageInfo struct {
	// Shared: other processes (nodes) write the store too; the per-peer
	// bound is then kept by a compare-and-set of the mailbox's record,
	// else on the state under one lock.
	Shared bool
	// ExpiresRecords: the store drops a record KeepExpired after its
	// expiry by itself (the sweeper only forgets it), else the sweeper
	// deletes it.
	ExpiresRecords bool
	// Node names this process in the events ("" when not shared).
	Node string
}

// Feed is what a Storage's Follow tells the mailboxes.
type Feed interface {
	// Begin starts a load of the whole store.
	Begin()
	// Put is key's value at rev.
	Put(key string, value []byte, rev uint64)
	// Gone is key removed (at rev).
	Gone(key string, rev uint64)
	// Loaded ends the load: what it did not bring is gone.
	Loaded()
}

// Presence is what a shared Storage may add: whether peer is connected
// to another node (a create counts it online).
type Presence interface {
	Elsewhere(ctx context.Context, channelID, peerID string) bool
}

// ErrConflict is a Put or Delete that found its key at another revision.
var ErrConflict = errors.New("notices: the record changed meanwhile")

// Keys of the records:
//
//	n.<notice id>                               the notice (noticeValue)
//	d.<channel b64>.<peer b64>.<notice id>      one peer's delivery (deliveryValue)
//	m.<channel b64>.<peer b64>                  a mailbox's open deliveries (boxValue; shared stores only)
//
// The channel and the peer are unpadded base64url, so any of them makes
// a key of NATS's alphabet.

// NoticeKey is the key of notice id.
func NoticeKey(id string) string { return "n." + id }

// DeliveryKey is the key of peer's delivery of notice id.
func DeliveryKey(ch, peer, id string) string {
	return "d." + keyPart(ch) + "." + keyPart(peer) + "." + id
}

func boxKey(ch, peer string) string { return "m." + keyPart(ch) + "." + keyPart(peer) }

func keyPart(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// ValidID reports whether id can be a key's last token (an ack's
// notice_id comes from a device).
func ValidID(id string) bool {
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

// ParseDeliveryKey splits a delivery's key.
func ParseDeliveryKey(key string) (ch, peer, id string, ok bool) {
	rest, ok := strings.CutPrefix(key, "d.")
	if !ok {
		return "", "", "", false
	}
	ec, rest, ok1 := strings.Cut(rest, ".")
	ep, id, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.IndexByte(id, '.') >= 0 {
		return "", "", "", false
	}
	c, err1 := base64.RawURLEncoding.DecodeString(ec)
	p, err2 := base64.RawURLEncoding.DecodeString(ep)
	if err1 != nil || err2 != nil || !ValidID(id) {
		return "", "", "", false
	}
	return string(c), string(p), id, true
}

// noticeValue is a notice as the store holds it.
type noticeValue struct {
	Channel string `json:"channel_id"`
	Content
}

// deliveryValue is one peer's delivery of a notice.
type deliveryValue struct {
	State   string     `json:"state"` // Pending, Sent, Acked, Expired or Withdrawn
	Expires time.Time  `json:"expires_at"`
	SentAt  *time.Time `json:"sent_at,omitempty"`
	AckedAt *time.Time `json:"acked_at,omitempty"`
	By      string     `json:"by,omitempty"` // the node that wrote it
}

func (v *deliveryValue) open() bool { return v.State == Pending || v.State == Sent }

// boxValue is the open deliveries of a mailbox, for the per-peer bound
// of a shared store: a create takes a place in it by compare-and-set, a
// delivery that ends gives its place back.
type boxValue struct {
	Open []boxSlot `json:"open"`
}

// boxSlot is one open delivery's place: its notice, and when that
// expires (Unix seconds; a mailbox of 10,000 places stays under 500 KB).
type boxSlot struct {
	ID      string `json:"id"`
	Expires int64  `json:"exp"`
}
