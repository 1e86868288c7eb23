package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/events"
)

func openFeed(t *testing.T, n *Node, perChannel int) *EventFeed {
	t.Helper()
	f, err := n.OpenEventFeed(context.Background(), perChannel)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// waitEvents waits until view holds want events (or more).
func waitEvents(t *testing.T, v *EventView, want int) []events.Event {
	t.Helper()
	var got []events.Event
	testwait.UntilOK(t, fmt.Sprintf("the view to hold %d events", want), func() error {
		if got = v.Recent(-1); len(got) < want {
			return fmt.Errorf("%d events", len(got))
		}
		return nil
	})
	return got
}

// A channel's events recorded on one node are read on another, each
// naming the node that recorded it, in the order the stream stored them;
// another channel's are not; a subscriber on B sees A's new events live;
// Add on a view records in the node's own log.
func TestEventsAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a, b := openNode(t, url, "edge-a"), openNode(t, url, "worker-b")
	fa, fb := openFeed(t, a, 100), openFeed(t, b, 100)
	logA := events.NewLogWith(100, 0, func(e events.Event) { fa.Publish("terminal-dev", e) })
	otherA := events.NewLogWith(100, 0, func(e events.Event) { fa.Publish("other", e) })
	logB := events.NewLogWith(100, 0, func(e events.Event) { fb.Publish("terminal-dev", e) })
	viewB := fb.View("terminal-dev", logB)

	logA.Add(events.Event{Event: events.TerminalConnected, PeerID: "dev-1"})
	otherA.Add(events.Event{Event: "elsewhere", PeerID: "dev-9"})
	logB.Add(events.Event{Event: events.DirectRunFinished, PeerID: "dev-1"})
	got := waitEvents(t, viewB, 2)
	if len(got) != 2 {
		t.Fatalf("B's view of terminal-dev: %+v, want the 2 events of that channel", got)
	}
	nodes := map[string]string{}
	for _, e := range got {
		nodes[e.Event] = e.Node
	}
	if nodes[events.TerminalConnected] != "edge-a" || nodes[events.DirectRunFinished] != "worker-b" || nodes["elsewhere"] != "" {
		t.Fatalf("events by node %v, want terminal_connected from edge-a and direct_run_finished from worker-b only", nodes)
	}
	if own := logA.Recent(-1); len(own) != 1 || own[0].Node != "" {
		t.Fatalf("A's own log: %+v, want its one event (the node named only in the cluster's view)", own)
	}

	sub := viewB.Subscribe(16)
	defer sub.Close()
	logA.Add(events.Event{Event: events.InboundAccepted, PeerID: "dev-1", MessageID: "m-1"})
	select {
	case e := <-sub.C():
		if e.Event != events.InboundAccepted || e.Node != "edge-a" || e.MessageID != "m-1" {
			t.Fatalf("live event on B: %+v", e)
		}
	case <-time.After(testwait.Deadline):
		t.Fatalf("no live event on B within %s of A's", testwait.Deadline)
	}

	viewB.Add(events.Event{Event: "operator_cancel", PeerID: "dev-1"})
	if own := logB.Recent(-1); own[len(own)-1].Event != "operator_cancel" {
		t.Fatalf("Add on B's view did not reach B's own log: %+v", own)
	}
}

// The stream keeps a channel's newest perChannel events: a view opened
// later holds those, oldest first.
func TestEventsViewBounded(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openNode(t, url, "edge-a")
	fa := openFeed(t, a, 5)
	logA := events.NewLogWith(100, 0, func(e events.Event) { fa.Publish("terminal-dev", e) })
	for i := range 12 {
		logA.Add(events.Event{Event: "e", Detail: fmt.Sprint(i)})
	}
	b := openNode(t, url, "edge-b")
	fb := openFeed(t, b, 5)
	// Wait until all 12 are stored (the feed publishes in the background).
	var got []events.Event
	testwait.UntilOK(t, "a view opened later to hold the newest 5 (7..11)", func() error {
		got = fb.View("terminal-dev", events.NewLog(5)).Recent(-1)
		if len(got) != 5 || got[4].Detail != "11" {
			return fmt.Errorf("view %+v", got)
		}
		return nil
	})
	if got[0].Detail != "7" {
		t.Fatalf("view %+v, want events 7..11", got)
	}
}

// Events that wait while a publish is in flight go out together, one
// message per channel: a busy node costs JetStream far fewer writes than
// events, and every event is read on the other side, in order.
func TestEventsBatched(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a, b := openNode(t, url, "edge-a"), openNode(t, url, "worker-b")
	fa, fb := openFeed(t, a, 1000), openFeed(t, b, 1000)
	viewB := fb.View("terminal-dev", events.NewLog(1000))
	const n = 500
	for i := range n {
		fa.Publish("terminal-dev", events.Event{Event: events.TerminalConnected, PeerID: fmt.Sprintf("dev-%03d", i)})
	}
	got := waitEvents(t, viewB, n)
	if len(got) != n {
		t.Fatalf("read %d events on the other node, want %d", len(got), n)
	}
	for i, e := range got {
		if want := fmt.Sprintf("dev-%03d", i); e.PeerID != want || e.Node != "edge-a" {
			t.Fatalf("event %d: %s from %q, want %s from edge-a (in order)", i, e.PeerID, e.Node, want)
		}
	}
	s, err := a.js.Stream(context.Background(), EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs >= n/5 {
		t.Errorf("%d events took %d messages, want them batched (under %d)", n, info.State.Msgs, n/5)
	}
	if fa.Dropped() != 0 {
		t.Errorf("%d events dropped", fa.Dropped())
	}
}

// decodeEvents reads a batch, one event of the format before batches,
// and nothing from anything else.
func TestDecodeEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`{"events":[{"event":"a"},{"event":"b"}]}`, 2},
		{`{"events":[{"event":"a"},{"peer_id":"no event"}]}`, 1},
		{`{"event":"single"}`, 1},
		{`{"events":[]}`, 0},
		{`{"peer_id":"x"}`, 0},
		{`not json`, 0},
		{`[1,2]`, 0},
	} {
		if got := decodeEvents([]byte(tc.in)); len(got) != tc.want {
			t.Errorf("decodeEvents(%s) = %d events, want %d", tc.in, len(got), tc.want)
		}
	}
}

func FuzzDecodeEvents(f *testing.F) {
	f.Add([]byte(`{"events":[{"event":"a","peer_id":"p"}]}`))
	f.Add([]byte(`{"event":"single"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, e := range decodeEvents(data) {
			if e.Event == "" {
				t.Fatalf("an event without a name from %q", data)
			}
		}
	})
}

// A view mirrors nothing until it is read: a node whose events nobody
// reads decodes none (every node made one mirror per channel before, and
// decoded every node's events). Its first read waits until the mirror
// holds what the stream held.
func TestEventViewLazy(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a, b := openNode(t, url, "edge-a"), openNode(t, url, "worker-b")
	fa, fb := openFeed(t, a, 100), openFeed(t, b, 100)
	viewB := fb.View("terminal-dev", events.NewLog(100))
	for i := range 3 {
		fa.Publish("terminal-dev", events.Event{Event: events.TerminalConnected, PeerID: fmt.Sprintf("dev-%d", i)})
	}
	ctx := context.Background()
	s, err := b.js.Stream(ctx, EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	consumers := func() int {
		n := 0
		l := s.ConsumerNames(ctx)
		for range l.Name() {
			n++
		}
		return n
	}
	testwait.Until(t, "the events to reach the stream", func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs > 0
	})
	if n := consumers(); n != 0 {
		t.Errorf("%d consumers on the events stream before any read, want none", n)
	}
	if got := viewB.Recent(-1); len(got) != 3 {
		t.Errorf("the first read: %d events, want the 3 in the stream", len(got))
	}
	if n := consumers(); n != 1 {
		t.Errorf("%d consumers after a read, want the view's one", n)
	}
}
