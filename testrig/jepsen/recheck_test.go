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
	stalled              int
	// stalledReady: sessions with a message ready to run and nothing run
	// past 2 leases (Report.StalledReady).
	stalledReady int
}

func newRunSummary() *runSummary {
	return &runSummary{total: map[ViolationKind]int{}, lat: map[string][]time.Duration{}, ready: map[string][]time.Duration{},
		latAlone: map[string][]time.Duration{}, readyAlone: map[string][]time.Duration{}}
}

// add counts one schedule's report (beyond: the schedule is beyond what
// JetStream promises; its violations do not fail the run).
func (s *runSummary) add(seed uint64, r Report, beyond bool, history string) {
	s.runs++
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
	if len(r.Violations) > 0 && !beyond {
		s.bad = append(s.bad, fmt.Sprintf("seed %d (%s)", seed, history))
	}
}

func (s *runSummary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nschedules: %d run, %d with violations\n", s.runs, len(s.bad))
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
