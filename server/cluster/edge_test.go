package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/bus"

	"github.com/nats-io/nats.go/jetstream"
)

func inbound(session, id string) bus.Inbound {
	return bus.Inbound{ChannelID: "c", PeerID: "p", SessionKey: session, MessageID: id}
}

func TestWaitsAdmitBounds(t *testing.T) {
	t.Parallel()
	w := NewWaits()
	if _, r := w.Admit(inbound("s", "1"), 2, 3); r != "" {
		t.Fatal(r)
	}
	if _, r := w.Admit(inbound("s", "2"), 2, 3); r != "" {
		t.Fatal(r)
	}
	if _, r := w.Admit(inbound("s", "3"), 2, 3); r == "" {
		t.Fatal("a third message of a session admitted past maxWaitingPerSession 2")
	}
	if _, r := w.Admit(inbound("t", "1"), 2, 3); r != "" {
		t.Fatal(r)
	}
	if _, r := w.Admit(inbound("u", "1"), 2, 3); r == "" {
		t.Fatal("a fourth message admitted past maxWaitingRuns 3")
	}
	if again, r := w.Admit(inbound("s", "2"), 2, 3); !again || r != "" {
		t.Fatalf("a resend of a message waited on: again %v, refused %q; want it through, taking no place", again, r)
	}
	if w.Len() != 3 {
		t.Fatalf("%d messages waited on after a resend, want 3", w.Len())
	}
	if !w.Done(Key{"s", "1"}) || w.Done(Key{"s", "1"}) {
		t.Fatal("Done: true once for a message waited on, then false")
	}
	if _, r := w.Admit(inbound("s", "3"), 2, 3); r != "" {
		t.Fatalf("after a place freed: %s", r)
	}
}

// Admit takes a place in one step: of many accepts racing for the last
// places, exactly as many as there are places get one (the edge once let
// 4097 of 4096 through).
func TestWaitsAdmitRace(t *testing.T) {
	t.Parallel()
	w := NewWaits()
	const places, tries = 64, 256
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, r := w.Admit(inbound("s"+strconv.Itoa(i%26), strconv.Itoa(i)), tries, places); r == "" {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != places || w.Len() != places {
		t.Fatalf("admitted %d, waiting %d; want %d", admitted, w.Len(), places)
	}
}

func TestWaitsReplyBeforeAckIsParked(t *testing.T) {
	t.Parallel()
	w := NewWaits()
	in := inbound("s", "m")
	if _, r := w.Admit(in, 8, 8); r != "" { // acking
		t.Fatal(r)
	}
	out := bus.Outbound{Kind: bus.Final, SessionKey: "s", MessageID: "m", Text: "hi"}
	if w.Final(out) {
		t.Fatal("a reply before the ack is to be sent")
	}
	parked := w.Acked(KeyOf(in))
	if parked == nil || parked.Text != "hi" {
		t.Fatalf("Acked returned %v; want the parked reply", parked)
	}
	if !w.Final(*parked) {
		t.Fatal("the parked reply, after the ack, is not to be sent")
	}
	if w.Final(*parked) {
		t.Fatal("a second copy of the reply is to be sent")
	}
	w.Wait(in, false)
	if w.Acked(KeyOf(in)) != nil {
		t.Fatal("Acked returned a reply when none was parked")
	}
	if !w.Final(out) {
		t.Fatal("a reply after the ack is not to be sent")
	}
}

// A delta before the ack waits for it, the latest in place of the
// earlier; a final that came too supersedes it.
func TestWaitsDeltaBeforeAckIsParked(t *testing.T) {
	t.Parallel()
	w := NewWaits()
	in := inbound("s", "m")
	if _, r := w.Admit(in, 8, 8); r != "" { // acking
		t.Fatal(r)
	}
	for _, text := range []string{"He", "Hello"} {
		if w.Delta(bus.Outbound{Kind: bus.Delta, SessionKey: "s", MessageID: "m", Text: text}) {
			t.Fatalf("delta %q before the ack is to be sent", text)
		}
	}
	parked := w.Acked(KeyOf(in))
	if parked == nil || parked.Kind != bus.Delta || parked.Text != "Hello" {
		t.Fatalf("Acked returned %+v; want the latest parked delta", parked)
	}
	if !w.Delta(*parked) || !w.Delta(bus.Outbound{Kind: bus.Delta, SessionKey: "s", MessageID: "m", Text: "Hello!"}) {
		t.Fatal("a delta after the ack is not to be sent")
	}

	in2 := inbound("s", "m2")
	w.Admit(in2, 8, 8)
	w.Delta(bus.Outbound{Kind: bus.Delta, SessionKey: "s", MessageID: "m2", Text: "Hi"})
	w.Final(bus.Outbound{Kind: bus.Final, SessionKey: "s", MessageID: "m2", Text: "Hi there"})
	if p := w.Acked(KeyOf(in2)); p == nil || p.Kind != bus.Final {
		t.Fatalf("Acked returned %+v; want the final, not the delta it supersedes", p)
	}
}

func TestWaitsDisconnectedForgetsThePeer(t *testing.T) {
	t.Parallel()
	w := NewWaits()
	w.Wait(inbound("s", "1"), false)
	other := bus.Inbound{ChannelID: "c", PeerID: "q", SessionKey: "s2", MessageID: "1"}
	w.Wait(other, false)
	w.Present("c", "p", 5)
	w.Disconnected("c", "p")
	if _, ok := w.Waiting(Key{"s", "1"}); ok {
		t.Fatal("the peer's message is still waited on")
	}
	if _, ok := w.Waiting(KeyOf(other)); !ok {
		t.Fatal("another peer's message was forgotten")
	}
	if !w.Newer("c", "p", 1) {
		t.Fatal("the presence of a peer that left still counts")
	}
	if _, r := w.Admit(inbound("s", "2"), 1, 8); r != "" {
		t.Fatal("the session's count was not freed")
	}
}

func TestWaitsPresence(t *testing.T) {
	t.Parallel()
	w := NewWaits()
	w.Present("c", "p", 7)
	if w.Newer("c", "p", 7) || w.Newer("c", "p", 3) {
		t.Fatal("a presence change no newer than the connection held counts as newer")
	}
	if !w.Newer("c", "p", 8) {
		t.Fatal("a newer presence change does not count")
	}
}

func TestWaitsDue(t *testing.T) {
	t.Parallel()
	w := NewWaits()
	for _, id := range []string{"1", "2", "3"} {
		w.Wait(inbound("s", id), false)
	}
	now := time.Now()
	if due := w.Due(now, time.Second, 8); len(due) != 0 {
		t.Fatalf("due at once: %v", due)
	}
	later := now.Add(2 * time.Second)
	if due := w.Due(later, time.Second, 2); len(due) != 2 {
		t.Fatalf("due %v; want 2 (the max)", due)
	}
	if due := w.Due(later, time.Second, 8); len(due) != 1 {
		t.Fatalf("due %v; want the 1 not checked yet", due)
	}
	if due := w.Due(later.Add(2*time.Second), time.Second, 8); len(due) != 3 {
		t.Fatalf("due %v; want all 3 again after age", due)
	}
	wt, ok := w.Waiting(Key{"s", "1"})
	if !ok || wt.Channel != "c" || wt.Peer != "p" || wt.Since.IsZero() {
		t.Fatalf("Waiting = %+v %v", wt, ok)
	}
}

// Before lists the messages of a session acked here before a given one
// and still waited on, oldest first: a final that overtakes them has its
// session's earlier replies looked up first (Store.reply).
func TestWaitsBefore(t *testing.T) {
	t.Parallel()
	w := NewWaits()
	for _, id := range []string{"1", "2", "3", "4"} {
		w.Wait(inbound("s", id), false)
	}
	w.Wait(inbound("other", "1"), false)
	w.Wait(inbound("s", "5"), true) // its ack not written yet
	w.Wait(inbound("s", "6"), false)
	key := func(id string) Key { return Key{"s", id} }
	if got := w.Before(key("4")); len(got) != 3 || got[0] != key("1") || got[1] != key("2") || got[2] != key("3") {
		t.Fatalf("Before(4) = %v, want 1, 2, 3 of session s", got)
	}
	w.Done(key("2"))
	if got := w.Before(key("6")); len(got) != 3 || got[0] != key("1") || got[1] != key("3") || got[2] != key("4") {
		t.Fatalf("Before(6) after 2 was answered = %v, want 1, 3, 4 (not 5: its ack is not written)", got)
	}
	if got := w.Before(key("1")); len(got) != 0 {
		t.Fatalf("Before(1) = %v, want none", got)
	}
	if got := w.Before(key("9")); got != nil {
		t.Fatalf("Before of a message not waited on = %v, want none", got)
	}
	// Admit still counts a session's waits.
	if _, refused := w.Admit(inbound("s", "7"), 5, 100); refused == "" {
		t.Fatal("a sixth message of session s admitted with a bound of 5")
	}
}

// An edge names, in each message it stores, the one before it in its
// session's subject, and the stream checks it as it stores the message:
// a wrong guess (another edge stored one since, or this edge never knew)
// is refused with the right one and the publish made again with it.
func TestEdgeNamesThePreviousMessage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 2, time.Minute, time.Second)
	in := func(peer, id string) bus.Inbound {
		return bus.Inbound{ChannelID: "c", PeerID: peer, SessionKey: "c:a:" + peer, MessageID: id}
	}
	// stored reads back what the stream holds at seq.
	stored := func(seq uint64) inMsg {
		t.Helper()
		m, err := n.in.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeIn(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	pa1, last, err := n.publishInbound(ctx, in("peer", "m-1"), 0)
	if err != nil || last != pa1.Sequence {
		t.Fatalf("m-1: %v, last %d", err, last)
	}
	if got := stored(pa1.Sequence); got.Prev != noPrev {
		t.Errorf("the session's first message names %d before it, want none", got.Prev)
	}
	if _, _, err := n.publishInbound(ctx, in("other", "m-1"), 0); err != nil {
		t.Fatal(err)
	}
	// The right guess, then a wrong one (none), then a stale one.
	pa2, _, err := n.publishInbound(ctx, in("peer", "m-2"), pa1.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	pa3, _, err := n.publishInbound(ctx, in("peer", "m-3"), 0)
	if err != nil {
		t.Fatal(err)
	}
	pa4, last, err := n.publishInbound(ctx, in("peer", "m-4"), pa1.Sequence)
	if err != nil || last != pa4.Sequence {
		t.Fatalf("m-4: %v, last %d", err, last)
	}
	for _, c := range []struct {
		name      string
		seq, prev uint64
	}{{"m-2", pa2.Sequence, pa1.Sequence}, {"m-3", pa3.Sequence, pa2.Sequence}, {"m-4", pa4.Sequence, pa3.Sequence}} {
		if got := stored(c.seq); got.Prev != c.prev || got.MessageID != c.name {
			t.Errorf("%s at %d names %d before it, want %d", got.MessageID, c.seq, got.Prev, c.prev)
		}
	}
	// A resend is stored once; the session's last is then not known.
	dup, last, err := n.publishInbound(ctx, in("peer", "m-2"), pa4.Sequence)
	if err != nil || !dup.Duplicate || dup.Sequence != pa2.Sequence || last != 0 {
		t.Errorf("m-2 again: %v, duplicate %v at %d, last %d; want the first copy at %d and last unknown", err, dup != nil && dup.Duplicate, dup.Sequence, last, pa2.Sequence)
	}

	w := NewWaits()
	w.Stored("s", 41)
	if w.LastStored("s") != 41 || w.LastStored("t") != 0 {
		t.Error("LastStored: each session's own")
	}
	w.Stored("s", 0)
	if w.LastStored("s") != 0 {
		t.Error("a session forgotten keeps its last")
	}
}

// The stream's refusal of a wrong expected last sequence says the right
// one; anything else is not read as one.
func TestWrongLastSequence(t *testing.T) {
	for _, c := range []struct {
		err  error
		seq  uint64
		want bool
	}{
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 42"}, 42, true},
		{fmt.Errorf("publishing: %w", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 0"}), 0, true},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence"}, 0, false},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: many"}, 0, false},
		{&jetstream.APIError{ErrorCode: 10164, Description: "wrong last sequence"}, 0, false},
		{errors.New("wrong last sequence: 7"), 0, false},
	} {
		seq, ok := wrongLastSequence(c.err)
		if seq != c.seq || ok != c.want {
			t.Errorf("%v: %d %v, want %d %v", c.err, seq, ok, c.seq, c.want)
		}
	}
	if !inProcess(&jetstream.APIError{ErrorCode: 10164}) || inProcess(&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}) {
		t.Error("inProcess: only nats-server's 10164")
	}
}
