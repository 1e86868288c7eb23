package cluster

import (
	"context"
	"errors"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/internal/testwait"
	"termlink/server/cluster/natstest"
	"termlink/server/config"
)

// OpenReader (termserver export-sessions) waits for a JetStream that is
// not answering yet, as Open does, instead of failing with "no
// responders" (seen once in TestMoveEdgeMidConversation: "cluster:
// reading TERMLINK_HIST: nats: no responders"). Here the server starts
// without JetStream, which answers JetStream requests exactly so, and
// gets it while the reader waits, on a store that holds the history
// stream (made beforehand: a stream made once JetStream answers could
// come after the reader's next ask, which "stream not found" answers).
func TestOpenReaderWaitsForJetStream(t *testing.T) {
	t.Parallel()
	store := storeWithHist(t)
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
	testwait.Until(t, "the reader's first request", func() bool {
		select {
		case r := <-opened:
			t.Fatalf("OpenReader returned before JetStream was there: %v", r.err)
		default:
		}
		v, err := s.Varz(nil)
		return err == nil && v.InMsgs > 0
	})
	if err := s.EnableJetStream(&natsserver.JetStreamConfig{StoreDir: store}); err != nil {
		t.Fatal(err)
	}
	r := <-opened
	if r.err != nil {
		t.Fatalf("OpenReader: %v", r.err)
	}
	r.n.Close()

	// A stream that is not there is an answer: no waiting for it.
	js := jetStream(t, s.ClientURL())
	if err := js.DeleteStream(ctx, HistStream); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReader(ctx, cfg, nil); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("OpenReader without the stream: %v, want stream not found", err)
	}
}

func jetStream(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
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

// storeWithHist is a JetStream store directory holding the history
// stream: a server that enables JetStream on it has the stream at once.
func storeWithHist(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := natsserver.NewServer(&natsserver.Options{ServerName: "t1", Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if !s.ReadyForConnections(testwait.Deadline) {
		t.Fatal("nats-server not ready")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	if _, err := jetStream(t, s.ClientURL()).CreateStream(ctx, jetstream.StreamConfig{Name: HistStream, Subjects: []string{"termlink.hist.test.>"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}
