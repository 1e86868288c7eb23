package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/bus"
)

// Delivery is one inbound message handed to this worker by the consumer
// of a partition it owns. It stays unacked (in progress) until the worker
// has answered it.
type Delivery struct {
	In        bus.Inbound
	Partition int
	Seq       uint64 // its sequence in the inbound stream
	msg       jetstream.Msg
}

// Ack tells JetStream the message is answered.
func (d *Delivery) Ack() error { return d.msg.Ack() }

// Nak asks JetStream to deliver the message again.
func (d *Delivery) Nak() error { return d.msg.Nak() }

// InProgress resets the message's ack wait: its run goes on.
func (d *Delivery) InProgress() error { return d.msg.InProgress() }

// WorkerHooks connect the partitions this worker owns to its router.
type WorkerHooks struct {
	// Me names this worker process (its node name and run prefix):
	// each consumer it makes says so, so the next owner of a partition
	// tells what this process was given from its own.
	Me string
	// Deliver takes a message of an owned partition; it is called for one
	// partition's messages one at a time, in stream order, and may block
	// (back-pressure) until ctx ends.
	Deliver func(ctx context.Context, d *Delivery)
	// Unfinished reports how many messages of partition p the worker
	// holds (queued or running): a partition given up waits for 0.
	Unfinished func(p int) int
	// Lost says partition p is no longer this worker's: what it holds of
	// it is not to be answered by it (the new owner runs it).
	Lost func(p int)
}

// partition is a partition this worker owns.
type partition struct {
	rev       uint64 // the lease's revision
	cc        jetstream.ConsumeContext
	cons      jetstream.Consumer // the consumer cc reads (heal.go checks it)
	releasing time.Time          // when giving it up began; zero while kept
	// fence: the inbound stream's last sequence once the earlier
	// consumers were gone; a delivery up to it reads its claim first.
	// suspect: the last sequence an earlier owner process was given; a
	// delivery up to it without a claim may have started there.
	fence, suspect atomic.Uint64
	// taken: fence and suspect are set (start has read them); until
	// then the partition is Taking and no run of it starts.
	taken atomic.Bool
	// undone: per session, the first message up to suspect that was not
	// answered when this take read its claim (see FirstUndone).
	undone firstUndone
	// renewed: when the lease was last written (unix nanoseconds); read
	// by Fence on the router's goroutines.
	renewed atomic.Int64
	health  health // heal.go: is its consumer delivering
}

type worker struct {
	n     *Node
	hooks WorkerHooks
	stop  context.CancelFunc // ends loop
	done  chan struct{}      // closed when loop has ended

	// owned is read by Owned and changed by loop; a partition's fields
	// belong to loop until it has ended (StopWorker reads them then).

	mu    sync.Mutex
	owned map[int]*partition
	// inherited: per partition, the last sequence another process's
	// consumer of it had delivered when this worker started it (start).
	// Kept for good: a start that failed after deleting those consumers
	// left the next attempt nothing to read it from, and a message the
	// dead owner may have run then ran again with no interruption
	// recorded (TestKillWorkerDuringRuns, stress run 19).
	inherited map[int]uint64

	recreated atomic.Uint64 // consumers deleted and made again (heal.go)
	retaken   atomic.Uint64 // leases taken again after they expired (retake)
	// orderReads: deliveries whose session order was read from the
	// stream (no Prev to prove it: consumeFn).
	orderReads atomic.Uint64
	troubleAt  time.Time     // the last NATS request of a tick that failed (loop's)
	healed     time.Time     // the last look at the consumers (heal.go; loop's)
	kick       chan struct{} // a consumer lost deliveries: heal at once (consumeFn)
	startHook  func(p int)   // tests: called as partition p's start begins (a take or a recreation)
	// infoHook, tests: what a take reads of the inbound stream (a stale
	// answer).
	infoHook func(*jetstream.StreamInfo) *jetstream.StreamInfo
}

// RunWorker makes this node a worker: it takes the partitions that
// rendezvous hashing assigns it among the live workers (leases in the
// parts bucket), consumes them and hands their messages to hooks.Deliver,
// until StopWorker or Close.
func (n *Node) RunWorker(hooks WorkerHooks) {
	ctx, stop := context.WithCancel(n.bgCtx)
	w := &worker{n: n, hooks: hooks, owned: map[int]*partition{}, stop: stop, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	n.mu.Lock()
	n.worker = w
	n.mu.Unlock()
	n.Go(func(context.Context) {
		defer close(w.done)
		w.loop(ctx)
	})
}

// Owned is the number of partitions this node owns.
func (n *Node) Owned() int {
	n.mu.Lock()
	w := n.worker
	n.mu.Unlock()
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.owned)
}

// Owns reports whether this worker holds partition p (giving it up
// included): a message of a partition it no longer holds is the next
// owner's to start.
func (n *Node) Owns(p int) bool {
	n.mu.Lock()
	w := n.worker
	n.mu.Unlock()
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.owned[p] != nil
}

// Lease states of a partition for Fence.
type LeaseState uint8

const (
	NotOwned   LeaseState = iota // another worker's, or none's
	Owned                        // this worker's, its lease renewed lately
	LeaseStale                   // this worker's, but its lease was not renewed for 2/3 of a lease: starts wait
	Taking                       // this worker's lease, its take not done (no fence yet): starts wait
)

func (p *partition) setRenewed(t time.Time) { p.renewed.Store(t.UnixNano()) }

// Fence is what Claimer.Start needs of partition p (see partition). A
// partition whose lease this worker could not renew for two thirds of a
// lease (NATS unreachable) is LeaseStale: no run starts until it is
// renewed or lost, so a worker cut off from NATS stops starting runs
// before another worker can take the partition over (its lease expires
// after a whole lease).
func (n *Node) Fence(p int) (fence, suspect uint64, st LeaseState) {
	part, st := n.held(p)
	if part == nil {
		return 0, 0, st
	}
	return part.fence.Load(), part.suspect.Load(), st
}

// held is the partition p this worker holds and its lease state (nil,
// NotOwned when it holds none).
func (n *Node) held(p int) (*partition, LeaseState) {
	n.mu.Lock()
	w := n.worker
	n.mu.Unlock()
	if w == nil {
		return nil, NotOwned
	}
	w.mu.Lock()
	part := w.owned[p]
	w.mu.Unlock()
	if part == nil {
		return nil, NotOwned
	}
	if !part.taken.Load() {
		// Its fence is not known yet: a delivery held from an earlier
		// take (a ticket starting when the partition was lost) would
		// pass fence 0 as new and run with no claim read (jepsen seed
		// 128: a message answered by another worker meanwhile ran again).
		return part, Taking
	}
	if time.Since(time.Unix(0, part.renewed.Load())) > n.cfg.Lease*2/3 {
		return part, LeaseStale
	}
	return part, Owned
}

// FirstUndone reports whether message seq of session, given to an
// earlier owner of partition p (up to its take's suspect) and without a
// done claim when read, may have started there: whether no earlier
// message of its session was found unanswered by this take
// (NoteUndone). A worker runs a session's messages one after another,
// the next only once the last one's done claim is stored (unless the
// channel's runner takes a message into a running turn,
// agent.Injector), and it starts nothing once its lease is stale: after
// a message the earlier owner never answered, it started none of that
// session. A partition not held (it moved since): true, as suspect as
// before.
func (n *Node) FirstUndone(p int, session string, seq uint64) bool {
	part, _ := n.held(p)
	if part == nil {
		return true
	}
	return part.undone.first(session, seq)
}

// NoteUndone records that message seq of session, given to an earlier
// owner of partition p, was unanswered: this take's start claim for it
// (a run again) was written, which a done claim would have refused. Only
// a write proves it: a read can trail the stream (jepsen seed 15: a
// stale "no claim" of a message answered long before made the next
// one, which had started, look never started).
func (n *Node) NoteUndone(p int, session string, seq uint64) {
	if part, _ := n.held(p); part != nil {
		part.undone.note(session, seq)
	}
}

// firstUndone is, per session, the lowest sequence noted (FirstUndone).
// It holds sessions with a message given to an earlier owner: bounded by
// what that owner was given.
type firstUndone struct {
	mu     sync.Mutex
	lowest map[string]uint64
}

// note records seq for session, if it is lower than what it holds.
func (f *firstUndone) note(session string, seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lowest == nil {
		f.lowest = map[string]uint64{}
	}
	if cur, ok := f.lowest[session]; !ok || seq < cur {
		f.lowest[session] = seq
	}
}

// first reports whether no message of session before seq was noted; a
// message noted itself (delivered again) is still first.
func (f *firstUndone) first(session string, seq uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, ok := f.lowest[session]
	return !ok || cur >= seq
}

// StopWorker stops consuming and gives every partition up at once (the
// leases are deleted, so the next owner need not wait for them to
// expire). Call it after the router has finished its runs.
func (n *Node) StopWorker() {
	n.mu.Lock()
	w := n.worker
	n.worker = nil
	n.mu.Unlock()
	if w == nil {
		return
	}
	w.stop()
	<-w.done // the loop owns the partitions until it ends
	w.mu.Lock()
	owned := w.owned
	w.owned = map[int]*partition{}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for p, part := range owned {
		if part.cc != nil {
			part.cc.Stop()
		}
		_ = n.parts.Delete(ctx, leaseKey(p), jetstream.LastRevision(part.rev))
	}
}

func leaseKey(p int) string { return "p." + strconv.Itoa(p) }

// randomSuffix names a partition's consumer for one owner.
func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// score is the rendezvous hash of a worker and a partition: the live
// worker with the highest score owns the partition.
func score(worker string, p int) uint32 {
	// A cryptographic hash: FNV of names that differ in one character
	// orders them the same way for every partition.
	sum := sha256.Sum256([]byte(worker + "\x00" + strconv.Itoa(p)))
	return binary.BigEndian.Uint32(sum[:4])
}

// loop ticks every lease/3, and at once when another worker's lease
// expires sooner (partitions_wake.go).
func (w *worker) loop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			w.heal(ctx)
			continue
		case <-t.C:
		}
		wake := &leaseWake{lease: w.n.cfg.Lease, now: time.Now()}
		w.tick(ctx, wake)
		w.heal(ctx)
		t.Reset(time.Until(wake.next(wake.now.Add(w.n.cfg.Lease / 3))))
	}
}

// liveWorkers are the workers in the nodes bucket, this one included;
// wake notes when the others' entries expire.
func (w *worker) liveWorkers(ctx context.Context, wake *leaseWake) []string {
	live := []string{w.n.cfg.Name}
	nodes, err := w.n.Nodes(ctx)
	if err != nil {
		return nil
	}
	for _, ni := range nodes {
		if ni.Name != w.n.cfg.Name && (ni.Role == "worker" || ni.Role == "all") {
			live = append(live, ni.Name)
			wake.expires(time.Duration(ni.SeenSecondsAgo * float64(time.Second)))
		}
	}
	return live
}

// tick renews, gives up and takes leases to match the assignment; wake
// notes when the leases other workers hold expire.
func (w *worker) tick(ctx context.Context, wake *leaseWake) {
	live := w.liveWorkers(ctx, wake)
	if live == nil {
		w.troubleAt = time.Now()
		return // NATS unreachable: keep what we have; leases tell the truth later
	}
	me := w.n.cfg.Name
	wanted := func(p int) bool {
		best, bestScore := "", uint32(0)
		for _, name := range live {
			if s := score(name, p); best == "" || s > bestScore || (s == bestScore && name < best) {
				best, bestScore = name, s
			}
		}
		return best == me
	}
	owned := w.ownedNow()
	w.renew(ctx, owned, wanted, nil)
	var starting sync.WaitGroup
	slots := make(chan struct{}, parallelStarts)
	startingSet := map[int]bool{}
	failed := make(chan int, w.n.cfg.Partitions)
	// After NATS trouble, the other workers' heartbeats and leases may
	// have expired while they could not be written: for a lease, until
	// each has written again, this worker takes no partition it does not
	// hold (it would take live workers' partitions, and they theirs back).
	holdDown := !w.troubleAt.IsZero() && time.Since(w.troubleAt) < w.n.cfg.Lease
	for p := 0; p < w.n.cfg.Partitions; p++ {
		if owned[p] != nil || !wanted(p) || holdDown {
			continue
		}
		rev, err := w.n.parts.Create(ctx, leaseKey(p), []byte(me))
		if errors.Is(err, jetstream.ErrKeyExists) {
			e, gerr := w.n.parts.Get(ctx, leaseKey(p))
			if gerr != nil {
				continue
			}
			if string(e.Value()) != me {
				wake.expires(time.Since(e.Created()))
				continue // another worker holds it until it gives it up or its lease expires
			}
			// Ours from an earlier life of this node: take it again.
			if rev, err = w.n.parts.Update(ctx, leaseKey(p), []byte(me), e.Revision()); err != nil {
				continue
			}
		} else if err != nil {
			w.troubleAt = time.Now()
			continue
		}
		// Owned before its consumer delivers: a delivery's run starts
		// only in a partition this worker owns (Owns).
		part := &partition{rev: rev}
		part.setRenewed(time.Now())
		w.mu.Lock()
		w.owned[p] = part
		w.mu.Unlock()
		// The partitions taken at once (a dead worker's) start side by
		// side: each start is a few JetStream requests.
		starting.Add(1)
		startingSet[p] = true
		go func() {
			defer starting.Done()
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				failed <- p
				return
			}
			defer func() { <-slots }()
			if err := w.start(ctx, p, part); err != nil {
				w.n.log.Warn("cluster: cannot consume partition; retrying", "partition", p, "err", err)
				failed <- p
			}
		}()
	}
	w.awaitStarts(ctx, &starting, startingSet, failed, wanted)
}

// awaitStarts waits for the partitions being started (their goroutines
// write their fields until then), renewing every lease held meanwhile:
// starting several partitions is a few JetStream requests each, which a
// loaded cluster can take longer than a lease over, and a tick that
// waited without renewing lost all its partitions at once (seen in
// TestMoveEdgeMidConversation under make test: their runs were then
// taken for interrupted by the next owner). A partition whose start
// failed is given up here, by the loop, with its lease's current
// revision.
func (w *worker) awaitStarts(ctx context.Context, starting *sync.WaitGroup, startingSet map[int]bool, failed chan int, wanted func(int) bool) {
	done := make(chan struct{})
	go func() { starting.Wait(); close(done) }()
	every := time.NewTicker(w.n.cfg.Lease / 3)
	defer every.Stop()
	giveUp := func(p int) {
		delete(startingSet, p)
		w.mu.Lock()
		part := w.owned[p]
		delete(w.owned, p)
		w.mu.Unlock()
		if part != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.n.cfg.Lease/3)
			_ = w.n.parts.Delete(dctx, leaseKey(p), jetstream.LastRevision(part.rev))
			cancel()
		}
	}
	for {
		select {
		case p := <-failed:
			giveUp(p)
			continue
		case <-every.C:
			w.renew(ctx, w.ownedNow(), wanted, startingSet)
			continue
		case <-done:
		}
		break
	}
	for {
		select {
		case p := <-failed:
			giveUp(p)
		default:
			return
		}
	}
}

// renew renews the leases of the partitions owned, and gives up those
// no longer wanted once they hold nothing; a partition in startingSet
// (its start still running) has its lease renewed only.
func (w *worker) renew(ctx context.Context, owned map[int]*partition, wanted func(int) bool, startingSet map[int]bool) {
	me := w.n.cfg.Name
	for p, part := range owned {
		if startingSet[p] {
			// Its start's goroutine writes its consumer: only its lease
			// is renewed here; a lease lost is seen at the next tick.
			if rev, err := w.n.parts.Update(ctx, leaseKey(p), []byte(me), part.rev); err == nil {
				part.rev = rev
				part.setRenewed(time.Now())
			}
			continue
		}
		if !wanted(p) && part.releasing.IsZero() {
			part.releasing = time.Now()
			if part.cc != nil {
				part.cc.Stop()
				part.cc = nil
			}
			w.n.log.Info("cluster: giving partition up to another worker", "partition", p)
		}
		if !part.releasing.IsZero() && (w.hooks.Unfinished(p) == 0 || time.Since(part.releasing) > w.n.cfg.AckWait) {
			_ = w.n.parts.Delete(ctx, leaseKey(p), jetstream.LastRevision(part.rev))
			w.drop(p)
			continue
		}
		rev, err := w.n.parts.Update(ctx, leaseKey(p), []byte(me), part.rev)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
				if w.retake(ctx, p, part) {
					continue
				}
				w.n.log.Warn("cluster: lost the lease of a partition", "partition", p, "err", err)
				w.drop(p)
				continue
			}
			w.troubleAt = time.Now()
			continue // NATS trouble: try again next tick (the lease may still hold)
		}
		part.rev = rev
		part.setRenewed(time.Now())
	}
}

// retake takes partition p's lease again when its key is gone (it
// expired while NATS could not be written: a leader election of the parts
// bucket can outlast a lease) and nobody has taken the partition since:
// the key is free, and this worker's consumer of it is still there and
// not paused (a new owner pauses, then deletes, the earlier consumers
// before it runs anything). The
// partition keeps its consumer and what the worker holds of it: nothing
// comes again, and no run is taken for interrupted (issue 38: every
// worker dropped and retook all its partitions after a NATS node died,
// which stalled every session for seconds more than the election).
func (w *worker) retake(ctx context.Context, p int, part *partition) bool {
	rev, err := w.n.parts.Create(ctx, leaseKey(p), []byte(w.n.cfg.Name))
	if err != nil {
		return false
	}
	part.health.mu.Lock()
	name := part.health.consumer
	part.health.mu.Unlock()
	if name == "" {
		return false // none to keep: the next tick starts it again (the key is ours)
	}
	if c, err := w.n.in.Consumer(ctx, name); err != nil || c.CachedInfo().Paused {
		// Gone or paused: another worker began taking the partition over
		// (it pauses, then deletes, the earlier consumers) and gave up.
		return false
	}
	part.rev = rev
	part.setRenewed(time.Now())
	w.retaken.Add(1)
	w.n.log.Info("cluster: a partition's lease expired while NATS could not be written; taken again, its consumer kept", "partition", p, "consumer", name)
	return true
}

// ownedNow is a copy of the partitions owned now.
func (w *worker) ownedNow() map[int]*partition {
	w.mu.Lock()
	defer w.mu.Unlock()
	owned := make(map[int]*partition, len(w.owned))
	for p, part := range w.owned {
		owned[p] = part
	}
	return owned
}

// drop forgets partition p and tells the hooks.
func (w *worker) drop(p int) {
	w.mu.Lock()
	part := w.owned[p]
	delete(w.owned, p)
	w.mu.Unlock()
	if part != nil && part.cc != nil {
		part.cc.Stop()
	}
	if w.hooks.Lost != nil {
		w.hooks.Lost(p)
	}
}

// start consumes partition p from its consumers' ack floor, on a
// consumer of its own: what the last owner left unanswered comes first
// and in stream order (JetStream's redelivery after the ack wait would
// let newer messages of a session overtake it).
//
// Each owner makes a consumer under a new name (p<N>_<random>) and then
// deletes the earlier ones. With one durable name for every owner, an old
// owner that has not yet seen its lease go (it was reconnecting to NATS,
// and missed the deletion notice) pulls from the new owner's consumer:
// the partition's messages are then split between two workers, and a
// message delivered to the old one, which drops it when it sees the lease
// gone, comes again only after the ack wait, after the session's later
// messages ran on the new owner. Its acks and in-progress signals would
// also land on the new consumer. A consumer name the old owner does not
// know fences it off.
func (w *worker) start(ctx context.Context, p int, part *partition) error {
	if w.startHook != nil {
		w.startHook(p)
	}
	prefix := "p" + strconv.Itoa(p)
	var old []string
	var floor, suspect uint64
	names := w.n.in.ConsumerNames(ctx)
	for name := range names.Name() {
		if name != prefix && !strings.HasPrefix(name, prefix+"_") {
			continue
		}
		c, err := w.n.in.Consumer(ctx, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading consumer %s: %w", name, err)
		}
		info := c.CachedInfo()
		if info.Config.Metadata[consumerWorker] != w.hooks.Me {
			// Another process's (or an earlier life's): it may have
			// started what it was given, writing no claim (the hot
			// path). Paused, it is given nothing more, and what it was
			// given is final.
			upTo, err := w.pauseOld(ctx, c)
			if err != nil {
				return err
			}
			suspect = max(suspect, upTo)
		}
		// Several: one left by an owner that died between making its
		// consumer and deleting the earlier one. The lowest floor loses
		// nothing (messages answered above it are answered from claims).
		if f := info.AckFloor.Stream; len(old) == 0 || f < floor {
			floor = f
		}
		old = append(old, name)
	}
	if len(old) == 0 {
		// This worker's own consumer was lost (heal.go): start at its
		// last ack floor seen, not at the stream's first message.
		floor = part.health.floor()
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("listing the consumers of %s: %w", InStream, err)
	}
	// Recorded before any earlier consumer is deleted below.
	suspect = w.inherit(p, suspect)
	name := prefix + "_" + randomSuffix()
	cfg := jetstream.ConsumerConfig{Durable: name, FilterSubjects: w.n.partitionSubjects(ctx, p),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: w.n.cfg.AckWait, MaxAckPending: maxAckPending,
		MaxDeliver: -1, DeliverPolicy: jetstream.DeliverAllPolicy,
		Description: "termlink: partition " + strconv.Itoa(p), Metadata: map[string]string{consumerWorker: w.hooks.Me}}
	if floor > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, floor+1
	}
	cons, err := w.n.in.CreateConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("creating consumer %s: %w", name, err)
	}
	// Made before the old ones go: a death in between leaves both, and
	// the next owner starts from the lower floor.
	for _, o := range old {
		if err := w.n.in.DeleteConsumer(ctx, o); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			_ = w.n.in.DeleteConsumer(ctx, name)
			return fmt.Errorf("deleting the earlier consumer %s: %w", o, err)
		}
	}
	// Everything an earlier consumer could have delivered is at or below
	// the stream's last sequence now.
	si, err := w.currentInfo(ctx, max(floor, suspect))
	if err != nil {
		_ = w.n.in.DeleteConsumer(ctx, name)
		return fmt.Errorf("reading %s: %w", InStream, err)
	}
	part.fence.Store(si.State.LastSeq)
	part.suspect.Store(min(suspect, si.State.LastSeq))
	part.taken.Store(true)
	// A new consumer: not stuck, nothing lost (before its first delivery).
	part.health.consuming(name)
	cc, err := cons.Consume(w.consumeFn(p, part, cfg.OptStartSeq-min(cfg.OptStartSeq, 1)), jetstream.PullMaxMessages(256),
		// Short pulls, with heartbeats every half second: a pull request
		// sent to a consumer whose leader died, or while it elects a new
		// one, is lost, and the client notices only when two heartbeats
		// are missed, then pulls again. With 5 s pulls (2.5 s heartbeats)
		// a NATS node's death stalled its consumers' partitions for the
		// election (4-9 s) plus one or two missed-heartbeat rounds of 5 s
		// (issue 38: ready-to-first-run p99 16 s with a NATS node dead).
		jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if w.n.bgCtx.Err() == nil {
				w.n.log.Debug("cluster: partition consumer", "partition", p, "err", err)
			}
		}))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", name, err)
	}
	part.cc, part.cons = cc, cons
	w.n.log.Info("cluster: partition taken", "partition", p, "consumer", name, "from_seq", cfg.OptStartSeq,
		"fence", part.fence.Load(), "suspect", part.suspect.Load())
	return nil
}

// currentInfo reads the inbound stream's info, again while its last
// sequence is below known (what its consumers had acked or been given):
// a stream leader not caught up, or a partitioned one that has not yet
// stepped down, answers with an older state. Jepsen seed 189: n1, cut
// off for 14 s, answered a take just after it came back with a last
// sequence of 110 while the old consumer's ack floor was 118; the fence
// was set at 110, and a message the dead owner had started (above 110)
// passed it as new and ran again with no interruption recorded.
func (w *worker) currentInfo(ctx context.Context, known uint64) (*jetstream.StreamInfo, error) {
	wait := 50 * time.Millisecond
	for {
		si, err := w.n.inInfo(ctx)
		if err != nil {
			return nil, err
		}
		if w.infoHook != nil {
			si = w.infoHook(si)
		}
		if si.State.LastSeq >= known {
			return si, nil
		}
		leader := ""
		if si.Cluster != nil {
			leader = si.Cluster.Leader
		}
		w.n.log.Warn("cluster: the inbound stream's info is behind its consumers; reading it again",
			"last_seq", si.State.LastSeq, "known", known, "leader", leader)
		if wait = pause(ctx, wait); ctx.Err() != nil {
			return nil, fmt.Errorf("its last sequence %d stayed behind what its consumers had (%d): %w", si.State.LastSeq, known, ctx.Err())
		}
	}
}

// inherit records that partition p's earlier owners were given up to
// sequence suspect and returns the most recorded for p (see inherited).
func (w *worker) inherit(p int, suspect uint64) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inherited == nil {
		w.inherited = map[int]uint64{}
	}
	w.inherited[p] = max(w.inherited[p], suspect)
	return w.inherited[p]
}

// A partition consumer's pulls: they expire after pullExpiry, and the
// server sends a heartbeat every pullHeartbeat while one waits (two
// missed: pulled again).
const (
	pullExpiry    = 2 * time.Second
	pullHeartbeat = 500 * time.Millisecond
)

// consumerWorker is the consumer metadata key naming the worker process
// that made it (WorkerHooks.Me).
const consumerWorker = "termlink_worker"

// pauseOld pauses an earlier owner's consumer and returns the last
// stream sequence it may have delivered: past the pause it delivers
// nothing, so nothing above the stream's last sequence. That sequence,
// not the consumer's own Delivered, is the bound: a consumer's delivered
// state can roll back when its leader changes (its replicas trail the
// leader), and jepsen seeds 320, 330 and 373 took a dead worker's
// partition from a consumer whose info, read right after a NATS node's
// pause or partition, said Delivered 224 and AckFloor 0 with the stream
// at 587: messages the dead worker had started ran again with no
// interruption recorded. Suspecting up to the stream's end costs at most
// one claim write per session (FirstUndone) and a run_interrupted record
// for a first message that may not have started.
func (w *worker) pauseOld(ctx context.Context, c jetstream.Consumer) (uint64, error) {
	name := c.CachedInfo().Name
	var delivered uint64
	if _, err := w.n.in.PauseConsumer(ctx, name, time.Now().Add(time.Hour)); err == nil {
		if info, err := c.Info(ctx); err == nil {
			delivered = info.Delivered.Stream
		}
	} else {
		w.n.log.Warn("cluster: cannot pause an earlier owner's consumer; every message it may have been given is taken as maybe started", "consumer", name, "err", err)
	}
	si, err := w.n.inInfo(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", InStream, err)
	}
	return max(delivered, si.State.LastSeq), nil
}

// inInfo reads the inbound stream's info on a handle of its own:
// nats.go's Stream.Info caches what it read in the handle unguarded, and
// partitions are taken side by side.
func (n *Node) inInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	s, err := n.js.Stream(ctx, InStream)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}

// consumeFn is what partition p's consumer calls with each delivery: it
// hands the message to the hooks, in stream order, starting after stream
// sequence from (the consumer's start: everything up to it is acked).
//
// A delivery the consumer sent and this worker never got would come
// again only after the ack wait, after the session's later messages ran.
// Two guards stop the hand-over at the first sign of one, and the
// consumer is recreated at once at its ack floor (heal), so everything
// unanswered comes again in order:
//   - the consumer sequence skips (the worker's connection to NATS broke
//     or was moved while deliveries were on the way);
//   - a new message's session has an earlier message in the stream that
//     was not handed over. The consumer sequence alone missed this
//     (jepsen seed 80: while a NATS node was paused, a session's
//     messages 17 and 18 were delivered after 19-22 with no consumer
//     sequence skipped). A message names the one before it in its
//     session (inMsg.Prev, from its edge): that one handed over last
//     (or acked before this consumer began) proves the order with no
//     request; else the session's subject is read from the stream's
//     leader (its first message after the last one handed over).
func (w *worker) consumeFn(p int, part *partition, from uint64) func(m jetstream.Msg) {
	h := &part.health
	var last uint64               // the consumer sequence of the last delivery
	handed := map[string]uint64{} // per session subject, the stream sequence of its last message handed over
	lose := func(n uint64, why string, attrs ...any) {
		h.loseDeliveries(n)
		w.n.log.Warn("cluster: deliveries of a partition lost on the way; recreating its consumer so they come again in order",
			append([]any{"partition", p, "why", why}, attrs...)...)
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return func(m jetstream.Msg) {
		defer h.delivering()()
		md, err := m.Metadata()
		if err == nil {
			if h.lost() {
				return // comes again from the new consumer
			}
			if last > 0 && md.Sequence.Consumer > last+1 {
				lose(md.Sequence.Consumer-last-1, "the consumer sequence skipped", "lost", md.Sequence.Consumer-last-1)
				return
			}
			last = md.Sequence.Consumer
		}
		in, derr := decodeIn(m.Data())
		var seq uint64
		if md != nil {
			seq = md.Sequence.Stream
			// A legacy message (on the partition's own subject) names no
			// session: only the consumer sequence guards it.
			subject := m.Subject()
			before := handed[subject]
			if seq > before { // new here (else a copy of one handed over: its ticket answers it)
				var proven bool
				switch {
				case derr != nil: // dropped below: it counts as handed over
					proven = true
				case in.Prev == noPrev: // the first of its session in the stream
					proven = before == 0
				case in.Prev != 0:
					proven = in.Prev == before || before == 0 && in.Prev <= from
				}
				if !proven {
					w.orderReads.Add(1)
					next, err := w.nextInSession(subject, max(before, from))
					switch {
					case err != nil:
						lose(1, "cannot read the stream to check a session's order", "err", err)
						return
					case next < seq:
						lose(1, "an earlier message of the session was skipped", "skipped_seq", next, "delivered_seq", seq)
						return
					}
				}
				if len(handed) >= maxHandedSessions {
					clear(handed) // bounded: the next of each session is read from the stream
				}
				handed[subject] = seq
			}
		}
		if derr != nil {
			w.n.log.Error("cluster: dropping a bad inbound message", "partition", p, "err", derr)
			_ = m.Term()
			return
		}
		w.hooks.Deliver(w.n.bgCtx, &Delivery{In: in.Inbound, Partition: p, Seq: seq, msg: m})
	}
}

// maxHandedSessions bounds the sessions a partition's consumer remembers
// the last message of (consumeFn).
const maxHandedSessions = 1 << 16

// partitionSubjects are the subjects partition p's consumer reads: its
// sessions' (sessionSubject), and the partition's own while the stream
// still holds messages stored there before sessions had subjects (a
// consumer of two filters costs the NATS server more per delivery).
func (n *Node) partitionSubjects(ctx context.Context, p int) []string {
	subjects := []string{inPrefix + strconv.Itoa(p) + ".>"}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if _, err := n.in.GetLastMsgForSubject(ctx, inPrefix+strconv.Itoa(p)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		subjects = append(subjects, inPrefix+strconv.Itoa(p))
	}
	return subjects
}

// nextInSession is the stream sequence of the first message on a
// session's subject after sequence after, read from the stream's leader
// (the inbound stream allows no direct gets: a replica behind would not
// have it). None: math.MaxUint64. NATS trouble is retried for about a
// second.
func (w *worker) nextInSession(subject string, after uint64) (uint64, error) {
	wait := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(w.n.bgCtx, 2*time.Second)
		m, err := w.n.in.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(subject))
		cancel()
		switch {
		case err == nil:
			return m.Sequence, nil
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return math.MaxUint64, nil
		case attempt >= 3 || w.n.bgCtx.Err() != nil:
			return 0, err
		}
		wait = pause(w.n.bgCtx, wait)
	}
}
