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
//
// Partitions are drawn with TERMLINK_JEPSEN_NETNS=1, as root, with the
// namespaces testrig/bench/jepsen-partition.sh makes (the nodes run in
// them); full NATS disks as root when a tmpfs can be mounted (unless
// TERMLINK_JEPSEN_DISKFULL=0). The log says which are drawn, or why not.
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
	nopt := NemesisOptions{Span: 36 * time.Second, Lease: lease}
	// Partitions: only when asked for and the namespaces are there.
	if os.Getenv("TERMLINK_JEPSEN_NETNS") != "1" {
		t.Log("partitions not drawn: set TERMLINK_JEPSEN_NETNS=1 (testrig/bench/jepsen-partition.sh makes the network namespaces, as root)")
	} else if err := NetnsReady(context.Background()); err != nil {
		t.Fatalf("TERMLINK_JEPSEN_NETNS=1 but: %v", err)
	} else {
		nopt.Partitions = true
		t.Log("partitions drawn: the nodes run in the network namespaces tlj-*")
	}
	// Full disks: as root, when a tmpfs can be mounted.
	if os.Getenv("TERMLINK_JEPSEN_DISKFULL") == "0" {
		t.Log("disk_full not drawn: TERMLINK_JEPSEN_DISKFULL=0")
	} else if err := DiskFullReady(out); err != nil {
		t.Logf("disk_full not drawn: %v", err)
	} else {
		nopt.DiskFull = true
		t.Logf("disk_full drawn: each NATS store on a tmpfs of size %s", StoreTmpfsSize)
	}
	sum := newRunSummary()
	for _, seed := range seeds {
		sched := Generate(seed, RunTopology, nopt)
		t.Logf("%s", sched)
		dir := filepath.Join(out, fmt.Sprintf("seed-%d", seed))
		_ = os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		res, err := RunSchedule(ctx, RunConfig{Termserver: bin, NATSServer: natsBin, Dir: dir, Lease: lease,
			Netns: nopt.Partitions, DiskFull: nopt.DiskFull,
			Log: func(format string, args ...any) { t.Logf(format, args...) }}, sched)
		cancel()
		if err != nil {
			t.Errorf("seed %d: %v (files in %s)", seed, err, dir)
			continue
		}
		_ = os.RemoveAll(filepath.Join(dir, "nats")) // the stores: big; the logs go with them
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
		sum.add(seed, r, sched.BeyondPromise(), res.HistoryFile)
	}
	t.Log(sum.String())
	if len(sum.bad) > 0 {
		t.Errorf("violations (replay one with TERMLINK_JEPSEN_SEED=<seed>): %s", strings.Join(sum.bad, ", "))
	}
}
