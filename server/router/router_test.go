package router

import (
	"context"
	"fmt"
	"testing"
	"time"

	"termlink/server/agent"
	"termlink/server/bus"
)

// host answers every run at once and reports each finished message.
type host struct{ finished chan string }

func (host) Start(context.Context, context.Context, bus.Inbound) (*agent.Result, bool) {
	return nil, true
}
func (host) Started(bus.Inbound)                 {}
func (host) Joined(context.Context, bus.Inbound) {}
func (h host) Finished(_ context.Context, in bus.Inbound, _ agent.Result, _ time.Duration, _ *bus.Inbound) {
	h.finished <- in.MessageID
}
func (host) Dropped(int)                                                    {}
func (host) Progress(context.Context, bus.Inbound, string)                  {}
func (host) Event(bus.Inbound, string, string)                              {}
func (host) UpdateMeta(context.Context, string, func(map[string]any)) error { return nil }
func (host) Pending(string, string) bool                                    { return false }

type echo struct{}

func (echo) Run(_ context.Context, req agent.Request, _ agent.Progress) agent.Result {
	return agent.Result{Text: req.Text}
}
func (echo) Close() error { return nil }

// A session whose queue empties after every message (one message at a
// time, as a device that waits for each reply sends them) gets its worker
// from the warm pool each time: a few goroutines in all, not one per
// message.
func TestSessionWorkersAreWarm(t *testing.T) {
	h := host{finished: make(chan string)}
	adm := NewAdmission(100)
	r := New(h, nil, adm, map[string]agent.Runner{"ch": echo{}}, t.TempDir(), 4)
	defer r.Stop(context.Background())
	const n = 200
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		if err := adm.Reserve("s", 10); err != nil {
			t.Fatal(err)
		}
		r.enqueue(bus.Inbound{ChannelID: "ch", SessionKey: "s", MessageID: id, Text: "hi"})
		if got := <-h.finished; got != id {
			t.Fatalf("finished %s, want %s", got, id)
		}
	}
	if s := r.workers.Started(); s > 10 {
		t.Fatalf("%d goroutines started for %d bursts of one session, want a few reused", s, n)
	}
}
