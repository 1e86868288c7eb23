package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/cluster/natstest"
	"termlink/server/config"
)

// OpenReader (termserver export-sessions) waits for a JetStream that is
// not answering yet, as Open does, instead of failing with "no
// responders" (seen once in TestMoveEdgeMidConversation: "cluster:
// reading TERMLINK_HIST: nats: no responders"). Here the server starts
// without JetStream, which answers JetStream requests exactly so, and
// gets it while the reader waits.
func TestOpenReaderWaitsForJetStream(t *testing.T) {
	s := natstest.Start(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), readerReadyWait)
	defer cancel()
	cfg := config.Cluster{NATS: []string{s.ClientURL()}, Name: "export"}

	type result struct {
		n   *Node
		err error
	}
	opened := make(chan result, 1)
	go func() {
		n, err := OpenReader(ctx, cfg, nil)
		opened <- result{n, err}
	}()

	// The reader has asked at least once (and got no responders) before
	// JetStream is there: the request count of the server says so.
	asked := func() bool {
		v, err := s.Varz(nil)
		return err == nil && v.InMsgs > 0
	}
	for !asked() {
		select {
		case r := <-opened:
			t.Fatalf("OpenReader returned before JetStream was there: %v", r.err)
		case <-ctx.Done():
			t.Fatal("the reader sent no request")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := s.EnableJetStream(&natsserver.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: HistStream, Subjects: []string{"termlink.hist.test.>"}}); err != nil {
		t.Fatal(err)
	}
	r := <-opened
	if r.err != nil {
		t.Fatalf("OpenReader: %v", r.err)
	}
	r.n.Close()

	// A stream that is not there is an answer: no waiting for it.
	if err := js.DeleteStream(ctx, HistStream); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReader(ctx, cfg, nil); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("OpenReader without the stream: %v, want stream not found", err)
	}
}
