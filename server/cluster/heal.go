package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/config"
	"termlink/server/metrics"
)

// A partition's consumer can stop delivering while its worker still owns
// the partition: after a NATS node's restart a consumer was seen without
// a leader for 57 s, and one deleted behind the worker's back (by hand,
// or lost with a NATS node's store) never delivers again. The worker
// checks each consumer it reads every ConsumerStuck/4 (heal) and deletes
// and recreates one that
//   - is gone (ErrConsumerNotFound): at once;
//   - has no leader, or whose info cannot be read, for ConsumerStuck;
//   - delivers nothing for ConsumerStuck while messages wait for it and
//     it may deliver more (fewer than MaxAckPending unacked), and the
//     worker is not holding its delivery up (back-pressure).
// The new consumer starts at the lowest ack floor of the partition's
// consumers, or at this worker's last ack floor seen when none is left,
// so nothing answered comes again from the stream's start. Status
// reports each owned partition, stuck or not, with why and since when.

// maxAckPending is the partition consumers' MaxAckPending (start).
const maxAckPending = 1024

// health is what the worker knows of one partition's consumer. Its
// delivering/consuming calls come from the consumer's goroutine and
// start; check from the worker's loop; state from /api/status.
type health struct {
	mu        sync.Mutex
	consumer  string    // its name
	busy      int       // deliveries running now (the hook may block: back-pressure)
	lastMsg   time.Time // the last delivery began or ended
	ackFloor  uint64    // the last ack floor read
	delivered uint64    // the last delivered stream sequence read
	stuck     string    // why it is stuck; "" while it delivers
	since     time.Time // when stuck began
	gap       uint64    // deliveries lost on the way (consumeFn): recreate at once
}

// loseDeliveries records n deliveries the consumer sent and the worker
// never got.
func (h *health) loseDeliveries(n uint64) {
	h.mu.Lock()
	h.gap += n
	h.mu.Unlock()
}

// lost reports deliveries lost since the consumer was made.
func (h *health) lost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gap > 0
}

// delivering marks a delivery running until the returned func is called.
func (h *health) delivering() func() {
	h.mu.Lock()
	h.busy++
	h.lastMsg = time.Now()
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		h.busy--
		h.lastMsg = time.Now()
		h.mu.Unlock()
	}
}

// consuming records a new consumer: not stuck until seen so.
func (h *health) consuming(name string) {
	h.mu.Lock()
	h.consumer, h.stuck, h.since, h.delivered, h.gap = name, "", time.Time{}, 0, 0
	h.lastMsg = time.Now()
	h.mu.Unlock()
}

// floor is the last ack floor read of the partition's consumer.
func (h *health) floor() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ackFloor
}

// set records why the consumer is stuck (since the first time it was)
// and returns for how long; "" clears it.
func (h *health) set(reason string, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if reason == "" {
		h.stuck, h.since = "", time.Time{}
		return 0
	}
	if h.stuck == "" {
		h.since = now
	}
	h.stuck = reason
	return now.Sub(h.since)
}

// verdict is what check found: why the consumer is stuck ("" for not),
// and whether to recreate it at once.
type verdict struct {
	reason string
	now    bool
}

// check judges a consumer by its info (err: reading it failed).
func (h *health) check(ci *jetstream.ConsumerInfo, err error, now time.Time) verdict {
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return verdict{reason: "consumer deleted", now: true}
	case err != nil:
		return verdict{reason: "consumer info not read: " + err.Error()}
	case ci.Cluster != nil && ci.Cluster.Leader == "":
		return verdict{reason: "consumer has no leader"}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ackFloor = ci.AckFloor.Stream
	moved := ci.Delivered.Stream != h.delivered
	h.delivered = ci.Delivered.Stream
	if ci.NumPending == 0 || ci.NumAckPending >= maxAckPending || h.busy > 0 || moved {
		return verdict{}
	}
	// Messages wait, it may deliver, nothing holds it up and it has
	// delivered nothing since the last look: stalled since then, unless a
	// delivery ended meanwhile.
	if h.stuck == "" && now.Sub(h.lastMsg) < time.Second {
		return verdict{}
	}
	return verdict{reason: fmt.Sprintf("consumer delivers nothing while %d messages wait", ci.NumPending)}
}

// heal checks the consumer of every partition this worker keeps, every
// ConsumerStuck/4 (one JetStream request per partition: 64 partitions
// at every lease tick would cost a worker ~40 requests a second), and
// recreates one that is gone, or stuck for ConsumerStuck (and starts one
// that a recreation could not make). The partitions are looked at side
// by side, and the leases are renewed meanwhile, as while partitions
// start (awaitStarts): a recreation is a few JetStream requests, each
// of which can wait out a NATS election, and a heal that held the loop
// let every lease go stale, which stopped every start of every
// partition (jepsen seed 132: 13 s with a NATS node paused).
func (w *worker) heal(ctx context.Context) {
	bound := w.n.cfg.ConsumerStuck
	if bound <= 0 {
		bound = config.DefaultConsumerStuck
	}
	w.mu.Lock()
	parts := make(map[int]*partition, len(w.owned))
	gaps := false
	for p, part := range w.owned {
		if part.releasing.IsZero() {
			parts[p] = part
			gaps = gaps || part.health.lost()
		}
	}
	w.mu.Unlock()
	if time.Since(w.healed) < bound/4 && !gaps {
		return
	}
	w.healed = time.Now()
	var healing sync.WaitGroup
	set := make(map[int]bool, len(parts))
	slots := make(chan struct{}, parallelStarts)
	for p, part := range parts {
		rev := part.rev // renew writes it meanwhile
		set[p] = true
		healing.Add(1)
		go func() {
			defer healing.Done()
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-slots }()
			w.healOne(ctx, p, part, rev, bound)
		}()
	}
	// Nothing is given up while healing: the next tick decides.
	w.awaitStarts(ctx, &healing, set, nil, func(int) bool { return true })
}

// healOne checks partition p's consumer (heal) and recreates it if it
// is gone, lost deliveries, or is stuck past bound; rev is p's lease
// revision when the heal began.
func (w *worker) healOne(ctx context.Context, p int, part *partition, rev uint64, bound time.Duration) {
	if part.health.lost() {
		w.recreate(ctx, p, part, rev, "deliveries lost on the way (the consumer sequence skipped)")
		return
	}
	if part.cc == nil || part.cons == nil { // a recreation that failed
		w.recreate(ctx, p, part, rev, "")
		return
	}
	ictx, cancel := context.WithTimeout(ctx, w.n.cfg.Lease/3)
	ci, err := part.cons.Info(ictx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	v := part.health.check(ci, err, time.Now())
	if v.reason == "" {
		part.health.set("", time.Now())
		return
	}
	if stuckFor := part.health.set(v.reason, time.Now()); v.now || stuckFor >= bound {
		w.recreate(ctx, p, part, rev, v.reason)
	}
}

// recreate deletes partition p's consumer and makes a new one (start),
// if the lease is still this worker's (at revision rev, or renewed
// since by the heal's renewals). A failure leaves the partition owned
// without a consumer, stuck: the next tick tries again.
func (w *worker) recreate(ctx context.Context, p int, part *partition, rev uint64, reason string) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	e, err := w.n.parts.Get(ctx, leaseKey(p))
	if err != nil || string(e.Value()) != w.n.cfg.Name || e.Revision() < rev {
		return // moved, or NATS is away: tick decides
	}
	part.health.mu.Lock()
	name := part.health.consumer
	since := part.health.since
	part.health.mu.Unlock()
	if part.cc != nil {
		part.cc.Stop()
		part.cc, part.cons = nil, nil
	}
	if reason != "" {
		args := []any{"partition", p, "consumer", name, "reason", reason}
		if !since.IsZero() {
			args = append(args, "stuck_for", time.Since(since).Round(time.Millisecond))
		}
		w.n.log.Warn("cluster: partition consumer stuck; recreating it", args...)
		w.recreated.Add(1)
	}
	if name != "" {
		if err := w.n.in.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			part.health.set("consumer not deleted: "+err.Error(), time.Now())
			return
		}
	}
	if err := w.start(ctx, p, part); err != nil {
		w.n.log.Warn("cluster: partition consumer not recreated; retrying", "partition", p, "err", err)
		part.health.set("consumer not recreated: "+err.Error(), time.Now())
	}
}

// PartitionState is one partition this worker owns, as /api/status shows it.
type PartitionState struct {
	Partition int    `json:"partition"`
	Consumer  string `json:"consumer"`
	Releasing bool   `json:"releasing,omitempty"` // being given up to another worker
	Stuck     string `json:"stuck,omitempty"`     // why its consumer is not delivering
	Since     string `json:"since,omitempty"`     // since when (RFC 3339)
}

// Partitions lists the partitions this worker owns, by number.
func (n *Node) Partitions() []PartitionState {
	n.mu.Lock()
	w := n.worker
	n.mu.Unlock()
	if w == nil {
		return nil
	}
	w.mu.Lock()
	out := make([]PartitionState, 0, len(w.owned))
	for p, part := range w.owned {
		ps := PartitionState{Partition: p, Releasing: !part.releasing.IsZero()}
		part.health.mu.Lock()
		ps.Consumer, ps.Stuck = part.health.consumer, part.health.stuck
		if ps.Stuck != "" {
			ps.Since = part.health.since.UTC().Format(time.RFC3339)
		}
		part.health.mu.Unlock()
		out = append(out, ps)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// ConsumersRecreated is the number of partition consumers this worker
// deleted and made again because they were gone or stuck.
func (n *Node) ConsumersRecreated() uint64 {
	return n.workerCount(func(w *worker) uint64 { return w.recreated.Load() })
}

// LeasesRetaken is the number of partition leases this worker took again
// after they expired while NATS could not be written, keeping their
// consumers (retake).
func (n *Node) LeasesRetaken() uint64 {
	return n.workerCount(func(w *worker) uint64 { return w.retaken.Load() })
}

// OrderReads is the number of deliveries whose session order this worker
// read from the stream (their edge did not know the message before them).
func (n *Node) OrderReads() uint64 {
	return n.workerCount(func(w *worker) uint64 { return w.orderReads.Load() })
}

// workerCount is one of the worker's counters; 0 on a node that is not one.
func (n *Node) workerCount(get func(*worker) uint64) uint64 {
	n.mu.Lock()
	w := n.worker
	n.mu.Unlock()
	if w == nil {
		return 0
	}
	return get(w)
}

// healMetrics adds the self-healing series to /metrics.
func (n *Node) healMetrics(r *metrics.Registry) {
	r.NewCounterFunc("termlink_cluster_leases_retaken_total",
		"Partition leases this worker took again after they expired while NATS could not be written, keeping the partition's consumer.",
		func() float64 { return float64(n.LeasesRetaken()) })
	r.NewCounterFunc("termlink_cluster_consumers_recreated_total",
		"Partition consumers this worker deleted and made again because they were gone, had no leader or delivered nothing while messages waited.",
		func() float64 { return float64(n.ConsumersRecreated()) })
	r.NewCounterFunc("termlink_cluster_order_reads_total",
		"Deliveries whose session order the worker read from the inbound stream (the edge did not know the message before them in their session).",
		func() float64 { return float64(n.OrderReads()) })
	r.NewGaugeFunc("termlink_cluster_partitions_stuck", "Owned partitions whose consumer is not delivering now.", func() float64 {
		stuck := 0
		for _, ps := range n.Partitions() {
			if ps.Stuck != "" {
				stuck++
			}
		}
		return float64(stuck)
	})
}
