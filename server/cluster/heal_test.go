package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/internal/testwait"
	"termlink/server/bus"
	"termlink/server/config"
)

// healLease is the lease of the heal tests' worker: it ticks (and heal
// looks) every second, and a look's consumer info request may take a
// second (a look that times out counts as stuck; a loaded machine took
// more than the third of a second a 1 s lease gives).
const healLease = 3 * time.Second

// healWorker runs a worker owning the one partition of a fresh
// JetStream; every delivery is acked and its message id sent on got.
func healWorker(t *testing.T, ctx context.Context, url string) (*Node, <-chan string) {
	t.Helper()
	cfg := config.Cluster{NATS: []string{url}, Role: config.RoleWorker, Name: "w1", Partitions: 1,
		Replicas: 1, AckWait: 5 * time.Second, Lease: healLease, DuplicateWindow: time.Minute, DedupeTTL: time.Hour,
		ConsumerStuck: 2 * time.Second}
	n, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	got := make(chan string, 100)
	n.RunWorker(WorkerHooks{
		Deliver: func(_ context.Context, d *Delivery) {
			_ = d.Ack()
			got <- d.In.MessageID
		},
		Unfinished: func(int) int { return 0 },
	})
	t.Cleanup(n.StopWorker)
	return n, got
}

func publish(t *testing.T, ctx context.Context, n *Node, id string) {
	t.Helper()
	if _, err := n.PublishInbound(ctx, bus.Inbound{ChannelID: "c", PeerID: "peer", SessionKey: "c:a:peer", MessageID: id, Text: "x"}); err != nil {
		t.Fatal(err)
	}
}

// expect waits for the next delivery, which must be id's.
func expect(t *testing.T, got <-chan string, id string) {
	t.Helper()
	select {
	case g := <-got:
		if g != id {
			t.Fatalf("delivered %s, want %s", g, id)
		}
	case <-time.After(testwait.Deadline):
		t.Fatalf("%s not delivered within %s", id, testwait.Deadline)
	}
}

// owned waits until the worker owns the partition with a consumer, and
// returns its state.
func owned(t *testing.T, n *Node) PartitionState {
	t.Helper()
	var ps []PartitionState
	testwait.UntilOK(t, "the worker to own its partition with a consumer", func() error {
		if ps = n.Partitions(); len(ps) != 1 || ps[0].Consumer == "" {
			return fmt.Errorf("partitions %+v", ps)
		}
		return nil
	})
	return ps[0]
}

// ackFloor is the ack floor the worker last read of its one
// partition's consumer.
func ackFloor(n *Node) uint64 {
	n.mu.Lock()
	w := n.worker
	n.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, part := range w.owned {
		return part.health.floor()
	}
	return 0
}

// A consumer deleted behind the worker's back (as a consumer lost with a
// NATS node, or left without a leader, is unusable) is made again, at
// the ack floor of the old one: the partition's next message is
// answered, and the one answered before is not delivered again.
func TestHealRecreatesADeletedConsumer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n, got := healWorker(t, ctx, startJetStream(t))
	before := owned(t, n)
	publish(t, ctx, n, "m-1")
	expect(t, got, "m-1")
	testwait.Until(t, "the worker to read m-1's ack floor", func() bool { return ackFloor(n) >= 1 })

	if err := n.in.DeleteConsumer(ctx, before.Consumer); err != nil {
		t.Fatal(err)
	}
	// m-1 delivered again would come before m-2 (one consumer, in
	// stream order), and before m-3.
	publish(t, ctx, n, "m-2")
	expect(t, got, "m-2")
	after := owned(t, n)
	if after.Consumer == before.Consumer || after.Stuck != "" {
		t.Errorf("after the deletion: %+v, want a new consumer (was %s), not stuck", after, before.Consumer)
	}
	if r := n.ConsumersRecreated(); r != 1 {
		t.Errorf("%d consumers recreated, want 1", r)
	}
	publish(t, ctx, n, "m-3")
	expect(t, got, "m-3")
}

// A consumer that delivers nothing while messages wait (paused here: a
// consumer without a leader looks the same from the worker) is reported
// stuck, with why and since when, and is recreated after ConsumerStuck.
func TestHealRecreatesAStalledConsumer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	url := startJetStream(t)
	looks := spyLooks(t, url)
	n, got := healWorker(t, ctx, url)
	before := owned(t, n)
	// nats-server 2.12.3's pause request changes the consumer's metadata
	// in place while an info request (heal's look) reads it: a data race
	// the race detector reports. The pause goes just after a look is
	// answered; the next comes a tick (a second) later.
	looks.betweenLooks(t)
	if _, err := n.js.PauseConsumer(ctx, InStream, before.Consumer, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	publish(t, ctx, n, "m-1")
	var stuck PartitionState
	testwait.UntilOK(t, "the paused consumer reported stuck", func() error {
		if ps := n.Partitions(); len(ps) == 1 && ps[0].Stuck != "" {
			stuck = ps[0]
			return nil
		}
		return fmt.Errorf("partitions %+v", n.Partitions())
	})
	if !strings.Contains(stuck.Stuck, "delivers nothing while 1 messages wait") || stuck.Since == "" {
		t.Errorf("stuck partition %+v, want why and since when", stuck)
	}
	expect(t, got, "m-1")
	if after := owned(t, n); after.Consumer == before.Consumer {
		t.Errorf("consumer %s not recreated", after.Consumer)
	}
	if r := n.ConsumersRecreated(); r != 1 {
		t.Errorf("%d consumers recreated, want 1", r)
	}
}

// lookSpy follows heal's looks at the partition's consumer: each is a
// consumer info request of the inbound stream, answered on the asker's
// inbox.
type lookSpy struct {
	mu       sync.Mutex
	asked    []time.Time     // when each look was asked
	open     map[string]bool // the reply subjects of looks not answered yet
	replies  map[string]bool // every inbox answered (an answer may come before its look)
	answered time.Time       // when the last look was answered
}

func spyLooks(t *testing.T, url string) *lookSpy {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s := &lookSpy{open: map[string]bool{}, replies: map[string]bool{}}
	ch := make(chan *nats.Msg, 1<<14)
	for _, subj := range []string{"$JS.API.CONSUMER.INFO." + InStream + ".>", "_INBOX.>"} {
		if _, err := nc.ChanSubscribe(subj, ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case <-stop:
				return
			case m := <-ch:
				now := time.Now()
				s.mu.Lock()
				// The server may send the spy a look's answer before
				// the look itself.
				if strings.HasPrefix(m.Subject, "$JS.API.") {
					s.asked = append(s.asked, now)
					if !s.replies[m.Reply] {
						s.open[m.Reply] = true
					} else {
						s.answered = now
					}
				} else {
					s.replies[m.Subject] = true
					if s.open[m.Subject] {
						delete(s.open, m.Subject)
						s.answered = now
					}
				}
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// looks is when each look was asked.
func (s *lookSpy) looks() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.asked...)
}

// betweenLooks waits until a look is answered and no other is asked.
func (s *lookSpy) betweenLooks(t *testing.T) {
	t.Helper()
	since := time.Now()
	testwait.Until(t, "a look at the consumer answered, none asked since", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.open) == 0 && s.answered.After(since)
	})
}

// A worker that holds its deliveries up (back-pressure: its router is
// full) is not stuck: its consumer is left alone.
func TestHealLeavesABusyWorkerAlone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	const stuckAfter = 500 * time.Millisecond // under a tick: the look after the one that marks it stuck recreates it
	url := startJetStream(t)
	cfg := config.Cluster{NATS: []string{url}, Role: config.RoleWorker, Name: "w1", Partitions: 1,
		Replicas: 1, AckWait: 30 * time.Second, Lease: healLease, DuplicateWindow: time.Minute, DedupeTTL: time.Hour,
		ConsumerStuck: stuckAfter}
	spy := spyLooks(t, url)
	n, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var once sync.Once
	release := make(chan struct{})
	entered := make(chan struct{})
	n.RunWorker(WorkerHooks{
		Deliver: func(ctx context.Context, d *Delivery) {
			once.Do(func() { close(entered) })
			select { // blocks: back-pressure
			case <-release:
			case <-ctx.Done():
			}
			_ = d.Ack()
		},
		Unfinished: func(int) int { return 0 },
	})
	defer n.StopWorker()
	defer close(release)
	owned(t, n)
	for i := range 300 { // more than the client's 256-message buffer
		publish(t, ctx, n, "m-"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	<-entered
	// Were the held-up deliveries not told from a stall, the consumer
	// would be marked stuck at the first look a second (check's grace)
	// after the last delivery began, or a look later (deliveries still
	// moving), and recreated at the first look ConsumerStuck after
	// that. Heal looks past all of that, and twice more (the look that
	// would have recreated it has ended).
	graceEnd := time.Now().Add(time.Second)
	testwait.UntilOK(t, "heal's looks at the consumer past the grace, ConsumerStuck and two more", func() error {
		l := spy.looks()
		var marked time.Time
		after := 0
		for _, at := range l {
			switch {
			case at.Before(graceEnd):
			case marked.IsZero():
				marked = at
			case at.Sub(marked) >= stuckAfter:
				after++
			}
		}
		if after < 3 {
			return fmt.Errorf("%d looks in all, %d past the grace and ConsumerStuck", len(l), after)
		}
		return nil
	})
	if r := n.ConsumersRecreated(); r != 0 {
		t.Errorf("%d consumers recreated while the worker held its deliveries up", r)
	}
	if ps := n.Partitions(); len(ps) != 1 || ps[0].Stuck != "" {
		t.Errorf("partitions %+v, want one, not stuck", ps)
	}
}

// check's verdicts, one row per case.
func TestHealthCheck(t *testing.T) {
	t.Parallel()
	now := time.Now()
	info := func(pending, ackPending int, delivered uint64, leader string) *jetstream.ConsumerInfo {
		return &jetstream.ConsumerInfo{NumPending: uint64(pending), NumAckPending: ackPending,
			Delivered: jetstream.SequenceInfo{Stream: delivered}, Cluster: &jetstream.ClusterInfo{Leader: leader}}
	}
	for _, tc := range []struct {
		name   string
		busy   int  // deliveries running
		recent bool // a delivery ended just now (else long ago)
		ci     *jetstream.ConsumerInfo
		err    error
		reason string
		now    bool
	}{
		{name: "gone", err: jetstream.ErrConsumerNotFound, reason: "consumer deleted", now: true},
		{name: "info fails", err: errors.New("timeout"), reason: "consumer info not read: timeout"},
		{name: "no leader", ci: info(0, 0, 5, ""), reason: "consumer has no leader"},
		{name: "idle", ci: info(0, 0, 5, "n1")},
		{name: "delivering", ci: info(3, 0, 9, "n1")},
		{name: "stalled", ci: info(3, 0, 5, "n1"), reason: "consumer delivers nothing while 3 messages wait"},
		{name: "full", ci: info(3, maxAckPending, 5, "n1")},
		{name: "held up by the worker", busy: 1, ci: info(3, 0, 5, "n1")},
		{name: "a delivery just ended", recent: true, ci: info(3, 0, 5, "n1")},
	} {
		h := &health{busy: tc.busy, delivered: 5, lastMsg: now.Add(-time.Minute)} // delivered 5 seen last
		if tc.recent {
			h.lastMsg = now
		}
		v := h.check(tc.ci, tc.err, now)
		if v.reason != tc.reason || v.now != tc.now {
			t.Errorf("%s: verdict %+v, want %q now %v", tc.name, v, tc.reason, tc.now)
		}
	}
}
