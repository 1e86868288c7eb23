package cluster_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/session"
	"termlink/testrig/cluster"
)

// termserverBin is the termserver the end-to-end tests run, built once:
// not race-instrumented (seven processes share two cores) unless
// TERMLINK_CLUSTER_RACE=1; then a race a node reports fails the test
// (Server.Close).
var termserverBin string

func TestMain(m *testing.M) {
	flag.Parse()
	cluster.ParallelDefault()
	dir, err := os.MkdirTemp("", "cluster-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	termserverBin, err = cluster.BuildTermserver(ctx, dir, os.Getenv("TERMLINK_CLUSTER_RACE") == "1")
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// waitFor bounds every wait of these tests: testwait's deadline (a
// loaded 2-core machine is slow, never that slow). No test asserts on
// how long a wait took.
const waitFor = testwait.Deadline

// testCluster is 3 NATS nodes plus termserver edges and workers.
type testCluster struct {
	nats    *cluster.NATS
	edges   []*cluster.Server
	workers []*cluster.Server
}

type clusterOpts struct {
	edges, workers int
	agent          cluster.Agent
	// failover gives the nodes a short lease (2 s) and ack wait (5 s):
	// for a test that kills or cuts off a node and waits for the others
	// to take its part over, which the defaults (5 s and 30 s) would
	// make it wait out. A test that expects every run to run once keeps
	// the defaults: on a loaded machine a worker that renews a 2 s lease
	// late loses its partitions and their runs run again (seen in
	// TestMoveEdgeMidConversation with four clusters at once).
	failover   bool
	cluster    map[string]any // more keys of the cluster block
	concurrent bool           // start the termserver nodes at the same time
	channel    map[string]any // keys of the channel's config block
	// natsFor, if set, gives a node's NATS URLs ("": all of them).
	natsFor func(c *cluster.NATS, node string) string
}

// startCluster starts the NATS cluster, then the termserver nodes one
// after the other (see TestConcurrentNodeStart for why not at once),
// and waits until every node's /api/status lists them all.
func startCluster(t *testing.T, o clusterOpts) *testCluster {
	t.Helper()
	tc := &testCluster{nats: cluster.StartNATSForTest(t, 3)}
	extra := map[string]any{}
	if o.failover {
		extra["leaseSeconds"], extra["ackWaitSeconds"] = 2, 5
	}
	for k, v := range o.cluster {
		extra[k] = v
	}
	var specs []cluster.NodeSpec
	for i := range o.edges {
		specs = append(specs, cluster.NodeSpec{Name: fmt.Sprintf("edge-%d", i+1), Role: "edge"})
	}
	for i := range o.workers {
		specs = append(specs, cluster.NodeSpec{Name: fmt.Sprintf("worker-%d", i+1), Role: "worker"})
	}
	dir := t.TempDir()
	servers := make([]*cluster.Server, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for i, s := range specs {
		s.NATS, s.Partitions, s.Replicas, s.Agent, s.Cluster, s.ChannelConfig = tc.nats.URLs(), 8, 3, o.agent, extra, o.channel
		s.Dir = filepath.Join(dir, s.Name)
		if o.natsFor != nil {
			if u := o.natsFor(tc.nats, s.Name); u != "" {
				s.NATS = u
			}
		}
		start := func() { servers[i], errs[i] = cluster.StartServer(ctx, termserverBin, s) }
		if o.concurrent {
			wg.Add(1)
			go func() { defer wg.Done(); start() }()
		} else {
			start()
		}
	}
	wg.Wait()
	for i, s := range servers {
		if s == nil {
			continue
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("--- %s log tail:\n%s", s.Spec.Name, s.LogTail(40))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Close(ctx); err != nil {
				t.Errorf("stopping %s: %v", s.Spec.Name, err)
			}
		})
		if specs[i].Role == "edge" {
			tc.edges = append(tc.edges, s)
		} else {
			tc.workers = append(tc.workers, s)
		}
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range servers {
		if err := s.WaitClusterNodes(ctx, len(servers)); err != nil {
			t.Fatal(err)
		}
	}
	return tc
}

// device is a terminal device: a link.Client with an in-memory outbox
// that outlives the client, so the device can move to another edge (a
// new client on the same outbox resends what is unanswered, as a device
// with a list of servers does).
type device struct {
	t    *testing.T
	peer string
	box  *link.MemoryOutbox

	mu       sync.Mutex
	c        *link.Client
	runDone  chan struct{}
	evDone   chan struct{}
	texts    map[string]string // message id -> text
	sentIDs  []string
	replies  map[string]string // message id -> reply text (first)
	finals   map[string]int    // message id -> final answers seen
	order    []string          // message ids in the order their replies came
	sessions map[string]bool   // session ids seen in connected and acks
	acked    map[string]bool   // message ids acked
	ackOrder []string          // message ids in the order of their first ack
	online   bool              // the current client's link is up
	connects int               // sessions that reached connected, over every client
	dupes    int64             // link.Client's DuplicateReplies over every client
	changed  chan struct{}
}

func newDevice(t *testing.T, peer, url string, fallbacks ...string) *device {
	d := &device{t: t, peer: peer, box: link.NewMemoryOutbox(), texts: map[string]string{}, replies: map[string]string{},
		finals: map[string]int{}, sessions: map[string]bool{}, acked: map[string]bool{}, changed: make(chan struct{})}
	d.connect(url, fallbacks...)
	t.Cleanup(func() { d.close(); _ = d.box.Close() })
	return d
}

// connect closes the device's client (if any) and starts a new one on
// url (and the fallbacks, dialled in a ring when a dial fails) with the
// same peer id and outbox.
func (d *device) connect(url string, fallbacks ...string) {
	d.t.Helper()
	d.close()
	c, err := link.NewClient(link.ClientConfig{URL: url, Fallbacks: fallbacks, PeerID: d.peer, DeviceName: d.peer, Outbox: d.box,
		RetryInitial: 100 * time.Millisecond, RetryMax: time.Second, Heartbeat: 2 * time.Second, PongTimeout: 3 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		d.t.Fatal(err)
	}
	run, ev := make(chan struct{}), make(chan struct{})
	d.mu.Lock()
	d.c, d.runDone, d.evDone, d.online = c, run, ev, false
	d.mu.Unlock()
	go func() { defer close(run); _ = c.Run(context.Background()) }()
	go func() { defer close(ev); d.events(c) }()
}

func (d *device) events(c *link.Client) {
	for e := range c.Events() {
		d.mu.Lock()
		switch e.Kind {
		case link.EventState:
			d.online = e.State == link.StateConnected
			if d.online {
				d.connects++
			}
			if e.State == link.StateConnected && e.SessionID != "" {
				d.sessions[e.SessionID] = true
			}
		case link.EventAck:
			if !d.acked[e.MessageID] {
				d.acked[e.MessageID] = true
				d.ackOrder = append(d.ackOrder, e.MessageID)
			}
			if e.Ack.SessionID != "" {
				d.sessions[e.Ack.SessionID] = true
			}
		case link.EventReply:
			if _, ok := d.replies[e.MessageID]; !ok {
				d.replies[e.MessageID] = e.Reply.Text
				d.order = append(d.order, e.MessageID)
			}
			d.finals[e.MessageID]++
		case link.EventError:
			if e.Final {
				d.finals[e.MessageID]++
				d.replies[e.MessageID] = "ERROR: " + e.Err.Error()
				d.order = append(d.order, e.MessageID)
			}
		}
		close(d.changed)
		d.changed = make(chan struct{})
		d.mu.Unlock()
		if e.Final {
			_ = c.Delivered(e.MessageID)
		}
	}
}

// close stops the current client and waits for its goroutines.
func (d *device) close() {
	d.mu.Lock()
	c, run, ev := d.c, d.runDone, d.evDone
	d.c = nil
	d.mu.Unlock()
	if c == nil {
		return
	}
	_ = c.Close()
	<-run
	<-ev
	d.mu.Lock()
	d.dupes += c.Stats().DuplicateReplies
	d.mu.Unlock()
}

// send queues text and returns its message id.
func (d *device) send(text string) string {
	d.t.Helper()
	d.mu.Lock()
	c := d.c
	d.mu.Unlock()
	id, err := c.Send(context.Background(), text)
	if err != nil {
		d.t.Fatal(err)
	}
	d.mu.Lock()
	d.texts[id] = text
	d.sentIDs = append(d.sentIDs, id)
	d.mu.Unlock()
	return id
}

// waitReplies waits until every message sent has its final answer.
func (d *device) waitReplies(timeout time.Duration) {
	d.t.Helper()
	deadline := time.After(timeout)
	for {
		d.mu.Lock()
		missing := 0
		for _, id := range d.sentIDs {
			if _, ok := d.replies[id]; !ok {
				missing++
			}
		}
		ch := d.changed
		d.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			d.t.Fatalf("device %s: %d of %d messages unanswered after %v", d.peer, missing, len(d.sentIDs), timeout)
		}
	}
}

// check fails the test unless every message got exactly one final
// answer, "You said: <its text>", and (inOrder) the answers came in send
// order. The order the messages ran in is the history's
// (checkHistory).
func (d *device) check(inOrder bool) {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range d.sentIDs {
		if n := d.finals[id]; n != 1 {
			d.t.Errorf("device %s message %s (%q): %d final answers, want 1", d.peer, id, d.texts[id], n)
		}
		if r := d.replies[id]; r != "You said: "+d.texts[id] {
			d.t.Errorf("device %s message %s: reply %q does not answer %q", d.peer, id, r, d.texts[id])
		}
	}
	if inOrder && !slices.Equal(d.order, d.sentIDs) {
		d.t.Errorf("device %s: replies came in the order %v, sent %v", d.peer, d.order, d.sentIDs)
	}
}

// histRecord is a record of the TERMLINK_HIST stream.
type histRecord struct {
	Session string
	Record  session.Record
}

// readHistory reads every record of the TERMLINK_HIST stream, in stream
// order (duplicates included: the caller counts). A message's claim
// written done again (a cancel that lost the race) stays in the stream
// as two entries: the caller counts by role, message id and event.
func readHistory(t *testing.T, urls string) []histRecord {
	t.Helper()
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := js.Stream(ctx, "TERMLINK_HIST")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []histRecord
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			if strings.Contains(err.Error(), "not found") {
				continue
			}
			t.Fatalf("history seq %d: %v", seq, err)
		}
		// A message's claim, {"state": ..., "session": KEY, "records":
		// [...]}: its turn once done; or, in the earlier formats,
		// {"session": KEY, "records": [...]} ("record": one, in the
		// first version).
		var e struct {
			State   string           `json:"state"`
			Session string           `json:"session"`
			Record  *session.Record  `json:"record"`
			Records []session.Record `json:"records"`
		}
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatalf("history seq %d: %v: %s", seq, err, m.Data)
		}
		if e.State != "" && e.State != "done" {
			continue // a claim not answered yet: no turn
		}
		if e.Record != nil {
			e.Records = append(e.Records, *e.Record)
		}
		if e.Session == "" || len(e.Records) == 0 {
			t.Fatalf("history seq %d: no session or no records: %s", seq, m.Data)
		}
		for _, r := range e.Records {
			out = append(out, histRecord{Session: e.Session, Record: r})
		}
	}
	return out
}

// waitAcked waits until every message sent was acked or answered.
func (d *device) waitAcked(timeout time.Duration) {
	d.t.Helper()
	d.waitUntil(timeout, "acked", func() bool {
		for _, id := range d.sentIDs {
			if !d.acked[id] {
				if _, ok := d.replies[id]; !ok {
					return false
				}
			}
		}
		return true
	})
}

// connected returns how many sessions reached connected so far.
func (d *device) connected() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.connects
}

// waitReconnected waits until a session after the first n reached
// connected.
func (d *device) waitReconnected(n int, timeout time.Duration) {
	d.t.Helper()
	d.waitUntil(timeout, "reconnected", func() bool { return d.connects > n })
}

func (d *device) waitUntil(timeout time.Duration, what string, ok func() bool) {
	d.t.Helper()
	deadline := time.After(timeout)
	for {
		d.mu.Lock()
		done := ok()
		ch := d.changed
		d.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			d.t.Fatalf("device %s: not %s after %v", d.peer, what, timeout)
		}
	}
}
