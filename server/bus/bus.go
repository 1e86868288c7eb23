// Package bus holds the two messages of the server's path: Inbound, one
// accepted user message (an adapter hands it to the runtime, the store of
// record hands it to the router, the router to an agent.Runner), and
// Outbound, a reply or progress on its way back (the store of record hands
// it to the runtime, which hands it to the channel's adapter). They are
// passed by call, not through queues: the waiting bounds are the router's
// Admission, and each adapter's Send never blocks.
package bus

import "time"

// Inbound is one accepted user message, as nanobot's InboundMessage with the
// channel identity of the terminal channel spelled out.
type Inbound struct {
	ChannelID  string
	AccountID  string
	PeerID     string
	ThreadID   string
	UserID     string
	SessionKey string // <channel_id>:<account_id>:<peer_id>[:<thread_id>]
	MessageID  string
	RunID      string
	Text       string
	Media      []string
	Received   time.Time
	// Capabilities the device listed in connect.
	Capabilities []string
	// Recovered marks a message found accepted and unanswered at start-up:
	// its run records that it runs again before it starts (a restart that
	// cuts this run short too answers it with an error instead).
	Recovered bool
	// Delivery tells the copies of one message apart in a cluster worker
	// (which delivery from the partition's consumer this copy is): a copy
	// left queued from before a partition moved must not run as the copy
	// delivered after it. 0 elsewhere.
	Delivery uint64 `json:"-"`
}

// ChatID is the chat identifier agents see: the peer id, plus the thread.
func (m *Inbound) ChatID() string {
	if m.ThreadID != "" {
		return m.PeerID + ":" + m.ThreadID
	}
	return m.PeerID
}

// Kind tells a final reply from an interim progress update.
type Kind uint8

const (
	// Final is the one reply that answers a message_id.
	Final Kind = iota
	// Progress is an interim update for devices that asked for progress.
	Progress
	// Delta is reply text as the agent writes it, for devices that asked
	// for "stream": Text is all the text of the run so far (each Delta
	// of a run extends the one before it), so a device that connects
	// mid-run, or misses one, is sent what it lacks. Not recorded; the
	// Final reply carries the whole text.
	Delta
)

// Outbound is a reply (or progress) on its way to a device.
type Outbound struct {
	Kind         Kind
	ChannelID    string
	PeerID       string
	SessionKey   string
	MessageID    string
	RunID        string
	Text         string
	FinishReason string
	Media        []string
	Started      time.Time // when the message was accepted, for latency metrics
}
