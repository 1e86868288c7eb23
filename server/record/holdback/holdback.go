// Package holdback is the rule that a device's messages are taken in
// the order it sent them, written once above the stores of record (the
// runtime's accept path applies it, whichever store the backend opened).
//
// A message whose accept failed (refused busy by a bound, or not stored)
// is resent by the device, first: it puts the message back in send
// order. Meanwhile the device may have sent the session's next messages
// already (its window). Were one of them taken, it would overtake the
// refused one: a place frees on a single server between the two; in a
// cluster a failed publish may even be stored later (JetStream stores a
// message whose ack was lost in a leader election). So after a refusal
// the session's later messages are refused too, busy and naming the
// message to resend first, until that one is accepted. A duplicate of a
// message taken before is still answered (record.TakeNone): it
// overtakes nothing.
//
// The book is bounded: one entry per session with a refused message,
// forgotten when that message is accepted or when its device's
// connection ends or is replaced (the device resends what is unanswered,
// in order, on its new connection). A failure is held only while the
// connection that sent the message is the device's live one: an accept
// still waiting on the store when its connection went (jepsen seed 118:
// a claim read timing out while NATS elected, after the device had
// reconnected) held the device's next connection back for good, since
// that one had resent and moved past the message.
package holdback

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"termlink/server/bus"
	"termlink/server/record"
)

// Book is what the runtime holds back: per device (channel and peer),
// per session, the message whose accept failed. Safe for concurrent use.
type Book struct {
	mu   sync.Mutex
	held map[peer]map[string]string // device -> session -> refused message id
	// conn: the device's live connection (Connected), numbered by seq;
	// absent: none known (a caller that tells no connections). Per
	// channel, by peer id: an entry for each online device, keyed by its
	// id alone (a 24-byte slot, not 40 with the channel's name in it).
	conn map[string]map[string]uint64
	seq  uint64
	// nheld is the number of sessions held back (written under mu): an
	// accept that succeeds while it is 0 has nothing to let go, and
	// settles without the lock.
	nheld atomic.Int64
}

type peer struct{ channel, id string }

// New makes an empty book.
func New() *Book {
	return &Book{held: map[peer]map[string]string{}, conn: map[string]map[string]uint64{}}
}

// connOf is the number of p's live connection (0: none known; b.mu held).
func (b *Book) connOf(p peer) uint64 { return b.conn[p.channel][p.id] }

// Accept takes in through s (record.Store.Accept with perSession), unless
// an earlier message of its session was refused and is not taken yet:
// then only a duplicate is answered, and a new message is refused with
// an error wrapping record.ErrBusy that names the one to resend first.
// in's own failure holds the session's later messages back; its accept
// lets them go.
func (b *Book) Accept(ctx context.Context, s record.Store, in bus.Inbound, perSession int, ack func(record.Accepted)) error {
	first, conn := b.ahead(in)
	if first != "" {
		err := s.Accept(ctx, in, record.TakeNone, ack)
		if errors.Is(err, record.ErrBusy) {
			return Refusal(first)
		}
		return err // nil: a duplicate, answered
	}
	err := s.Accept(ctx, in, perSession, ack)
	b.settled(in, err, conn)
	return err
}

// Refusal is the busy refusal of a message sent after first, which is
// not accepted yet.
func Refusal(first string) error {
	return fmt.Errorf("%w: message %s of this session is not accepted yet; messages are taken in order: resend %s first",
		record.ErrBusy, first, first)
}

// ahead names the message of in's session whose accept failed, if it is
// not in (in must not overtake it; "" when in may go), and the number of
// in's device's live connection (0: none known), read at once.
func (b *Book) ahead(in bus.Inbound) (first string, conn uint64) {
	p := peer{in.ChannelID, in.PeerID}
	b.mu.Lock()
	defer b.mu.Unlock()
	if id := b.held[p][in.SessionKey]; id != in.MessageID {
		first = id
	}
	return first, b.connOf(p)
}

// settled records the outcome of the accept of in, which nothing held
// back and which came on connection conn: a failure holds the session's
// later messages back until in is accepted, unless that connection is no
// longer the device's live one.
func (b *Book) settled(in bus.Inbound, err error, conn uint64) {
	if err == nil && b.nheld.Load() == 0 {
		// Nothing held: in was not (its own earlier failure would be,
		// until in is accepted or its device's connection goes).
		return
	}
	p := peer{in.ChannelID, in.PeerID}
	b.mu.Lock()
	defer b.mu.Unlock()
	sessions := b.held[p]
	switch {
	case err != nil && b.connOf(p) != conn:
		// Its connection went (or was replaced) meanwhile.
	case err != nil:
		if sessions == nil {
			sessions = map[string]string{}
			b.held[p] = sessions
		}
		if _, ok := sessions[in.SessionKey]; !ok {
			b.nheld.Add(1)
		}
		sessions[in.SessionKey] = in.MessageID
	default:
		if id, ok := sessions[in.SessionKey]; ok && id == in.MessageID {
			delete(sessions, in.SessionKey)
			b.nheld.Add(-1)
			if len(sessions) == 0 {
				delete(b.held, p)
			}
		}
	}
}

// Connected records a device's new live connection (it may replace one
// still open) and forgets what the earlier one held back: the device
// resends its unanswered messages in order on it.
func (b *Book) Connected(channel, peerID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := peer{channel, peerID}
	b.seq++
	peers := b.conn[channel]
	if peers == nil {
		peers = map[string]uint64{}
		b.conn[channel] = peers
	}
	peers[peerID] = b.seq
	b.forgetLocked(p)
}

// forgetLocked drops what p holds back; mu is held.
func (b *Book) forgetLocked(p peer) {
	b.nheld.Add(-int64(len(b.held[p])))
	delete(b.held, p)
}

// Disconnected forgets what a device's connection held back: the device
// resends its unanswered messages in order wherever it connects again.
func (b *Book) Disconnected(channel, peerID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := peer{channel, peerID}
	b.forgetLocked(p)
	if peers := b.conn[channel]; peers != nil {
		delete(peers, peerID)
		if len(peers) == 0 {
			delete(b.conn, channel)
		}
	}
}

// Len is the number of sessions held back.
func (b *Book) Len() int { return int(b.nheld.Load()) }
