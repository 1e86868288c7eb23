// Package bus is the server's message bus: the one path every message takes
// between the channel adapters and the agent runners. Adapters publish to
// Inbound through the runtime; the router consumes Inbound and publishes
// replies to Outbound; the runtime's dispatcher hands Outbound to the
// adapter that owns the channel. Nothing goes around it.
package bus

import (
	"context"
	"errors"
	"time"
)

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

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("bus: closed")

// Bus is a pair of bounded queues. Publishing blocks while a queue is full
// (back-pressure) until the context ends.
type Bus struct {
	inbound  chan Inbound
	outbound chan Outbound
	done     chan struct{}
}

// New returns a Bus whose queues hold up to size messages each.
func New(size int) *Bus {
	if size < 1 {
		size = 1
	}
	return &Bus{
		inbound:  make(chan Inbound, size),
		outbound: make(chan Outbound, size),
		done:     make(chan struct{}),
	}
}

// PublishInbound queues an accepted message for the router.
func (b *Bus) PublishInbound(ctx context.Context, m Inbound) error {
	select {
	case <-b.done:
		return ErrClosed
	default:
	}
	select {
	case b.inbound <- m:
		return nil
	case <-b.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PublishOutbound queues a reply or progress update for dispatch.
func (b *Bus) PublishOutbound(ctx context.Context, m Outbound) error {
	select {
	case <-b.done:
		return ErrClosed
	default:
	}
	select {
	case b.outbound <- m:
		return nil
	case <-b.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Inbound is the router's side of the inbound queue.
func (b *Bus) Inbound() <-chan Inbound { return b.inbound }

// Outbound is the dispatcher's side of the outbound queue.
func (b *Bus) Outbound() <-chan Outbound { return b.outbound }

// Done is closed by Close.
func (b *Bus) Done() <-chan struct{} { return b.done }

// Close makes every later Publish fail; queued messages stay readable.
func (b *Bus) Close() {
	select {
	case <-b.done:
	default:
		close(b.done)
	}
}
