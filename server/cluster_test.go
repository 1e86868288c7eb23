package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
	"termlink/server/cluster"
	"termlink/server/cluster/natstest"
	"termlink/server/config"
)

// These tests run one termserver with role "all" (edge and worker) on a
// real single-node JetStream (the nats-server library in this process,
// on a loopback port) and make the worker lose a partition's lease at a
// chosen moment, as when NATS elects new leaders for longer than the
// lease and another worker takes the partition meanwhile (dropLease):
// the worker drops the partition, takes it again, and its new consumer
// delivers what is unanswered again.

// startJetStream runs a one-node JetStream on 127.0.0.1 and returns its
// client URL.
func startJetStream(t *testing.T) string { return natstest.Start(t, true).ClientURL() }

// startClusterServer runs a termserver with role "all", one partition,
// replicas 1, a 1 s lease and a 1 s ack wait on its own JetStream, and
// waits until it owns the partition. hook, if set, is its Options.claimHook.
func startClusterServer(t *testing.T, runner *countingRunner, mutate func(*config.Config), hook func(bus.Inbound) error) (*testServer, jetstream.JetStream) {
	t.Helper()
	url := startJetStream(t)
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	cfg.Cluster = config.Cluster{NATS: []string{url}, Role: config.RoleAll, Name: "node-1", Partitions: 1, Replicas: 1,
		AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
	if mutate != nil {
		mutate(cfg)
	}
	opt := Options{claimHook: hook}
	if runner != nil {
		opt.Runners = map[string]agent.Runner{"echo": runner}
	}
	ts := serve(t, cfg, opt)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if !waitUntil(t, "the partition is owned", func() bool { return clusterStore(ts).Node().Owns(0) }) {
		t.FailNow()
	}
	return ts, js
}

// waitUntil polls ok every 10 ms for at most 20 s; false (and the test
// marked failed) if it never held. It may be called from any goroutine.
func waitUntil(t *testing.T, what string, ok func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Errorf("not %s after 20 s", what)
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// dropLease makes the worker lose partition 0's lease and take it again:
// another worker's name is written over the lease (as a worker that took
// the partition while this one could not renew does), so the owner's
// renewal fails and the key is not free to take again; once the worker
// has given the partition up, the key goes (as that worker's lease
// expires) and the worker takes the partition again on a new consumer.
// (A lease that merely expired is taken again with its consumer: retake,
// TestExpiredLeaseTakenAgain in server/cluster.)
func dropLease(t *testing.T, ts *testServer, js jetstream.JetStream) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, cluster.PartsBucket)
	if err != nil {
		t.Error(err)
		return
	}
	if _, err := kv.Put(ctx, "p.0", []byte("another-worker")); err != nil {
		t.Error(err)
		return
	}
	node := clusterStore(ts).Node()
	if !waitUntil(t, "the worker to give partition 0 up", func() bool { return !node.Owns(0) }) {
		return
	}
	if err := kv.Purge(ctx, "p.0"); err != nil {
		t.Error(err)
		return
	}
	waitUntil(t, "the worker to take partition 0 again", func() bool { return node.Owns(0) })
}

// heldTicket is the ticket the worker holds for a message, nil for none.
func heldTicket(c *cluster.Store, session, messageID string) *cluster.Ticket {
	return c.Held(session, messageID)
}

// clusterStore is the server's store of record in cluster mode.
func clusterStore(ts *testServer) *cluster.Store { return ts.rt.Records.Store.(*cluster.Store) }

// until reads frames until want has seen what it waits for (true), for
// at most 15 s.
func (c *client) until(want func(link.Frame) bool) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if want(c.read()) {
			return
		}
	}
	c.t.Fatal("frame not seen in 15 s")
}

func isReply(id string) func(link.Frame) bool {
	return func(f link.Frame) bool {
		m, ok := f.(*link.Message)
		return ok && m.MessageID == id
	}
}

func isAck(id string) func(link.Frame) bool {
	return func(f link.Frame) bool {
		a, ok := f.(*link.Ack)
		return ok && a.MessageID == id
	}
}

// Row 7 of issue 22: the lease was lost (it vanished in a NATS leader
// election longer than the lease, and another worker took it) while the
// worker wrote a message's claim. The worker
// dropped the partition and its tickets, took the partition again, and
// the new consumer delivered the message again; the run went on without
// a ticket, its reply was not recorded through the new one, and the next
// delivery found the claim "running, by this worker, this run id" and
// took it for its own write whose answer was lost: a second run, with no
// interruption recorded. The message must run once.
func TestClusterLeaseLostWhileClaimIsWritten(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(false)
	var ts *testServer
	var js jetstream.JetStream
	ready := make(chan struct{}) // ts and js are set
	first := true
	ts, js = startClusterServer(t, runner, nil, func(in bus.Inbound) error {
		<-ready
		if in.MessageID == "m-1" && first {
			first = false
			dropLease(t, ts, js)
			time.Sleep(1500 * time.Millisecond) // the new consumer delivers m-1 again (ack wait 1 s)
		}
		return nil
	})
	close(ready)
	c := dial(t, ts.ws, nil)
	c.connect("dev-7")
	c.send(&link.Message{MessageID: "m-1", Text: "once"})
	c.until(isReply("m-1"))
	time.Sleep(3 * time.Second) // three ack waits: a delivery left behind comes again
	if n := runner.runs.Load(); n != 1 {
		t.Errorf("m-1 ran %d times, want once", n)
	}
}

// Row 8 of issue 22 (the worker's side): A and B of one session are
// delivered; A's claim write fails (NATS electing leaders) while the
// lease is lost, the worker takes the partition again and both are
// delivered again. A's queued-up copy gave up (its ticket had been
// replaced) while B's copy, queued before the partition moved, ran with
// B's new ticket: B ran before A. The session must run A, then B.
func TestClusterPartitionRetakenKeepsSessionOrder(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(false)
	var ts *testServer
	var js jetstream.JetStream
	ready := make(chan struct{}) // ts and js are set
	first := true
	ts, js = startClusterServer(t, runner, nil, func(in bus.Inbound) error {
		<-ready
		if in.MessageID != "A" || !first {
			return nil
		}
		first = false
		c := clusterStore(ts)
		// The hook runs on the router's goroutine: failures are
		// marked (t.Error), never fatal here.
		waitUntil(t, "B delivered", func() bool { return heldTicket(c, in.SessionKey, "B") != nil })
		b0 := heldTicket(c, in.SessionKey, "B")
		dropLease(t, ts, js)
		waitUntil(t, "B delivered again", func() bool {
			b := heldTicket(c, in.SessionKey, "B")
			return b != nil && b != b0
		})
		return errors.New("simulated: the claim write failed while NATS elected leaders")
	})
	close(ready)
	c := dial(t, ts.ws, nil)
	c.connect("dev-8")
	c.send(&link.Message{MessageID: "A", Text: "first"})
	c.send(&link.Message{MessageID: "B", Text: "second"})
	got := map[string]bool{}
	c.until(func(f link.Frame) bool {
		if m, ok := f.(*link.Message); ok {
			got[m.MessageID] = true
		}
		return got["A"] && got["B"]
	})
	order := []string{<-runner.started, <-runner.started}
	if order[0] != "A" || order[1] != "B" {
		t.Errorf("runs started in the order %v, want [A B]", order)
	}
}

// Row 8 of issue 22 (the edge's side): with a window of messages in
// flight, a message refused busy must not be overtaken by the next one
// when a place frees in between.
func TestClusterEdgeBusyRefusalHoldsLaterMessages(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts, _ := startClusterServer(t, runner, func(c *config.Config) { setSessionBound(c, 1) }, nil)
	c := dial(t, ts.ws, nil)
	c.connect("dev-busy")
	c.send(&link.Message{MessageID: "A", Text: "a"})
	c.until(isAck("A"))
	if id := <-runner.started; id != "A" {
		t.Fatalf("run of %s, want A", id)
	}
	c.send(&link.Message{MessageID: "B", Text: "b"}) // A still waits for its reply: no place
	c.expectError("maxWaitingPerSession", link.CodeBusy)
	runner.gate <- struct{}{} // A answered: the place frees
	c.until(isReply("A"))
	c.send(&link.Message{MessageID: "C", Text: "c"}) // sent in the device's window, before B came again
	f := c.read()
	if e, ok := f.(*link.Error); !ok || e.Code != link.CodeBusy || e.MessageID != "C" {
		t.Fatalf("C, sent while B is refused: got %s %+v, want a busy error for C", f.FrameType(), f)
	}
	close(runner.gate)
	c.send(&link.Message{MessageID: "B", Text: "b"})
	c.until(isReply("B"))
	c.send(&link.Message{MessageID: "C", Text: "c"})
	c.until(isReply("C"))
	order := []string{"A", <-runner.started, <-runner.started}
	if order[1] != "B" || order[2] != "C" {
		t.Errorf("runs in the order %v, want [A B C]", order)
	}
}

// Issue 25 item 3: a message costs two replicated writes, the inbound
// message and its done claim (which is its turn in the history); no
// other stream or bucket is written on its path once the device is
// connected (presence, the start of a run and the history are not
// written apart any more).
func TestClusterTwoWritesPerMessage(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(false)
	ts, js := startClusterServer(t, runner, nil, nil)
	c := dial(t, ts.ws, nil)
	c.connect("dev-writes")
	c.send(&link.Message{MessageID: "warm", Text: "warm"})
	c.until(isReply("warm"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Every stream's stored-message count (a bucket is a stream too).
	counts := func() map[string]uint64 {
		out := map[string]uint64{}
		l := js.ListStreams(ctx)
		for si := range l.Info() {
			out[si.Config.Name] = si.State.LastSeq // every write, kept or not
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The write-behind of the registry and the heartbeats run on their
	// own clocks, not a message's path, and events go out in batches
	// behind it (TestEventsBatched in package cluster): left out.
	offPath := map[string]bool{"KV_" + cluster.NodesBucket: true, "KV_" + cluster.PartsBucket: true, "KV_termlink_devices": true, "TERMLINK_EVENTS": true}
	before := counts()
	const n = 20
	for i := range n {
		id := "w-" + string(rune('a'+i))
		c.send(&link.Message{MessageID: id, Text: "hello"})
		c.until(isReply(id))
	}
	after := counts()
	writes := uint64(0)
	for name, a := range after {
		if offPath[name] {
			continue
		}
		d := a - before[name]
		writes += d
		switch name {
		case cluster.InStream, cluster.HistStream:
			if d != n {
				t.Errorf("stream %s: %d messages stored for %d messages, want one each", name, d, n)
			}
		default:
			if d != 0 {
				t.Errorf("stream %s: %d messages stored for %d messages, want none on a message's path", name, d, n)
			}
		}
	}
	t.Logf("off the path: events %d, devices %d for %d messages", after["TERMLINK_EVENTS"]-before["TERMLINK_EVENTS"], after["KV_termlink_devices"]-before["KV_termlink_devices"], n)
	if writes != 2*n {
		t.Errorf("%d replicated writes for %d messages, want %d (two each)", writes, n, 2*n)
	}
	if got := runner.runs.Load(); got != n+1 {
		t.Errorf("%d runs, want %d", got, n+1)
	}
}
