package holdback

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"termlink/server/bus"
	"termlink/server/record"
)

// store is a store of record's Accept: a session takes a new message
// while it has a place (room), answers a message taken before as a
// duplicate past any bound, and fails accepts while down.
type store struct {
	record.Store
	room  bool
	down  bool
	taken []string
	seen  map[string]bool
}

func (s *store) Accept(_ context.Context, in bus.Inbound, perSession int, ack func(record.Accepted)) error {
	if s.seen[in.MessageID] {
		ack(record.Accepted{Duplicate: true, Pending: true})
		return nil
	}
	if s.down {
		return errors.New("publish: no answer")
	}
	if !s.room || perSession == record.TakeNone {
		return fmt.Errorf("%w: session %s has 1 messages waiting (maxWaitingPerSession)", record.ErrBusy, in.SessionKey)
	}
	s.seen[in.MessageID] = true
	s.taken = append(s.taken, in.MessageID)
	ack(record.Accepted{})
	return nil
}

func msg(peer, session, id string) bus.Inbound {
	return bus.Inbound{ChannelID: "c", PeerID: peer, SessionKey: session, MessageID: id}
}

// accept offers in and says how it went: "ack", "dup", or the error.
func accept(b *Book, s *store, in bus.Inbound) string {
	how := ""
	err := b.Accept(context.Background(), s, in, 1, func(a record.Accepted) {
		how = "ack"
		if a.Duplicate {
			how = "dup"
		}
	})
	if err != nil {
		if how != "" {
			return "acked and refused: " + err.Error()
		}
		return err.Error()
	}
	return how
}

func TestLaterMessagesWaitForTheRefusedOne(t *testing.T) {
	b, s := New(), &store{room: true, seen: map[string]bool{}}
	if got := accept(b, s, msg("p", "s", "A")); got != "ack" {
		t.Fatalf("A: %s", got)
	}
	s.room = false
	if got := accept(b, s, msg("p", "s", "B")); !strings.Contains(got, "maxWaitingPerSession") {
		t.Fatalf("B with no room: %s, want the bound's refusal", got)
	}
	s.room = true // a place frees before C, sent in the device's window, comes
	got := accept(b, s, msg("p", "s", "C"))
	want := "busy: message B of this session is not accepted yet; messages are taken in order: resend B first"
	if got != want {
		t.Fatalf("C after B was refused: %q, want %q", got, want)
	}
	if got := accept(b, s, msg("p", "s", "A")); got != "dup" {
		t.Fatalf("a resend of A, taken before B: %s, want a duplicate answered", got)
	}
	if got := accept(b, s, msg("p", "other", "X")); got != "ack" {
		t.Fatalf("another session of the device: %s", got)
	}
	if got := accept(b, s, msg("q", "s2", "Y")); got != "ack" {
		t.Fatalf("another device: %s", got)
	}
	if b.Len() != 1 {
		t.Fatalf("Len %d, want 1 (session s)", b.Len())
	}
	if got := accept(b, s, msg("p", "s", "B")); got != "ack" {
		t.Fatalf("B resent first: %s", got)
	}
	if got := accept(b, s, msg("p", "s", "C")); got != "ack" {
		t.Fatalf("C after B: %s", got)
	}
	if want := "A X Y B C"; strings.Join(s.taken, " ") != want {
		t.Fatalf("taken %v, want %s", s.taken, want)
	}
	if b.Len() != 0 {
		t.Fatalf("Len %d once B is taken, want 0", b.Len())
	}
}

// A failure that is not a bound's (a publish with no answer) holds the
// session back too: the message may still be stored later.
func TestFailedAcceptHoldsBack(t *testing.T) {
	b, s := New(), &store{room: true, down: true, seen: map[string]bool{}}
	if got := accept(b, s, msg("p", "s", "A")); got != "publish: no answer" {
		t.Fatalf("A: %s", got)
	}
	s.down = false
	if got := accept(b, s, msg("p", "s", "B")); !strings.Contains(got, "resend A first") {
		t.Fatalf("B after A failed: %s", got)
	}
	if got := accept(b, s, msg("p", "s", "A")); got != "ack" {
		t.Fatalf("A resent: %s", got)
	}
	if got := accept(b, s, msg("p", "s", "B")); got != "ack" {
		t.Fatalf("B after A: %s", got)
	}
}

// A device's disconnect forgets what it held back (it resends in order
// wherever it connects again); another device's does not.
func TestDisconnectClearsTheHold(t *testing.T) {
	b, s := New(), &store{seen: map[string]bool{}}
	for _, in := range []bus.Inbound{msg("p", "s", "A"), msg("p", "s:thread", "T"), msg("q", "s2", "Q")} {
		if got := accept(b, s, in); !strings.Contains(got, "maxWaitingPerSession") {
			t.Fatalf("%s with no room: %s", in.MessageID, got)
		}
	}
	if b.Len() != 3 || heldInMap(b) != 3 {
		t.Fatalf("Len %d (%d in the map), want 3", b.Len(), heldInMap(b))
	}
	b.Disconnected("c", "p")
	if b.Len() != 1 || heldInMap(b) != 1 {
		t.Fatalf("Len %d (%d in the map) after p left, want 1 (q's)", b.Len(), heldInMap(b))
	}
	s.room = true
	if got := accept(b, s, msg("p", "s", "B")); got != "ack" {
		t.Fatalf("B after p reconnected: %s", got)
	}
	if got := accept(b, s, msg("q", "s2", "R")); !strings.Contains(got, "resend Q first") {
		t.Fatalf("R of q, still held back: %s", got)
	}
	b.Disconnected("other-channel", "q")
	if got := accept(b, s, msg("q", "s2", "R")); !strings.Contains(got, "resend Q first") {
		t.Fatalf("R after a peer of another channel left: %s", got)
	}
}

// slowStore fails an accept once the test lets it (the store's answer
// comes after the device's connection changed).
type slowStore struct {
	*store
	entered, fail chan struct{}
}

func (s slowStore) Accept(ctx context.Context, in bus.Inbound, perSession int, ack func(record.Accepted)) error {
	if in.MessageID == "slow" {
		close(s.entered)
		<-s.fail
		return errors.New("reading the claim: context deadline exceeded")
	}
	return s.store.Accept(ctx, in, perSession, ack)
}

// A failure is held only while the connection that sent the message is
// the device's live one (jepsen seed 118): an accept still waiting on the
// store when the device reconnected, or left, holds nothing back on its
// next connection, which resends in order and moves on.
func TestFailureOfAConnectionGoneHoldsNothing(t *testing.T) {
	for _, change := range []string{"replaced", "left"} {
		b := New()
		s := slowStore{&store{room: true, seen: map[string]bool{}}, make(chan struct{}), make(chan struct{})}
		b.Connected("c", "p")
		done := make(chan string)
		go func() { done <- accept(b, s.store, msg("p", "s", "first")) }() // a fast one, to check the plain path too
		if got := <-done; got != "ack" {
			t.Fatalf("%s: first: %s", change, got)
		}
		go func() {
			err := b.Accept(context.Background(), s, msg("p", "s", "slow"), 1, func(record.Accepted) {})
			done <- fmt.Sprint(err)
		}()
		<-s.entered
		if change == "replaced" {
			b.Connected("c", "p")
		} else {
			b.Disconnected("c", "p")
			b.Connected("c", "p")
		}
		close(s.fail)
		if got := <-done; !strings.Contains(got, "deadline exceeded") {
			t.Fatalf("%s: slow: %s", change, got)
		}
		if got := accept(b, s.store, msg("p", "s", "next")); got != "ack" {
			t.Errorf("%s: the next connection's message after the old one's failure: %s, want ack", change, got)
		}
		if b.Len() != 0 {
			t.Errorf("%s: %d sessions held back", change, b.Len())
		}
	}
	// On the same connection the failure holds, as before.
	b := New()
	s := &store{room: true, down: true, seen: map[string]bool{}}
	b.Connected("c", "p")
	_ = accept(b, s, msg("p", "s", "A"))
	s.down = false
	if got := accept(b, s, msg("p", "s", "B")); !strings.Contains(got, "resend A first") {
		t.Errorf("same connection: B after A failed: %s", got)
	}
}

// heldInMap counts the sessions held back in the book's map, which Len's
// counter must match.
func heldInMap(b *Book) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, sessions := range b.held {
		n += len(sessions)
	}
	return n
}
