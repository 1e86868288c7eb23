package jepsen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"termlink/testrig/cluster"
)

// TestSchedules runs TERMLINK_JEPSEN fault schedules (seeds 1..N, or
// from TERMLINK_JEPSEN_FIRST) over real processes, or replays the one
// seed TERMLINK_JEPSEN_SEED; skipped without either (a benchmark, never
// part of make test). Histories go to TERMLINK_JEPSEN_OUT (default: a
// new directory under the system's temporary one, kept and named in the
// log). The test fails when a schedule within JetStream's promise shows
// a violation.
func TestSchedules(t *testing.T) {
	var seeds []uint64
	if s := os.Getenv("TERMLINK_JEPSEN_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TERMLINK_JEPSEN_SEED=%q: %v", s, err)
		}
		seeds = []uint64{seed}
	} else if s := os.Getenv("TERMLINK_JEPSEN"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("TERMLINK_JEPSEN=%q: want a number of schedules", s)
		}
		first := uint64(1)
		if f := os.Getenv("TERMLINK_JEPSEN_FIRST"); f != "" {
			if first, err = strconv.ParseUint(f, 10, 64); err != nil {
				t.Fatalf("TERMLINK_JEPSEN_FIRST=%q: %v", f, err)
			}
		}
		for i := range n {
			seeds = append(seeds, first+uint64(i))
		}
	} else {
		t.Skip("a benchmark: set TERMLINK_JEPSEN=<schedules> (or TERMLINK_JEPSEN_SEED=<seed> to replay one)")
	}
	out := os.Getenv("TERMLINK_JEPSEN_OUT")
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", "termlink-jepsen-"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	var natsBin string
	bin, err := cluster.BuildTermserver(ctx, out, false)
	if err == nil {
		natsBin, err = cluster.BuildNATSServer(ctx, "")
	}
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("histories in %s", out)
	lease := 2 * time.Second
	var (
		results []Result
		total   = map[ViolationKind]int{}
		lat     = map[string][]time.Duration{}
		bad     []string
		stalled int
	)
	for _, seed := range seeds {
		sched := Generate(seed, RunTopology, NemesisOptions{Span: 36 * time.Second, Lease: lease})
		t.Logf("%s", sched)
		dir := filepath.Join(out, fmt.Sprintf("seed-%d", seed))
		_ = os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		res, err := RunSchedule(ctx, RunConfig{Termserver: bin, NATSServer: natsBin, Dir: dir, Lease: lease,
			Log: func(format string, args ...any) { t.Logf(format, args...) }}, sched)
		cancel()
		if err != nil {
			t.Errorf("seed %d: %v (files in %s)", seed, err, dir)
			continue
		}
		_ = os.RemoveAll(filepath.Join(dir, "nats")) // the stores: big; the logs go with them
		results = append(results, res)
		r := res.Report
		line := fmt.Sprintf("seed=%d %s unanswered_at_end=%d", seed, r.Line(), res.Unanswered)
		if len(res.FaultErrors) > 0 {
			line += fmt.Sprintf(" fault_errors=%q", res.FaultErrors)
		}
		t.Log(line)
		for i, v := range r.Violations {
			if i == 20 {
				t.Logf("  ... %d more in %s", len(r.Violations)-20, res.HistoryFile)
				break
			}
			t.Logf("  %s", v)
		}
		if len(r.Stalled) > 0 {
			t.Logf("  sessions stalled past 2 leases (%v): %s", 2*lease, strings.Join(r.Stalled, ", "))
		}
		stalled += len(r.Stalled)
		for _, k := range ViolationKinds {
			total[k] += r.Count(k)
		}
		for w, ds := range r.Latency {
			lat[w] = append(lat[w], ds...)
		}
		if len(r.Violations) > 0 && !sched.BeyondPromise() {
			bad = append(bad, fmt.Sprintf("seed %d (%s)", seed, res.HistoryFile))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nschedules: %d run, %d with violations\n", len(results), len(bad))
	b.WriteString("violations by kind:")
	for _, k := range ViolationKinds {
		fmt.Fprintf(&b, " %s=%d", k, total[k])
	}
	fmt.Fprintf(&b, "\nsessions stalled past 2 leases: %d (goal: 0)", stalled)
	b.WriteString("\naccept-to-first-run, p50/p99/max:\n")
	for _, w := range Windows {
		fmt.Fprintf(&b, "  %-12s %s\n", w, Summarize(lat[w]))
	}
	t.Log(b.String())
	if len(bad) > 0 {
		t.Errorf("violations (replay one with TERMLINK_JEPSEN_SEED=<seed>): %s", strings.Join(bad, ", "))
	}
}
