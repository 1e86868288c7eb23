package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/config"
)

// streamer is a scripted agent that streams: each run writes its chunks
// to Request.Stream (pause apart; every 100th chunk waits 20 ms more),
// then, when hold is set, waits on it (a cancel ends the wait) and
// answers with the chunks' concatenation. With gates, it waits on
// gates[i] before chunk i (a nil entry: no wait).
type streamer struct {
	chunks []string
	gates  []chan struct{}
	hold   chan struct{}
	// endless: after the chunks, it writes "." every 10 ms until the
	// run is cancelled.
	endless bool

	mu        sync.Mutex
	sawStream []bool
}

func (s *streamer) Run(ctx context.Context, req agent.Request, _ agent.Progress) agent.Result {
	s.mu.Lock()
	s.sawStream = append(s.sawStream, req.Stream != nil)
	s.mu.Unlock()
	write := func(c string) {
		if req.Stream != nil {
			req.Stream(c)
		}
	}
	var all strings.Builder
	for i, c := range s.chunks {
		if i < len(s.gates) && s.gates[i] != nil {
			select {
			case <-s.gates[i]:
			case <-ctx.Done():
				return agent.Result{Text: "cancelled", FinishReason: link.FinishCancelled}
			}
		}
		write(c)
		all.WriteString(c)
		if i%100 == 99 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if s.endless {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				write(".")
			case <-ctx.Done():
				return agent.Result{Text: "cancelled", FinishReason: link.FinishCancelled}
			}
		}
	}
	if s.hold != nil {
		select {
		case <-s.hold:
		case <-ctx.Done():
			return agent.Result{Text: "cancelled", FinishReason: link.FinishCancelled}
		}
	}
	return agent.Result{Text: all.String(), FinishReason: link.FinishStop}
}

func (s *streamer) Close() error { return nil }

// deltas reads a device's deltas of one message, checking seq runs from
// 1 without gaps and each delta has text.
type deltas struct {
	text  strings.Builder
	seq   int64
	count int
}

// take checks and adds one delta.
func (d *deltas) take(t *testing.T, f *link.Delta, id string) {
	t.Helper()
	if f.MessageID != id || f.Seq != d.seq+1 || f.Text == "" {
		t.Fatalf("delta %+v after seq %d, want message %s, seq %d, text", f, d.seq, id, d.seq+1)
	}
	d.seq = f.Seq
	d.count++
	d.text.WriteString(f.Text)
}

// until reads deltas of id until their text is want; any other frame
// fails the test.
func (d *deltas) until(c *client, id, want string) {
	c.t.Helper()
	for d.text.String() != want {
		f, ok := c.read().(*link.Delta)
		if !ok {
			c.t.Fatalf("got %+v while %q of %q was streamed", f, d.text.String(), want)
		}
		d.take(c.t, f, id)
		if !strings.HasPrefix(want, d.text.String()) {
			c.t.Fatalf("deltas add up to %q, not a prefix of %q", d.text.String(), want)
		}
	}
}

// final reads deltas until the final message of id and returns it.
func (d *deltas) final(c *client, id string) *link.Message {
	c.t.Helper()
	for {
		switch f := c.read().(type) {
		case *link.Delta:
			d.take(c.t, f, id)
		case *link.Message:
			if f.MessageID != id {
				c.t.Fatalf("reply %+v, want the reply of %s", f, id)
			}
			return f
		default:
			c.t.Fatalf("got %s frame %+v while streaming", f.FrameType(), f)
		}
	}
}

// startStreaming starts a server whose agent is run, connects a device
// with caps and sends it message m1, acked.
func startStreaming(t *testing.T, run *streamer, caps ...string) (*testServer, *client) {
	t.Helper()
	ts := startServer(t, nil, run)
	c := dial(t, ts.ws, nil)
	c.connect("dev", caps...)
	c.send(&link.Message{MessageID: "m1", Text: "go"})
	readAs[*link.Ack](c)
	return ts, c
}

// A run's text reaches a device that listed "stream" as it is written:
// partial text before the final, seq from 1 without gaps, and the final
// text equal to the deltas' concatenation.
func TestStreamedReplyEndToEnd(t *testing.T) {
	t.Parallel()
	run := &streamer{chunks: []string{"Once ", "upon ", "a ", "time"}, hold: make(chan struct{})}
	ts, c := startStreaming(t, run, link.CapText, link.CapStream)
	var d deltas
	d.until(c, "m1", "Once upon a time") // the run is held: all of it arrived before the final
	close(run.hold)
	m := d.final(c, "m1")
	if m.Text != d.text.String() || m.FinishReason != link.FinishStop {
		t.Fatalf("final %+v, want the deltas' text %q", m, d.text.String())
	}
	c.quiet()
	if n := ts.rt.Metrics.WS.Deltas.Value(config.DefaultChannelID); n != uint64(d.count) {
		t.Fatalf("termlink_deltas_sent_total %d, want %d", n, d.count)
	}
}

// An agent that writes 1,000 tiny chunks costs the device a few deltas.
func TestStreamFloodCoalescedEndToEnd(t *testing.T) {
	t.Parallel()
	chunks := make([]string, 1000)
	for i := range chunks {
		chunks[i] = string(rune('a' + i%26))
	}
	want := strings.Join(chunks, "")
	run := &streamer{chunks: chunks, hold: make(chan struct{})}
	start := time.Now()
	_, c := startStreaming(t, run, link.CapText, link.CapStream)
	var d deltas
	d.until(c, "m1", want)
	elapsed := time.Since(start)
	close(run.hold)
	if m := d.final(c, "m1"); m.Text != want {
		t.Fatalf("final %q", m.Text)
	}
	limit := int(elapsed/agent.StreamGap) + 2
	t.Logf("1000 chunks in %s: %d deltas (limit %d)", elapsed, d.count, limit)
	if d.count > limit {
		t.Fatalf("%d deltas for 1000 chunks in %s, want at most %d", d.count, elapsed, limit)
	}
}

// A device that reconnects mid-stream is sent one delta with all the
// text so far right behind connected (seq 1 on the new connection),
// then the rest.
func TestStreamReconnectMidRun(t *testing.T) {
	t.Parallel()
	second := make(chan struct{})
	run := &streamer{chunks: []string{"first half, ", "second half"}, gates: []chan struct{}{nil, second}, hold: make(chan struct{})}
	ts, c := startStreaming(t, run, link.CapText, link.CapStream)
	var d deltas
	d.until(c, "m1", "first half, ")
	c.ws.Close()

	c2 := dial(t, ts.ws, nil)
	c2.connect("dev", link.CapText, link.CapStream)
	var d2 deltas
	d2.until(c2, "m1", "first half, ")
	if d2.count != 1 {
		t.Fatalf("%d deltas on reconnect, want one with everything so far", d2.count)
	}
	close(second)
	d2.until(c2, "m1", "first half, second half")
	close(run.hold)
	if m := d2.final(c2, "m1"); m.Text != d2.text.String() {
		t.Fatalf("final %q, deltas %q", m.Text, d2.text.String())
	}
	c2.quiet()
}

// A device without "stream" sees exactly today's frames: its run gets
// no Stream, and no delta comes.
func TestNoStreamWithoutTheCapability(t *testing.T) {
	t.Parallel()
	run := &streamer{chunks: []string{"Hel", "lo"}}
	_, c := startStreaming(t, run, link.CapText, link.CapProgress)
	if m := readAs[*link.Message](c); m.Text != "Hello" {
		t.Fatalf("reply %+v", m)
	}
	c.quiet()
	run.mu.Lock()
	defer run.mu.Unlock()
	if len(run.sawStream) != 1 || run.sawStream[0] {
		t.Fatalf("runs saw a Stream: %v", run.sawStream)
	}
}

// Cancel mid-stream: the run ends with the cancelled final and no delta
// comes after it.
func TestStreamCancelledMidRun(t *testing.T) {
	t.Parallel()
	run := &streamer{chunks: []string{"going"}, endless: true}
	_, c := startStreaming(t, run, link.CapText, link.CapStream, link.CapCancel)
	var d deltas
	d.until(c, "m1", "going")
	c.send(&link.Cancel{MessageID: "m1"})
	m := d.final(c, "m1")
	if m.FinishReason != link.FinishCancelled {
		t.Fatalf("final %+v, want cancelled", m)
	}
	time.Sleep(3 * agent.StreamGap) // a delta still due would be written by now
	c.quiet()
}

// In a cluster, a run's deltas cross from the worker that runs it to the
// edge that holds the device (core NATS, as progress does), never ahead
// of the message's ack.
func TestClusterStreamReachesTheEdge(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	clusterCfg := func(role, name string) func(*config.Config) {
		return func(c *config.Config) {
			c.Cluster = config.Cluster{NATS: []string{url}, Role: role, Name: name, Partitions: 1, Replicas: 1,
				AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
		}
	}
	run := &streamer{chunks: []string{"from ", "the ", "worker"}, hold: make(chan struct{})}
	edge := startServer(t, clusterCfg(config.RoleEdge, "edge-1"), nil)
	worker := startServer(t, clusterCfg(config.RoleWorker, "worker-1"), run)
	if !waitUntil(t, "the worker owns the partition", func() bool { return clusterStore(worker).Node().Owns(0) }) {
		t.FailNow()
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	c := dial(t, edge.ws, nil)
	c.connect("dev", link.CapText, link.CapStream)
	c.send(&link.Message{MessageID: "m1", Text: "go"})
	// The worker may start before the edge writes the ack: a delta that
	// comes first waits for it, as the final does.
	if a := readAs[*link.Ack](c); a.MessageID != "m1" {
		t.Fatalf("ack %+v", a)
	}
	var d deltas
	d.until(c, "m1", "from the worker")
	close(run.hold)
	if m := d.final(c, "m1"); m.Text != "from the worker" {
		t.Fatalf("final %+v", m)
	}
}
