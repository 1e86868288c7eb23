package jepsen

import (
	"strings"
	"testing"
	"time"
)

// hb builds synthetic histories: times in ms.
type hb struct{ h History }

func ms(t int) int64 { return int64(t) * int64(time.Millisecond) }

func (b *hb) send(t int, dev, id string, seq int) *hb {
	b.h = append(b.h, Event{Kind: KindSend, Time: ms(t), Device: dev, Message: id, Seq: seq, Text: dev + "-" + id})
	return b
}
func (b *hb) ack(t int, dev, id string) *hb {
	b.h = append(b.h, Event{Kind: KindAck, Time: ms(t), Device: dev, Message: id})
	return b
}
func (b *hb) run(t int, dev, id, node string) *hb {
	b.h = append(b.h, Event{Kind: KindRunStart, Time: ms(t), Device: dev, Message: id, Node: node},
		Event{Kind: KindRunEnd, Time: ms(t + 300), Device: dev, Message: id, Node: node})
	return b
}
func (b *hb) inter(t int, dev, id string) *hb {
	b.h = append(b.h, Event{Kind: KindInterrupted, Time: ms(t), Device: dev, Message: id})
	return b
}
func (b *hb) reply(t int, dev, id, text string) *hb {
	b.h = append(b.h, Event{Kind: KindReply, Time: ms(t), Device: dev, Message: id, Text: text})
	return b
}
func (b *hb) errReply(t int, dev, id string) *hb {
	b.h = append(b.h, Event{Kind: KindReply, Time: ms(t), Device: dev, Message: id, Err: "run interrupted twice"})
	return b
}

// finishErr appends a reply whose finish_reason is error, as the
// runner records it.
func (b *hb) finishErr(t int, dev, id, text string) *hb {
	b.h = append(b.h, Event{Kind: KindReply, Time: ms(t), Device: dev, Message: id, Text: text, Err: "finish_reason error: " + text})
	return b
}
func (b *hb) fault(start, end int, f, node string) *hb {
	b.h = append(b.h, Event{Kind: KindFaultStart, Time: ms(start), Fault: f, Node: node},
		Event{Kind: KindFaultEnd, Time: ms(end), Fault: f, Node: node})
	return b
}

// ok appends a message sent, acked, run and answered well.
func (b *hb) ok(t int, dev, id string, seq int) *hb {
	return b.send(t, dev, id, seq).ack(t+10, dev, id).run(t+50, dev, id, "worker-1").reply(t+400, dev, id, "You said: "+dev+"-"+id)
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *hb
		want map[ViolationKind]int
		in   string // a detail the violation's text holds
	}{
		{name: "clean", h: new(hb).ok(0, "d1", "a", 1).ok(100, "d1", "b", 2).ok(0, "d2", "a", 1)},
		{name: "lost: acked, never answered", h: new(hb).send(0, "d1", "a", 1).ack(10, "d1", "a").run(20, "d1", "a", "worker-1"),
			want: map[ViolationKind]int{Lost: 1}, in: "ran 1 times"},
		{name: "lost: acked, never ran", h: new(hb).send(0, "d1", "a", 1).ack(10, "d1", "a"),
			want: map[ViolationKind]int{Lost: 1}, in: "never ran"},
		{name: "not lost: never acked, never answered", h: new(hb).send(0, "d1", "a", 1)},
		{name: "not lost: answered without an ack seen", h: new(hb).send(0, "d1", "a", 1).run(20, "d1", "a", "w").reply(400, "d1", "a", "You said: d1-a")},
		{name: "not lost: answered with an error", h: new(hb).send(0, "d1", "a", 1).ack(10, "d1", "a").errReply(400, "d1", "a")},
		{name: "given up after interruptions (finish_reason error)",
			h: new(hb).send(0, "d1", "a", 1).ack(10, "d1", "a").run(50, "d1", "a", "worker-1").inter(3000, "d1", "a").
				finishErr(3010, "d1", "a", "interrupted twice by a worker failure; not run again - send it again")},
		{name: "bad reply: given up with no interruption recorded",
			h: new(hb).send(0, "d1", "a", 1).ack(10, "d1", "a").run(50, "d1", "a", "worker-1").
				finishErr(3010, "d1", "a", "interrupted twice by a worker failure; not run again - send it again"),
			want: map[ViolationKind]int{BadReply: 1}, in: "no run_interrupted recorded"},
		{name: "run twice without interruption",
			h:    new(hb).ok(0, "d1", "a", 1).run(5000, "d1", "a", "worker-2"),
			want: map[ViolationKind]int{RunTwice: 1}, in: "worker-1, worker-2"},
		{name: "run twice with interruption", h: new(hb).ok(0, "d1", "a", 1).run(5000, "d1", "a", "worker-2").inter(4900, "d1", "a")},
		{name: "run three times with interruption",
			h:    new(hb).ok(0, "d1", "a", 1).run(5000, "d1", "a", "worker-2").run(9000, "d1", "a", "worker-1").inter(4900, "d1", "a"),
			want: map[ViolationKind]int{RunTwice: 1}, in: "ran 3 times"},
		{name: "order: accepted first, ran after a later one",
			h: new(hb).send(0, "d1", "a", 1).send(1, "d1", "b", 2).ack(10, "d1", "a").ack(11, "d1", "b").
				run(500, "d1", "b", "w").run(900, "d1", "a", "w").reply(1300, "d1", "a", "You said: d1-a").reply(1301, "d1", "b", "You said: d1-b"),
			want: map[ViolationKind]int{Order: 1}, in: "after message b (seq 2)"},
		{name: "order is by acceptance, not by send",
			h: new(hb).send(0, "d1", "a", 1).send(1, "d1", "b", 2).ack(20, "d1", "a").ack(10, "d1", "b").
				run(500, "d1", "b", "w").run(900, "d1", "a", "w").reply(1300, "d1", "a", "You said: d1-a").reply(1301, "d1", "b", "You said: d1-b")},
		{name: "order is by first run: a re-run after a later message is fine",
			h: new(hb).ok(0, "d1", "a", 1).ok(100, "d1", "b", 2).run(2000, "d1", "a", "worker-2").inter(1900, "d1", "a")},
		{name: "order is per session",
			h: new(hb).send(0, "d1", "a", 1).ack(10, "d1", "a").send(1, "d2", "a", 1).ack(11, "d2", "a").
				run(900, "d1", "a", "w").run(500, "d2", "a", "w").reply(1300, "d1", "a", "You said: d1-a").reply(1301, "d2", "a", "You said: d2-a")},
		{name: "bad reply: another message's answer",
			h:    new(hb).send(0, "d1", "a", 1).ack(10, "d1", "a").run(50, "d1", "a", "w").reply(400, "d1", "a", "You said: d1-b"),
			want: map[ViolationKind]int{BadReply: 1}, in: `does not answer "d1-a"`},
		{name: "bad reply: a message never sent",
			h:    new(hb).ok(0, "d1", "a", 1).reply(400, "d1", "zz", "You said: d1-zz"),
			want: map[ViolationKind]int{BadReply: 1}, in: "never sent"},
		{name: "phantom run", h: new(hb).ok(0, "d1", "a", 1).run(400, "d1", "zz", "worker-2"),
			want: map[ViolationKind]int{PhantomRun: 1}, in: "worker-2"},
		{name: "everything at once",
			h: new(hb).send(0, "d1", "a", 1).send(1, "d1", "b", 2).ack(10, "d1", "a").ack(11, "d1", "b").
				run(500, "d1", "b", "w").run(900, "d1", "a", "w").run(1900, "d1", "a", "w2").reply(1301, "d1", "b", "nope"),
			want: map[ViolationKind]int{Lost: 1, RunTwice: 1, Order: 1, BadReply: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.h.h, Options{})
			for _, k := range ViolationKinds {
				if got := r.Count(k); got != tc.want[k] {
					t.Errorf("%s: %d violations, want %d; report: %s; violations: %v", k, got, tc.want[k], r.Line(), r.Violations)
				}
			}
			if tc.in != "" {
				found := false
				for _, v := range r.Violations {
					found = found || strings.Contains(v.String(), tc.in)
				}
				if !found {
					t.Errorf("no violation says %q: %v", tc.in, r.Violations)
				}
			}
		})
	}
}

func TestCheckCounts(t *testing.T) {
	h := new(hb).ok(0, "d1", "a", 1).send(10, "d1", "b", 2).send(20, "d1", "c", 3).ack(30, "d1", "c").
		run(40, "d1", "c", "w").inter(50, "d1", "c").run(2000, "d1", "c", "w2").errReply(2500, "d1", "c").
		reply(2600, "d1", "c", "dup").h
	r := Check(h, Options{})
	if r.Messages != 3 || r.Acked != 2 || r.Unacked != 1 || r.Answered != 2 || r.ErrorReplies != 1 || r.DupReplies != 1 || r.Runs != 3 || r.Reruns != 1 {
		t.Errorf("counts: %s", r.Line())
	}
	// The second final answer ("dup") does not answer "d1-c".
	if r.Count(BadReply) != 1 {
		t.Errorf("bad replies: %v", r.Violations)
	}
}

func TestCheckLatencyWindows(t *testing.T) {
	b := new(hb).
		fault(1000, 3000, FaultKillNATS, "n1").
		fault(2000, 5000, FaultPause, "worker-1").
		fault(8000, 9000, FaultKillEdge, "edge-1").
		fault(10000, 12000, FaultPartition, "n2").
		fault(11000, 13000, FaultDiskFull, "n3")
	b.send(1, "d", "out", 1).ack(1, "d", "out").run(101, "d", "out", "w").reply(500, "d", "out", "You said: d-out")
	b.send(1500, "d", "nats", 2).ack(1500, "d", "nats").run(2500, "d", "nats", "w").reply(2900, "d", "nats", "You said: d-nats")
	b.send(2500, "d", "both", 3).ack(2500, "d", "both").run(6500, "d", "both", "w").reply(6900, "d", "both", "You said: d-both")
	b.send(5400, "d", "grace", 4).ack(5400, "d", "grace").run(6600, "d", "grace", "w").reply(6950, "d", "grace", "You said: d-grace")
	// Ran before the device saw its ack: latency 0.
	b.send(8500, "d", "early", 5).run(8600, "d", "early", "w").ack(8700, "d", "early").reply(9000, "d", "early", "You said: d-early")
	b.send(10500, "d", "cut", 6).ack(10500, "d", "cut").run(10800, "d", "cut", "w").reply(11000, "d", "cut", "You said: d-cut")
	b.send(12500, "d", "full", 7).ack(12500, "d", "full").run(14500, "d", "full", "w").reply(14600, "d", "full", "You said: d-full")
	r := Check(b.h, Options{})
	want := map[string][]time.Duration{
		Outside:        {100 * time.Millisecond, 1200 * time.Millisecond},
		FaultKillNATS:  {time.Second, 4 * time.Second},
		FaultPause:     {4 * time.Second},
		FaultKillEdge:  {0},
		FaultPartition: {300 * time.Millisecond},
		FaultDiskFull:  {2 * time.Second},
	}
	for _, w := range Windows {
		if got := r.Latency[w]; !equalDurations(got, want[w]) {
			t.Errorf("window %s: %v, want %v", w, got, want[w])
		}
	}
	if n := len(r.Violations); n != 0 {
		t.Errorf("violations: %v", r.Violations)
	}
	r = Check(b.h, Options{StallLimit: 3 * time.Second})
	if len(r.Stalled) != 1 || r.Stalled[0] != "d 4s" {
		t.Errorf("stalled with a 3 s limit: %v", r.Stalled)
	}
	if r = Check(b.h, Options{StallLimit: 4 * time.Second}); len(r.Stalled) != 0 {
		t.Errorf("stalled with a 4 s limit: %v", r.Stalled)
	}
	// With a grace of 500 ms, "grace" (accepted 400 ms after the pause
	// ended) counts inside the pause.
	r = Check(b.h, Options{Grace: 500 * time.Millisecond})
	if got := r.Latency[FaultPause]; !equalDurations(got, []time.Duration{4 * time.Second, 1200 * time.Millisecond}) {
		t.Errorf("pause window with grace: %v", got)
	}
	// A fault never healed lasts to the end of the history.
	r = Check(History{{Kind: KindFaultStart, Time: 1, Fault: FaultKillWorker, Node: "worker-2", Note: "beyond what JetStream promises"},
		{Kind: KindSend, Time: 2, Device: "d", Message: "m", Seq: 1, Text: "x"}, {Kind: KindAck, Time: 3, Device: "d", Message: "m"},
		{Kind: KindRunStart, Time: 5, Device: "d", Message: "m", Node: "w"}, {Kind: KindReply, Time: 6, Device: "d", Message: "m", Text: "You said: x"}}, Options{})
	if got := r.Latency[FaultKillWorker]; !equalDurations(got, []time.Duration{2}) || len(r.BeyondPromise) != 1 {
		t.Errorf("unhealed fault: %v %v", got, r.BeyondPromise)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(ds)
	if s.N != 100 || s.P50 != 50*time.Millisecond || s.P99 != 99*time.Millisecond || s.Max != 100*time.Millisecond {
		t.Errorf("Summarize: %+v", s)
	}
	if s := Summarize(nil); s.N != 0 || s.String() != "-" {
		t.Errorf("empty: %+v", s)
	}
	if s := Summarize([]time.Duration{7}); s.P50 != 7 || s.P99 != 7 || s.Max != 7 {
		t.Errorf("one: %+v", s)
	}
}

// Ready times count from when a message could run (acked, and its
// session's earlier messages done), not from its ack: a session's queue
// of its own is not a stall.
func TestCheckReadyTimes(t *testing.T) {
	b := new(hb)
	for i, id := range []string{"a", "b", "c"} {
		b.send(0, "q", id, i+1).ack(0, "q", id)
	}
	// Each run takes 300 ms: a from 100, b as soon as a ended, c 2 s after b.
	b.run(100, "q", "a", "w").run(400, "q", "b", "w").run(2700, "q", "c", "w")
	for _, id := range []string{"a", "b", "c"} {
		b.reply(3000, "q", id, "You said: q-"+id)
	}
	r := Check(b.h, Options{StallLimit: time.Second})
	if got, want := r.Latency[Outside], []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, 2700 * time.Millisecond}; !equalDurations(got, want) {
		t.Errorf("accept to first run: %v, want %v", got, want)
	}
	if got, want := r.Ready[Outside], []time.Duration{100 * time.Millisecond, 0, 2 * time.Second}; !equalDurations(got, want) {
		t.Errorf("ready to first run: %v, want %v", got, want)
	}
	if len(r.Stalled) != 1 || r.Stalled[0] != "q 2.7s" || len(r.StalledReady) != 1 || r.StalledReady[0] != "q 2s" {
		t.Errorf("stalled past 1 s: %v (from the ack), %v (from ready)", r.Stalled, r.StalledReady)
	}
}
