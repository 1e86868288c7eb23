package jepsen

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// ViolationKind names a broken promise.
type ViolationKind string

// What the checker reports.
const (
	// Lost: a message the cluster acked (stored) never got its final
	// answer.
	Lost ViolationKind = "lost"
	// RunTwice: a message the agent ran twice without a run_interrupted
	// record for it in the cluster's history, or more than twice.
	RunTwice ViolationKind = "run_twice"
	// Order: a message whose first run started after the first run of a
	// message of its session accepted (acked) after it.
	Order ViolationKind = "order"
	// BadReply: a reply that does not answer its message (its text is not
	// the answer to the message's text), or a reply to a message the
	// device never sent.
	BadReply ViolationKind = "bad_reply"
	// PhantomRun: the agent ran a message no device sent.
	PhantomRun ViolationKind = "phantom_run"
)

// ViolationKinds lists the kinds in the order reports print them.
var ViolationKinds = []ViolationKind{Lost, RunTwice, Order, BadReply, PhantomRun}

// Violation is one broken promise, about one message.
type Violation struct {
	Kind    ViolationKind
	Device  string
	Message string
	Seq     int
	Detail  string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: device %s message %s (seq %d): %s", v.Kind, v.Device, v.Message, v.Seq, v.Detail)
}

// Outside is the latency window of messages accepted outside every fault.
const Outside = "outside"

// Windows lists the latency windows in the order reports print them:
// outside the faults, then inside each fault kind.
var Windows = []string{Outside, FaultKillNATS, FaultKillEdge, FaultKillWorker, FaultPause, FaultPartition, FaultDiskFull}

// Options tune Check.
type Options struct {
	// Answer is the reply the agent gives to a message's text (default:
	// "You said: " + text, the recording agent's).
	Answer func(text string) string
	// Grace extends each fault's window past its end (fault_end): a
	// message accepted within Grace after a node came back still counts
	// as accepted inside the fault.
	Grace time.Duration
	// StallLimit, when set, is the longest a session (a device) may wait
	// from a message's accept to its first run (the bound: two
	// leases); Report.Stalled lists the sessions that waited longer.
	StallLimit time.Duration
}

// Report is what Check found in one history.
type Report struct {
	Messages     int // sent
	Acked        int // acked at least once
	Unacked      int // never acked nor answered (still in the device's outbox: no promise yet)
	Answered     int // got a final answer
	ErrorReplies int // final answers that are errors (a run refused a third time, ...)
	DupReplies   int // final answers recorded more than once for one message
	Runs         int // run starts
	Reruns       int // messages run twice with their interruption recorded (allowed)
	Faults       int // faults applied
	// BeyondPromise lists the notes of faults beyond what JetStream
	// promises (a majority of NATS nodes down): violations then are not
	// the cluster's.
	BeyondPromise []string
	Violations    []Violation
	// Stalled lists the sessions whose longest accept-to-first-run passed
	// Options.StallLimit, with that time (not a violation: the goal is
	// reported, the promises are checked).
	Stalled []string
	// Latency holds, per window (Windows), the time from each message's
	// first ack to its first run start (0 when the run started before the
	// device saw the ack). A message accepted inside two faults' windows
	// counts in both.
	Latency map[string][]time.Duration
	// Ready holds, per window, the time from each message's being ready
	// to run (acked, and every message of its session acked before it
	// done running) to its first run start: what the cluster adds beyond
	// the session's own queue (a session of 16 messages in flight and a
	// 0.3 s agent has its last wait 4.5 s with no fault at all).
	Ready map[string][]time.Duration
	// LatencyAlone and ReadyAlone hold, per fault kind, the times of
	// Latency and Ready of the messages that waited inside exactly one
	// fault's window (no other fault, nor its grace, overlapping the
	// wait): a single node's death, pause, cut or full disk, which the
	// goals bound.
	LatencyAlone, ReadyAlone map[string][]time.Duration
	// StalledReady lists the sessions whose longest Ready time passed
	// Options.StallLimit: sessions that had a message ready and ran
	// nothing for that long.
	StalledReady []string
}

// Count returns the number of violations of kind k.
func (r Report) Count(k ViolationKind) int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind == k {
			n++
		}
	}
	return n
}

// msgState is what the history says about one message.
type msgState struct {
	device, id, text string
	seq              int
	sent             bool
	acked, ran       bool
	firstAck         int64 // when acked
	firstRun         int64 // when ran
	lastEnd          int64 // when its last run ended (0: none did)
	runs             int
	runNodes         []string
	interrupted      bool
	replies          []Event
}

type window struct {
	fault      string
	start, end int64
}

// Check is the checker: a pure function of the history. It reports, per
// message: Lost, RunTwice, Order, BadReply, PhantomRun (ViolationKind),
// and the accept-to-first-run latency per window.
//
// A second run is allowed only when the history holds an interrupted
// event for the message (the cluster's run_interrupted record, read from
// its history stream by the runner after the run); without one, any
// second run is a violation, and a third always is.
func Check(h History, opt Options) Report {
	if opt.Answer == nil {
		opt.Answer = func(text string) string { return "You said: " + text }
	}
	msgs := map[string]*msgState{}
	var order []*msgState
	get := func(e Event) *msgState {
		k := e.Device + "\x00" + e.Message
		m := msgs[k]
		if m == nil {
			m = &msgState{device: e.Device, id: e.Message, seq: e.Seq}
			msgs[k] = m
			order = append(order, m)
		}
		if m.seq == 0 {
			m.seq = e.Seq
		}
		return m
	}
	var r Report
	r.Latency = map[string][]time.Duration{}
	r.Ready = map[string][]time.Duration{}
	r.LatencyAlone = map[string][]time.Duration{}
	r.ReadyAlone = map[string][]time.Duration{}
	open := map[string]int64{} // fault+node -> start
	var windows []window
	for _, e := range h {
		switch e.Kind {
		case KindFaultStart:
			r.Faults++
			open[e.Fault+"\x00"+e.Node] = e.Time
			if e.Note != "" {
				r.BeyondPromise = append(r.BeyondPromise, e.Fault+" "+e.Node+": "+e.Note)
			}
			continue
		case KindFaultEnd:
			k := e.Fault + "\x00" + e.Node
			if s, ok := open[k]; ok {
				windows = append(windows, window{e.Fault, s, e.Time + int64(opt.Grace)})
				delete(open, k)
			}
			continue
		}
		m := get(e)
		switch e.Kind {
		case KindSend:
			m.sent, m.text = true, e.Text
		case KindAck:
			if !m.acked {
				m.acked, m.firstAck = true, e.Time
			}
		case KindRunStart:
			r.Runs++
			m.runs++
			m.runNodes = append(m.runNodes, e.Node)
			if !m.ran || e.Time < m.firstRun {
				m.ran, m.firstRun = true, e.Time
			}
		case KindRunEnd:
			m.lastEnd = max(m.lastEnd, e.Time)
		case KindInterrupted:
			m.interrupted = true
		case KindReply:
			m.replies = append(m.replies, e)
		}
	}
	for k, s := range open { // a fault never healed lasts to the end
		f, _, _ := strings.Cut(k, "\x00")
		windows = append(windows, window{f, s, math.MaxInt64})
	}

	add := func(m *msgState, k ViolationKind, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Kind: k, Device: m.device, Message: m.id, Seq: m.seq, Detail: fmt.Sprintf(format, args...)})
	}
	byDevice := map[string][]*msgState{}
	for _, m := range order {
		if !m.sent {
			if m.runs > 0 {
				add(m, PhantomRun, "ran %d times (on %s) and was never sent", m.runs, strings.Join(m.runNodes, ", "))
			}
			if len(m.replies) > 0 {
				add(m, BadReply, "a reply (%q) to a message never sent", m.replies[0].Text)
			}
			continue
		}
		r.Messages++
		if m.acked {
			r.Acked++
		} else if len(m.replies) == 0 {
			r.Unacked++
		}
		if len(m.replies) > 0 {
			r.Answered++
			r.DupReplies += len(m.replies) - 1
		}
		if m.acked && len(m.replies) == 0 {
			detail := "acked and never answered"
			if m.runs > 0 {
				detail += fmt.Sprintf(" (ran %d times, on %s)", m.runs, strings.Join(m.runNodes, ", "))
			} else {
				detail += " (never ran)"
			}
			add(m, Lost, "%s", detail)
		}
		for _, rep := range m.replies {
			if rep.Err != "" {
				r.ErrorReplies++
				if strings.HasPrefix(rep.Err, "finish_reason error: ") && !m.interrupted {
					// The cluster answers a message with an error only
					// when its run was cut short twice (I2), which
					// records run_interrupted.
					add(m, BadReply, "answered with an error (%q) and no run_interrupted recorded", rep.Text)
					break
				}
				continue
			}
			if want := opt.Answer(m.text); rep.Text != want {
				add(m, BadReply, "reply %q does not answer %q (want %q)", rep.Text, m.text, want)
				break
			}
		}
		switch {
		case m.runs > 2:
			add(m, RunTwice, "ran %d times (on %s): at most one re-run is allowed", m.runs, strings.Join(m.runNodes, ", "))
		case m.runs == 2 && !m.interrupted:
			add(m, RunTwice, "ran twice (on %s) with no run_interrupted recorded", strings.Join(m.runNodes, ", "))
		case m.runs == 2:
			r.Reruns++
		}
		if m.acked && m.ran {
			byDevice[m.device] = append(byDevice[m.device], m)
			d := max(time.Duration(m.firstRun-m.firstAck), 0)
			inWindows(windows, m.firstAck, d, r.Latency, r.LatencyAlone)
		}
	}
	// Order: per session (a device's messages), in the order accepted,
	// each message's first run must come before the first run of every
	// message accepted after it.
	devices := make([]string, 0, len(byDevice))
	for d := range byDevice {
		devices = append(devices, d)
	}
	sort.Strings(devices)
	for _, d := range devices {
		ms := byDevice[d]
		var longest time.Duration
		for _, m := range ms {
			longest = max(longest, time.Duration(m.firstRun-m.firstAck))
		}
		if opt.StallLimit > 0 && longest > opt.StallLimit {
			r.Stalled = append(r.Stalled, fmt.Sprintf("%s %v", d, longest.Round(time.Millisecond)))
		}
		slices.SortStableFunc(ms, func(a, b *msgState) int {
			if a.firstAck != b.firstAck {
				return cmpInt64(a.firstAck, b.firstAck)
			}
			return a.seq - b.seq
		})
		var free int64 // when the session's earlier messages had all ended
		var longestReady time.Duration
		for _, m := range ms {
			ready := max(m.firstAck, free)
			wait := max(time.Duration(m.firstRun-ready), 0)
			longestReady = max(longestReady, wait)
			inWindows(windows, ready, wait, r.Ready, r.ReadyAlone)
			free = max(free, m.lastEnd)
		}
		if opt.StallLimit > 0 && longestReady > opt.StallLimit {
			r.StalledReady = append(r.StalledReady, fmt.Sprintf("%s %v", d, longestReady.Round(time.Millisecond)))
		}
		for i, a := range ms {
			for _, b := range ms[i+1:] {
				if b.firstRun < a.firstRun {
					add(a, Order, "first ran %s after message %s (seq %d), which was accepted %s after it",
						time.Duration(a.firstRun-b.firstRun).Round(time.Millisecond), b.id, b.seq,
						time.Duration(b.firstAck-a.firstAck).Round(time.Millisecond))
					break
				}
			}
		}
	}
	return r
}

// inWindows adds d, a wait from time at, to every fault kind whose
// window holds at (once per kind) in all, or to Outside when none does;
// and to its kind in alone when the wait, from at to at+d, overlaps
// exactly one fault's window, which holds at (a single fault: no other
// began or was still going while it waited).
func inWindows(windows []window, at int64, d time.Duration, all, alone map[string][]time.Duration) {
	seen := map[string]bool{}
	in, overlaps, only := false, 0, ""
	end := at + int64(d)
	for _, w := range windows {
		if end >= w.start && at <= w.end {
			overlaps++
		}
		if at < w.start || at > w.end {
			continue
		}
		in, only = true, w.fault
		if !seen[w.fault] {
			seen[w.fault] = true
			all[w.fault] = append(all[w.fault], d)
		}
	}
	if !in {
		all[Outside] = append(all[Outside], d)
	} else if overlaps == 1 {
		alone[only] = append(alone[only], d)
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Stats are a latency distribution's summary.
type Stats struct {
	N             int
	P50, P99, Max time.Duration
}

// Summarize returns the nearest-rank p50, p99 and max of ds.
func Summarize(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Stats{N: len(s), P50: rank(0.50), P99: rank(0.99), Max: s[len(s)-1]}
}

func (s Stats) String() string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%v/%v/%v (n=%d)", s.P50.Round(time.Millisecond), s.P99.Round(time.Millisecond), s.Max.Round(time.Millisecond), s.N)
}

// Line is the report on one line: counts, violations by kind and the
// latency per window.
func (r Report) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "messages=%d acked=%d answered=%d unacked=%d runs=%d reruns=%d error_replies=%d faults=%d",
		r.Messages, r.Acked, r.Answered, r.Unacked, r.Runs, r.Reruns, r.ErrorReplies, r.Faults)
	for _, k := range ViolationKinds {
		fmt.Fprintf(&b, " %s=%d", k, r.Count(k))
	}
	for _, w := range Windows {
		if l := r.Latency[w]; len(l) > 0 {
			fmt.Fprintf(&b, " lat[%s]=%s", w, Summarize(l))
		}
	}
	for _, w := range Windows {
		if l := r.Ready[w]; len(l) > 0 {
			fmt.Fprintf(&b, " ready[%s]=%s", w, Summarize(l))
		}
	}
	fmt.Fprintf(&b, " stalled_sessions=%d stalled_ready=%d", len(r.Stalled), len(r.StalledReady))
	if len(r.BeyondPromise) > 0 {
		fmt.Fprintf(&b, " BEYOND_JETSTREAM_PROMISE=%q", r.BeyondPromise)
	}
	return b.String()
}
