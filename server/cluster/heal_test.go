package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/bus"
	"termlink/server/config"
)

// healWorker runs a worker owning the one partition of a fresh
// JetStream; every delivery is acked and its message id sent on got.
func healWorker(t *testing.T, ctx context.Context) (*Node, <-chan string) {
	t.Helper()
	cfg := config.Cluster{NATS: []string{startJetStream(t)}, Role: config.RoleWorker, Name: "w1", Partitions: 1,
		Replicas: 1, AckWait: 5 * time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour,
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

// expect waits for the delivery of id; any other delivery fails the test.
func expect(t *testing.T, got <-chan string, id string, within time.Duration) {
	t.Helper()
	select {
	case g := <-got:
		if g != id {
			t.Fatalf("delivered %s, want %s", g, id)
		}
	case <-time.After(within):
		t.Fatalf("%s not delivered within %s", id, within)
	}
}

// owned waits until the worker owns the partition with a consumer, and
// returns its state.
func owned(t *testing.T, n *Node) PartitionState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ps := n.Partitions(); len(ps) == 1 && ps[0].Consumer != "" {
			return ps[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition not owned in 10 s: %+v", n.Partitions())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A consumer deleted behind the worker's back (as a consumer lost with a
// NATS node, or left without a leader, is unusable) is made again, at
// the ack floor of the old one: the partition's next message is
// answered, and the one answered before is not delivered again.
func TestHealRecreatesADeletedConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, got := healWorker(t, ctx)
	before := owned(t, n)
	publish(t, ctx, n, "m-1")
	expect(t, got, "m-1", 10*time.Second)
	time.Sleep(time.Second) // the worker reads m-1's ack floor

	if err := n.in.DeleteConsumer(ctx, before.Consumer); err != nil {
		t.Fatal(err)
	}
	publish(t, ctx, n, "m-2")
	expect(t, got, "m-2", 10*time.Second)
	after := owned(t, n)
	if after.Consumer == before.Consumer || after.Stuck != "" {
		t.Errorf("after the deletion: %+v, want a new consumer (was %s), not stuck", after, before.Consumer)
	}
	if r := n.ConsumersRecreated(); r != 1 {
		t.Errorf("%d consumers recreated, want 1", r)
	}
	select {
	case g := <-got:
		t.Errorf("%s delivered again after the consumer was recreated", g)
	case <-time.After(time.Second):
	}
}

// A consumer that delivers nothing while messages wait (paused here: a
// consumer without a leader looks the same from the worker) is reported
// stuck, with why and since when, and is recreated after ConsumerStuck.
func TestHealRecreatesAStalledConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, got := healWorker(t, ctx)
	before := owned(t, n)
	if _, err := n.js.PauseConsumer(ctx, InStream, before.Consumer, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	publish(t, ctx, n, "m-1")
	var stuck PartitionState
	for deadline := time.Now().Add(5 * time.Second); stuck.Stuck == ""; {
		if ps := n.Partitions(); len(ps) == 1 {
			stuck = ps[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the paused consumer is not reported stuck: %+v", n.Partitions())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(stuck.Stuck, "delivers nothing while 1 messages wait") || stuck.Since == "" {
		t.Errorf("stuck partition %+v, want why and since when", stuck)
	}
	expect(t, got, "m-1", 10*time.Second)
	if after := owned(t, n); after.Consumer == before.Consumer {
		t.Errorf("consumer %s not recreated", after.Consumer)
	}
	if r := n.ConsumersRecreated(); r != 1 {
		t.Errorf("%d consumers recreated, want 1", r)
	}
}

// A worker that holds its deliveries up (back-pressure: its router is
// full) is not stuck: its consumer is left alone.
func TestHealLeavesABusyWorkerAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := config.Cluster{NATS: []string{startJetStream(t)}, Role: config.RoleWorker, Name: "w1", Partitions: 1,
		Replicas: 1, AckWait: 30 * time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour,
		ConsumerStuck: time.Second}
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
	time.Sleep(4 * time.Second) // four times ConsumerStuck
	if r := n.ConsumersRecreated(); r != 0 {
		t.Errorf("%d consumers recreated while the worker held its deliveries up", r)
	}
	if ps := n.Partitions(); len(ps) != 1 || ps[0].Stuck != "" {
		t.Errorf("partitions %+v, want one, not stuck", ps)
	}
}

// check's verdicts, one row per case.
func TestHealthCheck(t *testing.T) {
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
