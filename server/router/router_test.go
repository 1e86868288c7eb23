package router

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"

	"termlink/internal/testwait"
)

// gatedRunner answers each message with its text once its gate opens.
type gatedRunner struct {
	mu      sync.Mutex
	gates   map[string]chan struct{}
	started chan string
}

func newGatedRunner() *gatedRunner {
	return &gatedRunner{gates: map[string]chan struct{}{}, started: make(chan string, 16)}
}

func (g *gatedRunner) gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.gates[id]
	if c == nil {
		c = make(chan struct{})
		g.gates[id] = c
	}
	return c
}

func (g *gatedRunner) Run(ctx context.Context, req agent.Request, _ agent.Progress) agent.Result {
	g.started <- req.MessageID
	select {
	case <-g.gate(req.MessageID):
		return agent.Result{Text: req.Text, FinishReason: "stop"}
	case <-ctx.Done():
		return agent.Result{Text: "cancelled", FinishReason: "cancelled"}
	}
}

func (g *gatedRunner) Close() error { return nil }

type finished struct {
	id, next string
}

// recordingHost records what the router asks of the runtime.
type recordingHost struct {
	mu       sync.Mutex
	finished []finished
	done     chan string
}

func (h *recordingHost) Start(_, _ context.Context, _ bus.Inbound) (*agent.Result, bool) {
	return nil, true
}
func (h *recordingHost) Started(bus.Inbound)                                  {}
func (h *recordingHost) Joined(context.Context, bus.Inbound)                  {}
func (h *recordingHost) Dropped(int)                                          {}
func (h *recordingHost) Progress(context.Context, bus.Inbound, string)        {}
func (h *recordingHost) Delta(context.Context, bus.Inbound, string)           {}
func (h *recordingHost) Question(context.Context, bus.Inbound, link.Question) {}
func (h *recordingHost) QuestionClosed(context.Context, bus.Inbound, string)  {}
func (h *recordingHost) Event(bus.Inbound, string, string)                    {}
func (h *recordingHost) UpdateMeta(context.Context, string, func(map[string]any)) error {
	return nil
}
func (h *recordingHost) Pending(string, string) bool { return false }
func (h *recordingHost) Finished(_ context.Context, in bus.Inbound, _ agent.Result, _ time.Duration, next *bus.Inbound) {
	f := finished{id: in.MessageID}
	if next != nil {
		f.next = next.MessageID
	}
	h.mu.Lock()
	h.finished = append(h.finished, f)
	h.mu.Unlock()
	h.done <- in.MessageID
}

func put(t *testing.T, r *Router, a *Admission, session, id string) {
	t.Helper()
	if err := a.Reserve(session, 64); err != nil {
		t.Fatal(err)
	}
	r.Put(bus.Inbound{ChannelID: "c", SessionKey: session, PeerID: session, MessageID: id, Text: id})
}

func expect(t *testing.T, ch chan string, want string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	case <-time.After(testwait.Deadline):
		t.Fatalf("timed out waiting for %s", want)
	}
}

// waitTaken waits until session key's worker has taken message id.
func waitTaken(t *testing.T, r *Router, key, id string) {
	t.Helper()
	testwait.Until(t, id+" taken by its session's worker", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		q := r.queues[key]
		return q != nil && q.running == id
	})
}

// nextWithoutASlot runs a router with one run slot to the point where
// a1 (session A) has finished with a2 waiting behind it, while b1
// (session B), queued for the slot, took the slot a1 gave back: a2 was
// taken as a1's next without a slot and waits for one.
func nextWithoutASlot(t *testing.T) (*gatedRunner, *recordingHost, *Admission, *Router) {
	t.Helper()
	runner := newGatedRunner()
	host := &recordingHost{done: make(chan string, 16)}
	adm := NewAdmission(100)
	r := New(host, adm, map[string]agent.Runner{"c": runner}, t.TempDir(), 1)
	t.Cleanup(func() { r.Stop(context.Background()) })
	put(t, r, adm, "A", "a1")
	expect(t, runner.started, "a1")
	put(t, r, adm, "A", "a2")  // waits behind a1 in its session
	put(t, r, adm, "B", "b1")  // waits for the one slot
	waitTaken(t, r, "B", "b1") // its worker is blocked on the slot
	close(runner.gate("a1"))
	expect(t, host.done, "a1")
	expect(t, runner.started, "b1")
	return runner, host, adm, r
}

// A busy session's next message is handed to Finished with the reply
// before it (so its start is recorded in the same log append) also when
// every run slot is taken at that moment: it then waits for a slot with
// its start recorded. Before, it was recorded with the reply only when a
// slot happened to be free, and at saturation each start was a log
// append of its own.
func TestNextStartRecordedWithTheReplyWhenEverySlotIsBusy(t *testing.T) {
	runner, host, adm, _ := nextWithoutASlot(t)
	close(runner.gate("b1"))
	expect(t, host.done, "b1")
	expect(t, runner.started, "a2")
	close(runner.gate("a2"))
	expect(t, host.done, "a2")

	host.mu.Lock()
	defer host.mu.Unlock()
	want := map[string]string{"a1": "a2", "b1": "", "a2": ""}
	for _, f := range host.finished {
		if want[f.id] != f.next {
			t.Errorf("Finished(%s) with next %q, want %q (all: %+v)", f.id, f.next, want[f.id], host.finished)
		}
	}
	if n := adm.Waiting(); n != 0 {
		t.Errorf("%d places still held after every message ran", n)
	}
}

// A next message taken without a slot and cancelled while it waits for
// one is answered cancelled, without running.
func TestNextWaitingForASlotCancelled(t *testing.T) {
	runner, host, _, r := nextWithoutASlot(t)
	if !r.Cancel("A", "a2") {
		t.Fatal("a2, waiting for a slot, not found by Cancel")
	}
	expect(t, host.done, "a2") // answered cancelled before it started
	close(runner.gate("b1"))
	expect(t, host.done, "b1")
	select {
	case id := <-runner.started:
		t.Fatalf("%s ran after it was cancelled", id)
	default:
	}
}

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
func (host) Delta(context.Context, bus.Inbound, string)                     {}
func (host) Question(context.Context, bus.Inbound, link.Question)           {}
func (host) QuestionClosed(context.Context, bus.Inbound, string)            {}
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
	r := New(h, adm, map[string]agent.Runner{"ch": echo{}}, t.TempDir(), 4)
	defer r.Stop(context.Background())
	const n = 200
	for i := range n {
		id := fmt.Sprintf("m-%d", i)
		if err := adm.Reserve("s", 10); err != nil {
			t.Fatal(err)
		}
		r.Put(bus.Inbound{ChannelID: "ch", SessionKey: "s", MessageID: id, Text: "hi"})
		if got := <-h.finished; got != id {
			t.Fatalf("finished %s, want %s", got, id)
		}
	}
	if s := r.goroutines.Started(); s > 10 {
		t.Fatalf("%d goroutines started for %d bursts of one session, want a few reused", s, n)
	}
}

// joiner is a runner that takes messages into its running turn.
type joiner struct{ echo }

func (joiner) Inject(context.Context, agent.Request) bool { return false }

// Joins tells the store of record which channels' runners can start a
// session's next message before the one ahead is answered.
func TestJoins(t *testing.T) {
	r := New(host{finished: make(chan string)}, NewAdmission(10), map[string]agent.Runner{"plain": echo{}, "joins": joiner{}}, t.TempDir(), 1)
	defer r.Stop(context.Background())
	if r.Joins("plain") || !r.Joins("joins") || r.Joins("none") {
		t.Errorf("Joins: plain %v joins %v none %v, want false true false", r.Joins("plain"), r.Joins("joins"), r.Joins("none"))
	}
}
