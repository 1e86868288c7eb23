package notices

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"termlink/server/events"
	"termlink/server/metrics"
)

// Options are everything the mailboxes need of the rest of the server,
// given at New (or Open). The functions are called without the
// mailboxes' locks held, and only once Start ran (the load calls none of
// them but MaxPerPeer) or an API call was made.
type Options struct {
	// NoSync: the local store does not fsync (tests, benchmarks).
	NoSync bool
	// MaxPerPeer is the bound of a channel's mailboxes (nil:
	// DefaultMaxPerPeer). Pruning calls it with the mailboxes' lock
	// held: it must not call back into them.
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
	// SnapshotBytes is how much the local store logs before a snapshot
	// (default 8 MiB).
	SnapshotBytes int
	// Now is the clock (nil: time.Now); tests move it.
	Now    func() time.Time
	Logger *slog.Logger
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
