package router

import (
	"context"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
)

// echoRunner answers at once with a fixed result.
type echoRunner struct{}

func (echoRunner) Run(context.Context, agent.Request, agent.Progress) agent.Result {
	return agent.Result{Text: "ok", FinishReason: "stop"}
}
func (echoRunner) Close() error { return nil }

// doneHost signals each finished message, allocating nothing.
type doneHost struct{ done chan struct{} }

func (h doneHost) Start(_, _ context.Context, _ bus.Inbound) (*agent.Result, bool) { return nil, true }
func (doneHost) Started(bus.Inbound)                                               {}
func (doneHost) Joined(context.Context, bus.Inbound)                               {}
func (doneHost) Dropped(int)                                                       {}
func (doneHost) Progress(context.Context, bus.Inbound, string)                     {}
func (doneHost) Delta(context.Context, bus.Inbound, string)                        {}
func (doneHost) Question(context.Context, bus.Inbound, link.Question)              {}
func (doneHost) QuestionClosed(context.Context, bus.Inbound, string)               {}
func (doneHost) Event(bus.Inbound, string, string)                                 {}
func (doneHost) UpdateMeta(context.Context, string, func(map[string]any)) error    { return nil }
func (doneHost) Pending(string, string) bool                                       { return false }
func (h doneHost) Finished(context.Context, bus.Inbound, agent.Result, time.Duration, *bus.Inbound) {
	h.done <- struct{}{}
}

// The allocations of the router's own path per message (Put, the
// session's worker, the run's request and context, Finished), for a
// session with one message at a time (its queue made and dropped each
// time) and for a session with three waiting (each taken as the next of
// the one before). Were the message copied to the heap on every Put, the
// queue and its waiting slice made anew for every message, or the next
// message allocated at every reply, the counts would be higher (12 and
// 10.7 on the code before they were not).
func TestRouterAllocsPerMessage(t *testing.T) {
	host := doneHost{done: make(chan struct{}, 16)}
	adm := NewAdmission(100)
	r := New(host, adm, map[string]agent.Runner{"c": echoRunner{}}, t.TempDir(), 8)
	defer r.Stop(context.Background())
	in := bus.Inbound{ChannelID: "c", SessionKey: "c:local:p", PeerID: "p", MessageID: "m", Text: "hi"}
	one := func() {
		if err := adm.Reserve(in.SessionKey, 64); err != nil {
			t.Fatal(err)
		}
		r.Put(in)
		<-host.done
	}
	three := func() {
		r.mu.Lock() // the three are queued before the worker takes the first
		for range 3 {
			if err := adm.Reserve(in.SessionKey, 64); err != nil {
				t.Fatal(err)
			}
			r.putLocked(in)
		}
		r.mu.Unlock()
		for range 3 {
			<-host.done
		}
	}
	for range 20 { // warm goroutines, spare queues
		one()
		three()
	}
	// Left per message: the run's copy of the message and its three
	// callbacks (progress, UpdateMeta, Event), its context and cancel.
	if a := testing.AllocsPerRun(200, one); a > 6 {
		t.Errorf("%.1f allocations for a message of an idle session, want at most 6", a)
	}
	if a := testing.AllocsPerRun(200, three) / 3; a > 6 {
		t.Errorf("%.1f allocations per message of a busy session, want at most 6", a)
	}
}
