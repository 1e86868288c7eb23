package router

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
)

// streamHost logs the deltas and replies of runs, in the order they
// come.
type streamHost struct {
	host
	mu  sync.Mutex
	log []string // "delta <id> <text>" and "final <id>"
	got chan string
}

func (h *streamHost) Delta(_ context.Context, in bus.Inbound, text string) {
	h.add("delta " + in.MessageID + " " + text)
}

func (h *streamHost) Finished(_ context.Context, in bus.Inbound, _ agent.Result, _ time.Duration, _ *bus.Inbound) {
	h.add("final " + in.MessageID)
}

func (h *streamHost) add(s string) {
	h.mu.Lock()
	h.log = append(h.log, s)
	h.mu.Unlock()
	h.got <- s
}

func (h *streamHost) entries() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.log...)
}

// streamRunner writes "a", waits until the host passed it on, writes "b"
// (pending: within the gap) and returns at once.
type streamRunner struct {
	sawStream chan bool
	passed    chan struct{}
}

func (s streamRunner) Run(_ context.Context, req agent.Request, _ agent.Progress) agent.Result {
	s.sawStream <- req.Stream != nil
	if req.Stream == nil {
		return agent.Result{Text: "ab"}
	}
	req.Stream("a")
	<-s.passed
	req.Stream("b")
	return agent.Result{Text: "ab"}
}
func (streamRunner) Close() error { return nil }

// A device that listed "stream" gets its run's text through Host.Delta;
// the stream is closed when the run returns, so what was pending is
// dropped and no delta follows the reply. One that did not gets a nil
// Stream.
func TestRunStreamsToHostDelta(t *testing.T) {
	t.Parallel()
	// In a synctest bubble: the stream's gap passes in fake time, and
	// "nothing after the reply" is exact (every timer has fired and run).
	synctest.Test(t, func(t *testing.T) {
		h := &streamHost{host: host{}, got: make(chan string, 16)}
		adm := NewAdmission(100)
		run := streamRunner{sawStream: make(chan bool, 2), passed: make(chan struct{})}
		r := New(h, adm, map[string]agent.Runner{"ch": run}, t.TempDir(), 4)
		defer r.Stop(context.Background())

		if err := adm.Reserve("s", 10); err != nil {
			t.Fatal(err)
		}
		r.Put(bus.Inbound{ChannelID: "ch", SessionKey: "s", MessageID: "m1", Text: "hi", Capabilities: []string{link.CapText, link.CapStream}})
		if !<-run.sawStream {
			t.Fatal(`a device that listed "stream": Request.Stream is nil`)
		}
		if got := <-h.got; got != "delta m1 a" {
			t.Fatalf("first %q, want delta m1 a", got)
		}
		close(run.passed)
		if got := <-h.got; got != "final m1" {
			t.Fatalf("after the run %q, want final m1 (the pending b dropped)", got)
		}
		time.Sleep(3 * agent.StreamGap) // a delta still due would be due by now
		synctest.Wait()                 // and passed
		if got := h.entries(); strings.Join(got, "|") != "delta m1 a|final m1" {
			t.Fatalf("host saw %q, want a delta and then the reply, nothing after it", got)
		}

		if err := adm.Reserve("s", 10); err != nil {
			t.Fatal(err)
		}
		r.Put(bus.Inbound{ChannelID: "ch", SessionKey: "s", MessageID: "m2", Text: "hi", Capabilities: []string{link.CapText, link.CapProgress}})
		if <-run.sawStream {
			t.Fatal(`a device that did not list "stream": Request.Stream is set`)
		}
		if got := <-h.got; got != "final m2" {
			t.Fatalf("%q, want final m2 and no delta", got)
		}
	})
}
