package jepsen

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRecheck checks again the histories a run of TestSchedules left in
// TERMLINK_JEPSEN_RECHECK (its TERMLINK_JEPSEN_OUT: one seed-N directory
// per schedule) and logs the summary TestSchedules logs at its end: for
// a run stopped early, or a checker changed since. Skipped without it.
// A schedule beyond JetStream's promise is not counted as failing (its
// seed's schedule is drawn again to know; TERMLINK_JEPSEN_NETNS=1 and
// TERMLINK_JEPSEN_DISKFULL=0 say which kinds the run drew, as for
// TestSchedules).
func TestRecheck(t *testing.T) {
	dir := os.Getenv("TERMLINK_JEPSEN_RECHECK")
	if dir == "" {
		t.Skip("set TERMLINK_JEPSEN_RECHECK=<a TestSchedules output directory>")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var seeds []uint64
	for _, e := range entries {
		if s, ok := strings.CutPrefix(e.Name(), "seed-"); ok && e.IsDir() {
			if n, err := strconv.ParseUint(s, 10, 64); err == nil {
				seeds = append(seeds, n)
			}
		}
	}
	slices.Sort(seeds)
	lease := 2 * time.Second
	nopt := NemesisOptions{Span: 36 * time.Second, Lease: lease,
		Partitions: os.Getenv("TERMLINK_JEPSEN_NETNS") == "1", DiskFull: os.Getenv("TERMLINK_JEPSEN_DISKFULL") != "0"}
	sum := newRunSummary()
	for _, seed := range seeds {
		sdir := filepath.Join(dir, fmt.Sprintf("seed-%d", seed))
		// TestSchedules removes a schedule's NATS stores once it is
		// checked: with them there, it is running or was stopped.
		if _, err := os.Stat(filepath.Join(sdir, "nats")); err == nil {
			t.Logf("seed %d: not finished (its NATS stores are still there): not counted", seed)
			continue
		}
		path := filepath.Join(sdir, "history.jsonl")
		h, err := ReadHistoryFile(path)
		if err != nil {
			t.Logf("seed %d: %v: not counted", seed, err)
			continue
		}
		r := Check(h, Options{StallLimit: 2 * lease})
		t.Logf("seed=%d %s", seed, r.Line())
		for _, v := range r.Violations {
			t.Logf("  %s", v)
		}
		sum.add(seed, r, Generate(seed, RunTopology, nopt).BeyondPromise(), path)
	}
	t.Log(sum.String())
}

// runSummary adds up the reports of a run's schedules.
type runSummary struct {
	runs  int
	total map[ViolationKind]int
	lat   map[string][]time.Duration
	ready map[string][]time.Duration
	// latAlone, readyAlone: the same inside exactly one fault's window.
	latAlone, readyAlone map[string][]time.Duration
	bad                  []string
	// beyond: the schedules beyond what JetStream promises (a majority
	// drawn, or a NATS fault that started while another node was not
	// healthy: Report.BeyondPromise), with their violations; they are
	// counted nowhere else.
	beyond  []string
	stalled int
	// stalledReady: sessions with a message ready to run and nothing run
	// past 2 leases (Report.StalledReady).
	stalledReady int
}

func newRunSummary() *runSummary {
	return &runSummary{total: map[ViolationKind]int{}, lat: map[string][]time.Duration{}, ready: map[string][]time.Duration{},
		latAlone: map[string][]time.Duration{}, readyAlone: map[string][]time.Duration{}}
}

// add counts one schedule's report. One beyond what JetStream promises
// (beyond: its schedule drew a majority; or the runner found a NATS
// fault starting while another node was not healthy) is listed apart:
// its violations do not fail the run, and neither they nor its waits
// are added to the others'.
func (s *runSummary) add(seed uint64, r Report, beyond bool, history string) {
	s.runs++
	if beyond || len(r.BeyondPromise) > 0 {
		var v []string
		for _, k := range ViolationKinds {
			if n := r.Count(k); n > 0 {
				v = append(v, fmt.Sprintf("%s=%d", k, n))
			}
		}
		if len(v) == 0 {
			v = append(v, "no violation")
		}
		s.beyond = append(s.beyond, fmt.Sprintf("seed %d (%s; %s)", seed, strings.Join(v, " "), strings.Join(r.BeyondPromise, "; ")))
		return
	}
	s.stalled += len(r.Stalled)
	for _, k := range ViolationKinds {
		s.total[k] += r.Count(k)
	}
	s.stalledReady += len(r.StalledReady)
	for w, ds := range r.Latency {
		s.lat[w] = append(s.lat[w], ds...)
	}
	for w, ds := range r.Ready {
		s.ready[w] = append(s.ready[w], ds...)
	}
	for w, ds := range r.LatencyAlone {
		s.latAlone[w] = append(s.latAlone[w], ds...)
	}
	for w, ds := range r.ReadyAlone {
		s.readyAlone[w] = append(s.readyAlone[w], ds...)
	}
	if len(r.Violations) > 0 {
		s.bad = append(s.bad, fmt.Sprintf("seed %d (%s)", seed, history))
	}
}

func (s *runSummary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nschedules: %d run, %d beyond what JetStream promises (not counted below), %d with violations\n", s.runs, len(s.beyond), len(s.bad))
	for _, l := range s.beyond {
		fmt.Fprintf(&b, "  beyond the promise: %s\n", l)
	}
	b.WriteString("violations by kind:")
	for _, k := range ViolationKinds {
		fmt.Fprintf(&b, " %s=%d", k, s.total[k])
	}
	fmt.Fprintf(&b, "\nsessions stalled past 2 leases: %d (goal: 0)", s.stalled)
	b.WriteString("\naccept-to-first-run, p50/p99/max:\n")
	for _, w := range Windows {
		fmt.Fprintf(&b, "  %-12s %s\n", w, Summarize(s.lat[w]))
	}
	fmt.Fprintf(&b, "sessions with a message ready and nothing run past 2 leases: %d\n", s.stalledReady)
	b.WriteString("ready-to-first-run (the session idle, its message acked), p50/p99/max:\n")
	for _, w := range Windows {
		fmt.Fprintf(&b, "  %-12s %s\n", w, Summarize(s.ready[w]))
	}
	b.WriteString("waits inside exactly one fault (no other overlapping the wait), accept-to-first-run | ready-to-first-run, p50/p99/max:\n")
	for _, w := range Windows[1:] {
		fmt.Fprintf(&b, "  %-12s %s | %s\n", w, Summarize(s.latAlone[w]), Summarize(s.readyAlone[w]))
	}
	return b.String()
}

// A schedule the runner found beyond what JetStream promises (a NATS
// fault started while another node was not healthy: seed 484 of the
// 100-schedule run, counted as a failure before) is listed apart and
// fails nothing; its violations and waits are not added to the others'.
func TestRunSummaryBeyondPromise(t *testing.T) {
	s := newRunSummary()
	lost := []Violation{{Kind: Lost, Device: "d1", Message: "m1", Seq: 1}}
	s.add(1, Report{Violations: lost, BeyondPromise: []string{"kill_nats n3: beyond what JetStream promises: nats n2 not healthy"},
		Latency: map[string][]time.Duration{"kill_nats": {time.Minute}}}, false, "h1")
	s.add(2, Report{Violations: lost}, true, "h2")
	s.add(3, Report{Latency: map[string][]time.Duration{"kill_nats": {time.Second}}}, false, "h3")
	if len(s.bad) != 0 || len(s.beyond) != 2 || s.total[Lost] != 0 {
		t.Fatalf("bad %v beyond %v lost %d, want none, 2 and 0", s.bad, s.beyond, s.total[Lost])
	}
	if got := s.lat["kill_nats"]; len(got) != 1 || got[0] != time.Second {
		t.Errorf("kill_nats waits %v, want the counted schedule's 1s only", got)
	}
	if out := s.String(); !strings.Contains(out, "3 run, 2 beyond what JetStream promises") || !strings.Contains(out, "seed 1 (lost=1; kill_nats n3") {
		t.Errorf("summary:\n%s", out)
	}
	s.add(4, Report{Violations: lost}, false, "h4")
	if len(s.bad) != 1 || s.total[Lost] != 1 {
		t.Errorf("a violation within the promise: bad %v lost %d, want it counted", s.bad, s.total[Lost])
	}
}
