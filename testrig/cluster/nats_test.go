package cluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/internal/testwait"
)

// publishN publishes n messages to subject through js, each acked by
// JetStream. While a stream elects a new leader (a node just left) a
// publish gets no response: it is retried, with the same message id.
func publishN(t *testing.T, js jetstream.JetStream, subject string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		testwait.UntilOK(t, fmt.Sprintf("message %d published", i), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := js.Publish(ctx, subject, []byte(strconv.Itoa(i)), jetstream.WithMsgID("m"+strconv.Itoa(i)))
			return err
		})
	}
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func connect(t *testing.T, urls string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// A 3-node cluster of nats-server processes keeps a replicated stream
// through a node killed with SIGKILL and one stopped with SIGTERM, each
// restarted on its ports and store.
func TestNATSProcessesKillStopRestart(t *testing.T) {
	heavy(t)
	c := StartNATSForTest(t, 3)
	js := connect(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 2*testwait.Deadline)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	publishN(t, js, "t.a", 0, 10)

	for _, n := range c.Nodes { // nats-server's /healthz: every stream replica current
		testwait.UntilOK(t, n.Name+" healthy", func() error { return n.Healthy(ctx) })
	}

	victim := c.Nodes[0]
	victim.Kill()
	if victim.Running() {
		t.Fatal("killed node still running")
	}
	if err := victim.Healthy(ctx); err == nil || !strings.Contains(err.Error(), "nats n1: healthz") {
		t.Errorf("killed node's health: %v, want an error naming n1's healthz", err)
	}
	publishN(t, js, "t.a", 10, 10) // 2 of 3 nodes: quorum
	if err := victim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.UntilOK(t, "restarted n1 healthy (caught up)", func() error { return victim.Healthy(ctx) })

	if err := c.Nodes[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	publishN(t, js, "t.a", 20, 10)
	if err := c.Nodes[1].Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// Through the restarted nodes alone.
	for _, n := range c.Nodes[:2] {
		if got := streamMsgs(t, connect(t, n.URL()), "T"); got != 30 {
			t.Errorf("through %s: stream has %d messages, want 30", n.Name, got)
		}
	}
}

// In-process nodes (the library, as termrig cluster runs them) form a
// cluster too: they listen on loopback ports, since DontListen forms no
// routes. Close frees every port.
func TestNATSEmbedded(t *testing.T) {
	heavy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testwait.Deadline)
	defer cancel()
	c, err := StartNATS(ctx, NATSOptions{Nodes: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = c.Close(context.Background())
		}
	})
	js := connect(t, c.Nodes[2].URL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "E", Subjects: []string{"e.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	publishN(t, js, "e.x", 0, 5)
	if got := streamMsgs(t, connect(t, c.Nodes[0].URL()), "E"); got != 5 {
		t.Errorf("stream has %d messages, want 5", got)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	for _, n := range c.Nodes {
		for _, p := range []int{n.ClientPort, n.ClusterPort, n.MonitorPort} {
			if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second); err == nil {
				conn.Close()
				t.Errorf("%s: port %d still open after Close", n.Name, p)
			}
		}
	}
}

// A node that does not come up is named in the error, with its log.
func TestNATSNodeThatFailsIsNamed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	// A "binary" that prints a line and exits.
	bin := dir + "/fake-nats"
	if err := writeScript(bin, "echo 'fake: cannot start' >&2; exit 1"); err != nil {
		t.Fatal(err)
	}
	_, err := StartNATS(ctx, NATSOptions{Nodes: 2, Dir: dir, Binary: bin})
	if err == nil {
		t.Fatal("a cluster of failing nodes started")
	}
	for _, want := range []string{"nats n1", "exited", "fake: cannot start"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
