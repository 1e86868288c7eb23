package notices

import (
	"time"

	"termlink/link"
	"termlink/server/httpapi"
)

// Mailboxes is the notice mailboxes of every channel as the rest of the
// server uses them; Service implements it.
type Mailboxes interface {
	// Routes registers the notice API on mux (the server's guard wraps
	// it: GET takes a viewer, POST and DELETE an operator).
	Routes(mux httpapi.Mux)

	// Due returns the encoded notices of peer's mailbox a connection has
	// not queued yet (created after the one numbered after), oldest
	// first, at most limit, leaving out expired ones; last is the number
	// of the last one returned (after if none), more says some were left
	// for the next call.
	Due(channelID, peerID string, after uint64, limit int, now time.Time) (frames [][]byte, ids []string, last uint64, more bool)
	// MarkSent records that ids were queued on peer's connection.
	MarkSent(channelID, peerID string, ids []string, at time.Time)
	// Ack records that peer's device drew notice id; ErrUnknownNotice
	// when the peer was never sent it.
	Ack(channelID, peerID, noticeID string) error

	// FromAgent turns an agent's unsolicited output into a notice for
	// peer (info, the default display time and lifetime, text cut to
	// MaxTextChars).
	FromAgent(channelID, peerID, text string) error

	// Count is how many notices peer's mailbox holds not yet acked,
	// expired or withdrawn (the registry's notices_pending).
	Count(channelID, peerID string) int
	// ForPeer is peer's open notices for the fleet's peer page (a JSON
	// array).
	ForPeer(channelID, peerID string) any

	// Start runs the background work (expiry, snapshots) until Close.
	Start()
	Close() error
}

// PeerDirectory is what a notice broadcast needs of a channel's devices:
// the known peers whose tags include every one of tags (none: all).
type PeerDirectory interface {
	PeersWithTags(channelID string, tags map[string]string) []string
}

// noPeers is the PeerDirectory of mailboxes opened without one.
type noPeers struct{}

func (noPeers) PeersWithTags(string, map[string]string) []string { return nil }

// Frame is the notice frame a device is sent for c (link.Notice).
func Frame(c Content) []byte {
	return link.MustEncode(&link.Notice{NoticeID: c.NoticeID, Text: c.Text, Priority: c.Priority,
		DisplaySeconds: c.DisplaySeconds, ExpiresAt: c.ExpiresAt.UTC().Format(time.RFC3339)})
}
