package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/internal/testwait"
	"termlink/server/bus"
	"termlink/server/cluster/natstest"
	"termlink/server/config"
)

// startJetStream runs a one-node JetStream (the nats-server library) on
// 127.0.0.1 and returns its client URL.
func startJetStream(t *testing.T) string { return natstest.Start(t, true).ClientURL() }

// consumerNames lists the inbound stream's consumers.
func consumerNames(t *testing.T, ctx context.Context, n *Node) []string {
	t.Helper()
	var out []string
	l := n.in.ConsumerNames(ctx)
	for name := range l.Name() {
		out = append(out, name)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A worker that takes a partition over fences the old owner off: a pull
// the old owner sends afterwards, by the consumer name it knows (it was
// reconnecting to NATS when the consumer was deleted and missed the
// notice), must not get the partition's messages. With one durable name
// for every owner it pulled from the new owner's consumer: the
// partition's messages were split between two workers, and one the old
// owner dropped came again only after the ack wait, after the session's
// later messages had run on the new owner (issue 22, row 8).
func TestTakeOverFencesTheOldOwner(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 1, time.Second, time.Second)
	hooks := WorkerHooks{Deliver: func(context.Context, *Delivery) {}, Unfinished: func(int) int { return 0 }}

	oldOwner := &worker{n: n, hooks: hooks, owned: map[int]*partition{}}
	po := &partition{}
	if err := oldOwner.start(ctx, 0, po); err != nil {
		t.Fatal(err)
	}
	po.cc.Stop() // its pulls are made by hand below
	names := consumerNames(t, ctx, n)
	if len(names) != 1 {
		t.Fatalf("consumers %v after the first take, want one", names)
	}
	oldName := names[0]

	newOwner := &worker{n: n, hooks: hooks, owned: map[int]*partition{}}
	pn := &partition{}
	if err := newOwner.start(ctx, 0, pn); err != nil {
		t.Fatal(err)
	}
	pn.cc.Stop() // holds the message for the old owner's pull to find, if it can
	if got := consumerNames(t, ctx, n); len(got) != 1 {
		t.Errorf("consumers %v after the take-over, want only the new owner's", got)
	}

	if _, err := n.PublishInbound(ctx, bus.Inbound{ChannelID: "c", PeerID: "peer", SessionKey: "c:a:peer", MessageID: "m-1", Text: "x"}); err != nil {
		t.Fatal(err)
	}
	c, err := n.in.Consumer(ctx, oldName)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return // fenced off
	}
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		t.Errorf("the old owner's pull on consumer %s got a message of the new owner's: %s", oldName, m.Data())
	}
}

// The fence of a partition taken over (issue 25 item 3: hot-path runs
// write no claim when they start): anything the earlier owner process
// may have been given may have started there (suspect): everything up to
// the stream's end when its consumer was paused, not what the
// consumer's info says it delivered, which can roll back when the
// consumer's leader changes (issue 38, jepsen seeds 320, 330, 373); a
// partition taken again by the process that made the earlier consumer
// suspects nothing (it holds what it runs).
func TestTakeOverFence(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 1, time.Minute, time.Second)
	publish := func(id string) {
		t.Helper()
		if _, err := n.PublishInbound(ctx, bus.Inbound{ChannelID: "c", PeerID: "peer", SessionKey: "c:a:peer", MessageID: id, Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	given := make(chan uint64, 16)
	hooks := func(me string) WorkerHooks {
		return WorkerHooks{Me: me, Deliver: func(_ context.Context, d *Delivery) { given <- d.Seq }, Unfinished: func(int) int { return 0 }}
	}
	oldOwner := &worker{n: n, hooks: hooks("w1#a"), owned: map[int]*partition{}}
	po := &partition{}
	if err := oldOwner.start(ctx, 0, po); err != nil {
		t.Fatal(err)
	}
	if po.fence.Load() != 0 || po.suspect.Load() != 0 {
		t.Errorf("first owner of an empty stream: fence %d suspect %d, want 0 0", po.fence.Load(), po.suspect.Load())
	}
	for _, id := range []string{"m-1", "m-2", "m-3"} {
		publish(id)
	}
	for want := uint64(1); want <= 3; want++ {
		select {
		case seq := <-given:
			if seq != want {
				t.Fatalf("delivered seq %d, want %d", seq, want)
			}
		case <-ctx.Done():
			t.Fatal("the first owner was not given m-1..m-3")
		}
	}
	// It dies: given nothing more. (Stopping its consume leaves its pull
	// requests on the server for a while, which could still be given
	// m-4: the consumer is paused, as a dead worker's gets nothing.)
	po.cc.Stop()
	if _, err := n.in.PauseConsumer(ctx, po.cons.CachedInfo().Name, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	publish("m-4")
	publish("m-5")

	newOwner := &worker{n: n, hooks: hooks("w2#b"), owned: map[int]*partition{}}
	pn := &partition{}
	if err := newOwner.start(ctx, 0, pn); err != nil {
		t.Fatal(err)
	}
	pn.cc.Stop()
	if pn.fence.Load() != 5 || pn.suspect.Load() != 5 {
		t.Errorf("taken over from another process: fence %d suspect %d, want 5 and 5 (the stream's last: a consumer's delivered state is no bound)", pn.fence.Load(), pn.suspect.Load())
	}

	// The new owner's start fails after it deleted the old consumer, and
	// its own consumer goes too (a failed read of the stream deletes it):
	// its next attempt finds no earlier consumer, and still suspects what
	// the old owner was given (stress run 19: a message the dead worker
	// ran ran again with no interruption recorded).
	if err := n.in.DeleteConsumer(ctx, pn.cons.CachedInfo().Name); err != nil {
		t.Fatal(err)
	}
	pr := &partition{}
	if err := newOwner.start(ctx, 0, pr); err != nil {
		t.Fatal(err)
	}
	pr.cc.Stop()
	if pr.fence.Load() != 5 || pr.suspect.Load() != 5 {
		t.Errorf("started again after a start that failed past the deletion: fence %d suspect %d, want 5 and 5", pr.fence.Load(), pr.suspect.Load())
	}

	again := &worker{n: n, hooks: hooks("w2#b"), owned: map[int]*partition{}}
	pa := &partition{}
	if err := again.start(ctx, 0, pa); err != nil {
		t.Fatal(err)
	}
	pa.cc.Stop()
	if pa.fence.Load() != 5 || pa.suspect.Load() != 0 {
		t.Errorf("taken again by the process that made the consumer: fence %d suspect %d, want 5 and 0", pa.fence.Load(), pa.suspect.Load())
	}
}

// A worker that could not renew a partition's lease for two thirds of a
// lease (NATS unreachable) starts nothing of it until it is renewed:
// another worker takes it only after the whole lease.
func TestFenceStaleLease(t *testing.T) {
	t.Parallel()
	cfg := config.Cluster{Lease: 3 * time.Second}
	n := &Node{cfg: cfg}
	w := &worker{n: n, owned: map[int]*partition{}}
	n.worker = w
	part := &partition{}
	w.owned[0] = part
	part.setRenewed(time.Now())
	if _, _, st := n.Fence(0); st != Taking {
		t.Errorf("lease taken, take not done: %v, want Taking", st)
	}
	part.fence.Store(7)
	part.suspect.Store(3)
	part.taken.Store(true)
	if f, s, st := n.Fence(0); st != Owned || f != 7 || s != 3 {
		t.Errorf("renewed now: %d %d %v, want 7 3 Owned", f, s, st)
	}
	part.setRenewed(time.Now().Add(-2*time.Second - 100*time.Millisecond))
	if _, _, st := n.Fence(0); st != LeaseStale {
		t.Errorf("not renewed for 2.1 s of a 3 s lease: %v, want LeaseStale", st)
	}
	if _, _, st := n.Fence(1); st != NotOwned {
		t.Errorf("a partition not held: %v, want NotOwned", st)
	}
}

// A node that names no partition count takes the cluster's (so changing
// the default does not stop a cluster made with another one), and a new
// cluster gets the default.
func TestPartitionsDefaultAndAdopted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	url := startJetStream(t)
	open := func(name string, partitions int) *Node {
		t.Helper()
		n, err := Open(ctx, config.Cluster{NATS: []string{url}, Role: config.RoleWorker, Name: name, Partitions: partitions,
			Replicas: 1, AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	if got := open("first", 0).Config().Partitions; got != config.DefaultPartitions {
		t.Errorf("a new cluster without a count: %d partitions, want the default %d", got, config.DefaultPartitions)
	}
	// The stream made with the default; a cluster made with another
	// count is another JetStream.
	url = startJetStream(t)
	open("made-with-4", 4)
	if got := open("joins", 0).Config().Partitions; got != 4 {
		t.Errorf("a node without a count joining a cluster of 4: %d partitions, want 4", got)
	}
	if _, err := Open(ctx, config.Cluster{NATS: []string{url}, Role: config.RoleWorker, Name: "differs", Partitions: 8,
		Replicas: 1, AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}, nil); err == nil {
		t.Error("a node configured with 8 joined a cluster of 4, want it refused")
	}
}

// A delivery the consumer sent and the worker never got (the consumer
// sequence skips: its NATS connection broke or moved) stops the
// partition's hand-over at once: what comes after it is not handed to
// the router (it would run before the lost one, which comes again only
// after the ack wait), and the loop is told to recreate the consumer.
func TestLostDeliveryStopsTheHandOver(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 1, time.Minute, time.Second)
	for _, id := range []string{"m-1", "m-2", "m-3", "m-4"} {
		if _, err := n.PublishInbound(ctx, bus.Inbound{ChannelID: "c", PeerID: "peer", SessionKey: "c:a:peer", MessageID: id, Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	var handed []string
	w := &worker{n: n, owned: map[int]*partition{}, kick: make(chan struct{}, 1),
		hooks: WorkerHooks{Deliver: func(_ context.Context, d *Delivery) { handed = append(handed, d.In.MessageID) }}}
	cons, err := n.in.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "p0_test", FilterSubject: inPrefix + "0.>",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(4, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 4 {
		t.Fatalf("fetched %d messages, want 4", len(msgs))
	}
	part := &partition{}
	fn := w.consumeFn(0, part, 0)
	fn(msgs[0]) // m-1
	fn(msgs[2]) // m-3: m-2 never came (consumer sequence 2 skipped)
	fn(msgs[3]) // m-4: after the gap
	if strings.Join(handed, ",") != "m-1" {
		t.Errorf("handed over %v, want only m-1 (nothing after the lost m-2)", handed)
	}
	if !part.health.lost() {
		t.Error("the gap is not recorded")
	}
	select {
	case <-w.kick:
	default:
		t.Error("the loop is not told to recreate the consumer")
	}
	part.health.consuming("p0_next") // a new consumer: nothing lost
	if part.health.lost() {
		t.Error("a new consumer still counts the old one's gap")
	}
}

// A consumer can skip a message of a session with no gap in its own
// sequence (jepsen seed 80: while a NATS node was paused, a session's
// messages 17 and 18 came after 19-22). A new message whose session has
// an earlier one in the stream not handed over stops the hand-over, as a
// gap does. A message that names the one before it (its edge's Prev),
// handed over last, goes on with no read of the stream; one that names
// none, or another, is checked against the stream.
func TestSkippedSessionMessageStopsTheHandOver(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 1, time.Minute, time.Second)
	in := func(id string) bus.Inbound {
		return bus.Inbound{ChannelID: "c", PeerID: "peer", SessionKey: "c:a:peer", MessageID: id, Text: "x"}
	}
	// m-1..m-4 name no message before them (stored before edges did);
	// m-5..m-7 each name the one before it.
	var seqs []uint64
	for i := 1; i <= 7; i++ {
		msg := in(fmt.Sprintf("m-%d", i))
		if i <= 4 {
			b, _ := json.Marshal(inMsg{Inbound: msg})
			ack, err := n.js.Publish(ctx, sessionSubject(0, msg.SessionKey), b)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, ack.Sequence)
			continue
		}
		ack, _, err := n.publishInbound(ctx, msg, seqs[len(seqs)-1])
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	var handed []string
	w := &worker{n: n, owned: map[int]*partition{}, kick: make(chan struct{}, 1),
		hooks: WorkerHooks{Deliver: func(_ context.Context, d *Delivery) { handed = append(handed, d.In.MessageID) }}}
	// fetch gives a new consumer's deliveries from stream sequence start.
	fetch := func(start uint64, count int) []jetstream.Msg {
		t.Helper()
		cons, err := n.in.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: inPrefix + "0.>",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start})
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(count, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if len(msgs) != count {
			t.Fatalf("fetched %d messages, want %d", len(msgs), count)
		}
		return msgs
	}
	kicked := func() bool {
		select {
		case <-w.kick:
			return true
		default:
			return false
		}
	}

	// Acked up to m-1; the consumer's first delivery is m-3 (consumer
	// sequence 1: no gap in it), and m-2 never came.
	part := &partition{}
	fn := w.consumeFn(0, part, seqs[0])
	for _, m := range fetch(seqs[2], 2) { // m-3, m-4
		fn(m)
	}
	if len(handed) != 0 || !part.health.lost() || !kicked() {
		t.Errorf("past the skipped m-2: handed over %v, lost %v; want nothing handed, the skip recorded and the loop told", handed, part.health.lost())
	}

	// In order: everything is handed over, and a copy of a message handed
	// over already passes (its ticket answers it). m-5..m-7 are proven by
	// their Prev: no read of the stream.
	part = &partition{}
	fn = w.consumeFn(0, part, seqs[0])
	reads0 := w.orderReads.Load()
	for _, m := range fetch(seqs[1], 3) { // m-2..m-4: read
		fn(m)
	}
	reads := w.orderReads.Load() - reads0
	for _, m := range fetch(seqs[4], 3) { // m-5..m-7: proven
		fn(m)
	}
	fn(fetch(seqs[1], 1)[0]) // m-2 again
	if got, want := strings.Join(handed, ","), "m-2,m-3,m-4,m-5,m-6,m-7,m-2"; got != want {
		t.Errorf("handed over %s, want %s", got, want)
	}
	if part.health.lost() || kicked() {
		t.Error("an in-order consumer is taken for one that lost deliveries")
	}
	if more := w.orderReads.Load() - reads0 - reads; reads != 3 || more != 0 {
		t.Errorf("stream reads: %d for m-2..m-4 (no Prev), %d more for m-5..m-7; want 3 and 0", reads, more)
	}

	// m-6 names m-5, which was never handed over: read, and refused.
	handed = nil
	part = &partition{}
	fn = w.consumeFn(0, part, seqs[3])
	fn(fetch(seqs[5], 1)[0])
	if len(handed) != 0 || !part.health.lost() || !kicked() {
		t.Errorf("m-6 with m-5 skipped: handed over %v, lost %v; want nothing handed and the skip recorded", handed, part.health.lost())
	}
}

// A worker whose partition starts are slow (a loaded cluster creating
// their consumers) keeps renewing the leases it holds meanwhile. The
// tick used to wait for its starts without renewing: a start slower
// than a lease lost every partition at once, and the next owner took
// their runs for interrupted (TestMoveEdgeMidConversation under make
// test).
func TestSlowStartsKeepTheLeases(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 4, time.Second, time.Second)
	cfg := n.cfg
	lost := make(chan int, 16)
	hooks := WorkerHooks{Me: "w1", Deliver: func(context.Context, *Delivery) {}, Unfinished: func(int) int { return 0 },
		Lost: func(p int) { lost <- p }}
	// Partition 0 starts at once; the others start only once partition
	// 0's lease has been renewed 4 times (more than a lease), or after
	// 4 leases if it is not.
	renewals := make(chan struct{})
	go func() {
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		kw, err := n.parts.Watch(wctx, leaseKey(0), jetstream.UpdatesOnly())
		if err != nil {
			t.Error(err)
			close(renewals)
			return
		}
		for seen := 0; seen < 4; {
			select {
			case e := <-kw.Updates():
				if e != nil && e.Operation() == jetstream.KeyValuePut {
					seen++
				}
			case <-wctx.Done():
				return
			}
		}
		close(renewals)
	}()
	var slowed atomic.Int32
	w := &worker{n: n, hooks: hooks, owned: map[int]*partition{}, kick: make(chan struct{}, 1),
		startHook: func(p int) {
			if p == 0 {
				return
			}
			slowed.Add(1)
			select {
			case <-renewals:
			case <-time.After(4 * cfg.Lease):
			}
		}}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.loop(wctx) }()
	defer func() { stop(); <-done }()

	testwait.Until(t, "the worker to own its 4 partitions, each consuming", func() bool {
		w.mu.Lock()
		owned := len(w.owned)
		w.mu.Unlock()
		return owned == 4 && len(consumerNames(t, ctx, n)) == 4
	})
	if slowed.Load() == 0 {
		t.Fatal("no start was slowed: the test proves nothing")
	}
	select {
	case p := <-lost:
		t.Errorf("partition %d lost while the others started", p)
	default:
	}
}

// openWorkerNode opens worker node w1 of partitions on a JetStream of its
// own (one replica), closed when the test ends.
func openWorkerNode(t *testing.T, ctx context.Context, partitions int, ackWait, lease time.Duration) *Node {
	t.Helper()
	cfg := config.Cluster{NATS: []string{startJetStream(t)}, Role: config.RoleWorker, Name: "w1", Partitions: partitions,
		Replicas: 1, AckWait: ackWait, Lease: lease, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
	n, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// newTestWorker is a worker of n whose loop the test runs (or whose tick
// it calls), with hooks that report lost partitions on lost.
func newTestWorker(n *Node, lost chan int) *worker {
	hooks := WorkerHooks{Me: n.cfg.Name, Deliver: func(context.Context, *Delivery) {}, Unfinished: func(int) int { return 0 },
		Lost: func(p int) { lost <- p }}
	w := &worker{n: n, hooks: hooks, owned: map[int]*partition{}, kick: make(chan struct{}, 1)}
	n.mu.Lock()
	n.worker = w
	n.mu.Unlock()
	return w
}

// A lease whose key expired while NATS could not be written (a leader
// election of the parts bucket outlasting a lease) is taken again by its
// owner, consumer and all, when nobody took the partition meanwhile; one
// whose consumer a new owner deleted is given up. Every worker used to
// drop and retake all its partitions after a NATS node died (issue 38):
// every session stalled for the retake on top of the election.
func TestExpiredLeaseTakenAgain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 2, time.Second, time.Second)
	lost := make(chan int, 16)
	w := newTestWorker(n, lost)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.loop(wctx) }()
	defer func() { stop(); <-done }()
	testwait.Until(t, "the worker to own its 2 partitions, each consuming", func() bool {
		return n.Owned() == 2 && len(consumerNames(t, ctx, n)) == 2
	})
	before := consumerNames(t, ctx, n)

	// Both keys go as a TTL takes them (a purge: no key, no history).
	for p := range 2 {
		if err := n.parts.Purge(ctx, leaseKey(p)); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, "both leases taken again", func() bool { return n.LeasesRetaken() == 2 })
	if got := consumerNames(t, ctx, n); !sameSet(got, before) || n.Owned() != 2 {
		t.Fatalf("consumers %v (before %v), %d owned: want the same consumers, both kept", got, before, n.Owned())
	}

	// Partition 1's key goes and a new owner deleted its consumer: given
	// up (and started again: the key is free, the partition this worker's).
	h := &w.ownedNow()[1].health
	h.mu.Lock()
	name := h.consumer
	h.mu.Unlock()
	if err := n.in.DeleteConsumer(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := n.parts.Purge(ctx, leaseKey(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-lost:
		if p != 1 {
			t.Fatalf("lost partition %d, want 1", p)
		}
	case <-ctx.Done():
		t.Fatal("partition 1 kept without its consumer")
	}
	if n.LeasesRetaken() != 2 {
		t.Fatalf("%d leases retaken, want still 2", n.LeasesRetaken())
	}
	select {
	case p := <-lost:
		t.Fatalf("partition %d lost too", p)
	default:
	}

	// Partition 0's key goes while its consumer is paused (a new owner
	// began taking it over and gave up): given up too.
	h0 := &w.ownedNow()[0].health
	h0.mu.Lock()
	name0 := h0.consumer
	h0.mu.Unlock()
	if _, err := n.in.PauseConsumer(ctx, name0, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := n.parts.Purge(ctx, leaseKey(0)); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-lost:
		if p != 0 {
			t.Fatalf("lost partition %d, want 0", p)
		}
	case <-ctx.Done():
		t.Fatal("partition 0 kept with its consumer paused")
	}
}

// After NATS trouble a worker takes no partition it does not hold for a
// lease: the other workers' heartbeats and leases may have expired while
// nobody could write them, and it would take theirs.
func TestNoTakeOverForALeaseAfterNATSTrouble(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 2, time.Second, 10*time.Second)
	cfg := n.cfg
	w := newTestWorker(n, make(chan int, 16))
	defer func() {
		for p := range w.ownedNow() {
			w.drop(p)
		}
	}()
	w.troubleAt = time.Now()
	w.tick(ctx, &leaseWake{lease: cfg.Lease, now: time.Now()})
	if got := n.Owned(); got != 0 {
		t.Fatalf("took %d partitions just after NATS trouble, want 0", got)
	}
	w.troubleAt = time.Now().Add(-cfg.Lease)
	w.tick(ctx, &leaseWake{lease: cfg.Lease, now: time.Now()})
	if got := n.Owned(); got != 2 {
		t.Fatalf("took %d partitions a lease after NATS trouble, want 2", got)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s]--; seen[s] < 0 {
			return false
		}
	}
	return true
}

// Of a session's messages given to an earlier owner and not answered
// when the new owner took them, only the first may have started there
// (jepsen seed 5: a burst's third message, never run, counted as a run
// cut short, so one real interruption after it answered "interrupted
// twice"). Only a message run again here (its start claim written)
// marks the ones after it as never started (jepsen seed 15: noted on a
// stale read instead, it made a message that had started look new).
func TestFirstUndone(t *testing.T) {
	t.Parallel()
	var f firstUndone
	if !f.first("a", 6) {
		t.Error("nothing noted: every message may have started")
	}
	f.note("a", 5)
	for _, step := range []struct {
		session string
		seq     uint64
		want    bool
	}{
		{"a", 5, true},  // the one noted, delivered again
		{"a", 4, true},  // before it
		{"a", 6, false}, // after it: the owner never came to it
		{"b", 7, true},  // another session
	} {
		if got := f.first(step.session, step.seq); got != step.want {
			t.Errorf("first(%s, %d) = %v, want %v", step.session, step.seq, got, step.want)
		}
	}
	f.note("a", 3) // lower: the first now
	f.note("a", 9) // higher: changes nothing
	if !f.first("a", 3) || f.first("a", 4) {
		t.Error("a lower note must become the session's first")
	}
	n := &Node{cfg: config.Cluster{Lease: 3 * time.Second}}
	n.worker = &worker{n: n, owned: map[int]*partition{}}
	n.NoteUndone(2, "a", 6) // not held: nothing to note on
	if !n.FirstUndone(2, "a", 7) {
		t.Error("a partition not held: every message must stay suspect")
	}
	part := &partition{}
	part.setRenewed(time.Now())
	n.worker.owned[2] = part
	if !n.FirstUndone(2, "a", 7) {
		t.Error("nothing noted on the partition held: suspect")
	}
	n.NoteUndone(2, "a", 6)
	if !n.FirstUndone(2, "a", 6) || n.FirstUndone(2, "a", 7) {
		t.Error("a partition held: only up to the message run again is suspect")
	}
}

// A partition's consumer reads its sessions' subjects, and the
// partition's own subject only while the stream holds messages stored
// there by an earlier version (two filters cost the NATS server more).
func TestPartitionSubjectsKeepLegacyMessages(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 2, time.Minute, time.Second)
	if got := strings.Join(n.partitionSubjects(ctx, 1), " "); got != inPrefix+"1.>" {
		t.Errorf("no legacy messages: subjects %q, want the sessions' only", got)
	}
	b, _ := json.Marshal(inMsg{Inbound: bus.Inbound{ChannelID: "c", PeerID: "p", SessionKey: "c:a:p", MessageID: "old"}})
	if _, err := n.js.Publish(ctx, inPrefix+"1", b); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(n.partitionSubjects(ctx, 1), " "); got != inPrefix+"1.> "+inPrefix+"1" {
		t.Errorf("a legacy message stored: subjects %q, want the sessions' and the partition's own", got)
	}
	if got := strings.Join(n.partitionSubjects(ctx, 0), " "); got != inPrefix+"0.>" {
		t.Errorf("another partition's legacy message: subjects %q", got)
	}
}

// A start held from an earlier take of its partition (its ticket was
// starting when the partition was lost, and is kept) waits while the
// partition is taken again: before the take reads the stream, the fence
// is 0 and the held delivery would pass it as new and run with no claim
// read. Jepsen seed 128: worker-1, cut off from NATS, lost its
// partitions and took them back 1.5 s later; message 27, answered by
// worker-2 meanwhile, ran again on worker-1 before the take had set its
// fence. Waiting, the start reads the fence, then the claim, and
// answers from it.
func TestStartWaitsForTheTake(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 1, time.Minute, time.Minute)
	in := bus.Inbound{ChannelID: "c", PeerID: "peer", SessionKey: "c:a:peer", MessageID: "m-27", Text: "x", RunID: "r27"}
	ack, err := n.PublishInbound(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	// Answered by another worker while this one was cut off.
	answered := Done(Claim{Session: in.SessionKey, MessageID: in.MessageID, RunID: in.RunID}, "w2#b", Reply{Text: "done on w2", RunID: in.RunID})
	if _, err := n.UpdateClaim(ctx, answered, 0); err != nil {
		t.Fatal(err)
	}

	w := &worker{n: n, owned: map[int]*partition{}}
	n.mu.Lock()
	n.worker = w
	n.mu.Unlock()
	// Taken again: the lease is this worker's, the take's start has not
	// read the stream yet.
	part := &partition{}
	part.setRenewed(time.Now())
	w.owned[0] = part

	tickets := NewTickets()
	tk, in := tickets.Add(&Delivery{Partition: 0, Seq: ack.Sequence}, in)
	tickets.SetState(KeyOf(in), tk, TicketStarting)
	c := NewClaimer(n, tickets, "w1#a", slog.New(slog.DiscardHandler), nil)
	waits := make(chan LeaseState, 1)
	c.waiting = func(_ int, st LeaseState) {
		select {
		case waits <- st:
		default:
		}
	}
	type result struct {
		step StartStep
		ok   bool
	}
	done := make(chan result, 1)
	go func() {
		step, ok := c.Start(ctx, tk, in)
		done <- result{step, ok}
	}()
	select {
	case r := <-done:
		t.Fatalf("started before the take set the fence: %v (ok %v), want a wait", r.step.Action, r.ok)
	case st := <-waits:
		if st != Taking {
			t.Fatalf("the start waited in state %v, want Taking", st)
		}
	case <-ctx.Done():
		t.Fatal("the start neither returned nor waited")
	}
	// The take reads the stream: everything stored is at or below the fence.
	part.fence.Store(ack.Sequence)
	part.suspect.Store(ack.Sequence)
	part.taken.Store(true)
	select {
	case r := <-done:
		if !r.ok || r.step.Action != StartCached {
			t.Fatalf("after the take: %v (ok %v), want the answer from the claim (%v)", r.step.Action, r.ok, StartCached)
		}
	case <-ctx.Done():
		t.Fatal("the start did not go on once the partition was taken")
	}
	if _, _, st := n.Fence(0); st != Owned {
		t.Errorf("a partition taken and renewed: %v, want Owned", st)
	}
}

// A heal whose recreation of a consumer is slow (its JetStream requests
// wait out a NATS election) keeps renewing every lease meanwhile. It
// used to hold the worker's loop: every lease went stale, which stopped
// every start of every partition (jepsen seed 132: 13 s with a NATS
// node paused), and expired.
func TestSlowHealKeepsTheLeases(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 4, time.Second, time.Second)
	cfg := n.cfg
	lost := make(chan int, 16)
	hooks := WorkerHooks{Me: "w1", Deliver: func(context.Context, *Delivery) {}, Unfinished: func(int) int { return 0 },
		Lost: func(p int) { lost <- p }}
	var healing atomic.Bool
	renewals := make(chan struct{})
	var slowed atomic.Int32
	w := &worker{n: n, hooks: hooks, owned: map[int]*partition{}, kick: make(chan struct{}, 1),
		startHook: func(p int) {
			if p != 0 || !healing.Load() {
				return
			}
			// Partition 0's recreation waits until partition 1's lease
			// has been renewed 4 times (more than a lease), or 4 leases.
			slowed.Add(1)
			select {
			case <-renewals:
			case <-time.After(4 * cfg.Lease):
			}
		}}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.loop(wctx) }()
	defer func() { stop(); <-done }()
	// Each start done: a consumer on the server is not enough, since the
	// start records it (health.consuming, which clears lost deliveries)
	// a few requests later. A loss recorded in between was cleared by it,
	// and nothing was recreated (2 failures in CI, 4 in 40 runs).
	testwait.Until(t, "the worker to own its 4 partitions, each consuming", func() bool {
		w.mu.Lock()
		parts := maps.Clone(w.owned)
		w.mu.Unlock()
		if len(parts) != 4 {
			return false
		}
		for _, part := range parts {
			part.health.mu.Lock()
			name := part.health.consumer
			part.health.mu.Unlock()
			if name == "" {
				return false
			}
		}
		return len(consumerNames(t, ctx, n)) == 4
	})

	go func() {
		kctx, kcancel := context.WithCancel(ctx)
		defer kcancel()
		kw, err := n.parts.Watch(kctx, leaseKey(1), jetstream.UpdatesOnly())
		if err != nil {
			t.Error(err)
			close(renewals)
			return
		}
		for seen := 0; seen < 4; {
			select {
			case e := <-kw.Updates():
				if e != nil && e.Operation() == jetstream.KeyValuePut {
					seen++
				}
			case <-kctx.Done():
				return
			}
		}
		close(renewals)
	}()
	// Partition 0 lost deliveries: the loop recreates its consumer at once.
	healing.Store(true)
	w.mu.Lock()
	part0 := w.owned[0]
	w.mu.Unlock()
	part0.health.loseDeliveries(1)
	w.kick <- struct{}{}
	testwait.UntilOK(t, "partition 0's consumer to be recreated", func() error {
		if w.recreated.Load() >= 1 && !part0.health.lost() {
			return nil
		}
		w.mu.Lock()
		now0 := w.owned[0]
		w.mu.Unlock()
		return fmt.Errorf("not yet: recreated %d, retaken %d, partition 0 still the one that lost deliveries %v, lost %v, slowed %d",
			w.recreated.Load(), w.retaken.Load(), now0 == part0, part0.health.lost(), slowed.Load())
	})
	if slowed.Load() == 0 {
		t.Fatal("no recreation was slowed: the test proves nothing")
	}
	select {
	case p := <-lost:
		t.Errorf("partition %d lost while partition 0's consumer was recreated", p)
	default:
	}
	if r := w.retaken.Load(); r != 0 {
		t.Errorf("%d leases expired and were taken again while partition 0's consumer was recreated, want none", r)
	}
}

// A take whose read of the inbound stream answers a last sequence below
// what the earlier consumers had acked or been given (a stream leader
// not caught up, or a partitioned one not yet stepped down) reads it
// again: its fence would be too low, and a message the dead owner may
// have started would pass it as new and run with no claim read (jepsen
// seed 189: fence 110, the old consumer's ack floor 118).
func TestTakeReadsTheStreamAgainWhenItIsBehind(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n := openWorkerNode(t, ctx, 1, time.Minute, time.Second)
	given := make(chan uint64, 16)
	hooks := func(me string) WorkerHooks {
		return WorkerHooks{Me: me, Deliver: func(_ context.Context, d *Delivery) { given <- d.Seq }, Unfinished: func(int) int { return 0 }}
	}
	oldOwner := &worker{n: n, hooks: hooks("w1#a"), owned: map[int]*partition{}}
	po := &partition{}
	if err := oldOwner.start(ctx, 0, po); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"m-1", "m-2", "m-3"} {
		if _, err := n.PublishInbound(ctx, bus.Inbound{ChannelID: "c", PeerID: "peer", SessionKey: "c:a:peer", MessageID: id, Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		select {
		case <-given:
		case <-ctx.Done():
			t.Fatal("the first owner was not given m-1..m-3")
		}
	}
	po.cc.Stop()

	stale := 2
	var reads atomic.Int32
	newOwner := &worker{n: n, hooks: hooks("w2#b"), owned: map[int]*partition{},
		infoHook: func(si *jetstream.StreamInfo) *jetstream.StreamInfo {
			reads.Add(1)
			if stale == 0 {
				return si
			}
			stale--
			old := *si
			old.State.LastSeq = 1 // what a leader behind answers
			return &old
		}}
	pn := &partition{}
	if err := newOwner.start(ctx, 0, pn); err != nil {
		t.Fatal(err)
	}
	pn.cc.Stop()
	if pn.fence.Load() != 3 || pn.suspect.Load() != 3 {
		t.Errorf("taken with two stale reads of the stream: fence %d suspect %d, want 3 and 3 (the old consumer was given m-3)", pn.fence.Load(), pn.suspect.Load())
	}
	if r := reads.Load(); r != 3 {
		t.Errorf("the stream was read %d times, want 3 (two stale answers, then a current one)", r)
	}
}
