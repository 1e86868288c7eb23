package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/testrig/cluster"
)

// TestFaultRepetition is one repetition of each fault scenario of
// testrig/bench/cluster-faults.sh (issue 22, rows 7 and 8), run only when
// TERMLINK_FAULTS is set (to "nats", "worker" or "nats,worker"); the
// script runs it with -count=N. Every node is a process: 3 nats-server
// nodes, 2 edges and 2 workers. FAULT_DEVICES link.Client devices (30),
// half on each edge with the other as fallback, each send one message a
// second for FAULT_SECONDS (24), each with a window of up to 16 unacked
// messages (link.Client's default), while
//
//	nats    one NATS node gets SIGKILL after a third of the time and is
//	        started again after two thirds: in turn the leader of the
//	        partition leases' bucket, of the claims' stream and of the
//	        inbound stream;
//	worker  worker-1 gets SIGKILL after a third of the time, as soon as
//	        it has started a run (runs last 0.6 s).
//
// The devices start 3 s after the cluster is up (the partitions'
// consumers have elected their leaders). FAULT_DEBUG=1 logs the nodes'
// log tails and the run log.
//
// Every agent run appends its message's text to a run log when it starts.
// Counted, and appended as one line to TERMLINK_FAULTS_OUT:
//
//	double_no_interruption  messages that ran twice whose history records
//	                        no run_interrupted (or ran more than twice)
//	out_of_order            messages whose first run started after the
//	                        first run of a message its device sent later
//	unanswered, bad_answers messages without exactly one right answer
//	reruns                  messages that ran twice with the interruption
//	                        recorded (a worker killed or cut off: allowed)
//
// The test fails when any of the first three is not 0.
func TestFaultRepetition(t *testing.T) {
	scenarios := os.Getenv("TERMLINK_FAULTS")
	if scenarios == "" {
		t.Skip("set TERMLINK_FAULTS=nats,worker (testrig/bench/cluster-faults.sh)")
	}
	for _, sc := range strings.Split(scenarios, ",") {
		t.Run(sc, func(t *testing.T) { faultRepetition(t, sc) })
	}
}

var repetition atomic.Int64

func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err != nil || n <= 0 {
		return def
	}
	return n
}

func faultRepetition(t *testing.T, scenario string) {
	rep := int(repetition.Add(1))
	devices, seconds := envInt("FAULT_DEVICES", 30), envInt("FAULT_SECONDS", 24)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	delay := 200 * time.Millisecond
	if scenario == "worker" {
		delay = 600 * time.Millisecond // runs in progress when the worker dies
	} else if scenario != "nats" {
		t.Fatalf("unknown scenario %q (want nats or worker)", scenario)
	}
	tc := startCluster(t, clusterOpts{edges: 2, workers: 2, failover: true, agent: slowAgent(runLog, delay)})
	var ds []*device
	for i := range devices {
		ds = append(ds, newDevice(t, fmt.Sprintf("f%d-%d", rep, i), tc.edges[i%2].WSURL(), tc.edges[(i+1)%2].WSURL()))
	}
	time.Sleep(3 * time.Second) // the partitions' consumers have elected their leaders
	// The NATS node to kill: the leader of a stream whose election stalls
	// what matters, in turn the partition leases' (KV_termlink_parts:
	// its keys outlive an election shorter than the lease), the claims'
	// (TERMLINK_HIST, with the turns) and the inbound messages'; else a
	// node in turn.
	victim := tc.nats.Nodes[rep%len(tc.nats.Nodes)]
	leaderOf := []string{"KV_termlink_parts", "TERMLINK_HIST", "TERMLINK_IN"}[(rep/2)%3]
	if name := streamLeader(tc.nats.URLs(), leaderOf); name != "" {
		for _, n := range tc.nats.Nodes {
			if n.Name == name {
				victim = n
			}
		}
	}
	start := time.Now()
	fault := ""
	killed := make(chan string, 1) // the worker scenario's kill, done meanwhile
	for s := range seconds {
		switch {
		case s == seconds/3 && scenario == "nats":
			victim.Kill()
			fault = fmt.Sprintf("killed nats %s (leader of %s) at %.1fs", victim.Name, leaderOf, time.Since(start).Seconds())
		case s == 2*seconds/3 && scenario == "nats":
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			err := victim.Start(ctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			fault += fmt.Sprintf(", restarted at %.1fs", time.Since(start).Seconds())
		case s == seconds/3 && scenario == "worker":
			go killWhileRunning(t, tc.workers[0], runLog, tc.nats.URLs(), start, killed)
		}
		for i, d := range ds {
			d.send(fmt.Sprintf("f%d-%d-%d", rep, i, s))
		}
		time.Sleep(time.Until(start.Add(time.Duration(s+1) * time.Second)))
	}
	if scenario == "worker" {
		fault = <-killed
	}

	rc := countRuns(t, tc, ds, runLog)
	unanswered, bad := rc.unanswered, rc.bad
	doubles, reruns, outOfOrder, examples, byWorker, lines := rc.doubles, rc.reruns, rc.outOfOrder, rc.examples, rc.byWorker, rc.lines
	leasesLost, taken := 0, 0
	for _, w := range tc.workers {
		if b, err := os.ReadFile(w.LogFile); err == nil {
			leasesLost += strings.Count(string(b), "lost the lease of a partition")
			taken += strings.Count(string(b), "partition taken")
		}
	}
	line := fmt.Sprintf("scenario=%s rep=%d messages=%d runs=%d double_no_interruption=%d out_of_order=%d unanswered=%d bad_answers=%d reruns=%d leases_lost=%d partitions_taken=%d runs_by=%s/%d,%s/%d fault=%q",
		scenario, rep, devices*seconds, len(lines), doubles, outOfOrder, unanswered, bad, reruns, leasesLost, taken,
		tc.workers[0].Spec.Name, byWorker[tc.workers[0].Spec.Name], tc.workers[1].Spec.Name, byWorker[tc.workers[1].Spec.Name], fault)
	t.Log(line)
	for i, e := range examples {
		if i == 10 {
			break
		}
		t.Log("  " + e)
	}
	if out := os.Getenv("TERMLINK_FAULTS_OUT"); out != "" {
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(f, line)
		for i, e := range examples {
			if i == 10 {
				break
			}
			fmt.Fprintln(f, "  "+e)
		}
		_ = f.Close()
	}
	if os.Getenv("FAULT_DEBUG") != "" { // the nodes' log tails and the run log
		for _, w := range append(tc.edges, tc.workers...) {
			t.Logf("--- %s log tail:\n%s", w.Spec.Name, w.LogTail(60))
		}
		_, ls := runStarts(t, runLog)
		t.Logf("run log:\n%s", strings.Join(ls, "\n"))
	}
	if doubles+outOfOrder+unanswered+bad > 0 {
		t.Errorf("%s", line)
	}
}

// killWhileRunning kills victim with SIGKILL as soon as it has started a
// run (one started less than 0.3 s ago: runs last 0.6 s), waiting at
// most 10 s for one, and says when on killed.
func killWhileRunning(t *testing.T, victim *cluster.Server, runLog, natsURLs string, start time.Time, killed chan<- string) {
	ws := filepath.Join(victim.Spec.Dir, "workspace")
	for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
		if recentRun(runLog, ws, 300*time.Millisecond) {
			break
		}
	}
	if os.Getenv("FAULT_DEBUG") != "" {
		t.Logf("consumers before the kill:\n%s", consumerStates(natsURLs))
	}
	victim.Kill()
	killed <- fmt.Sprintf("killed %s at %.1fs", victim.Spec.Name, time.Since(start).Seconds())
}

// recentRun reports whether the run log's last line is a run started in
// workspace, written less than within ago.
func recentRun(runLog, workspace string, within time.Duration) bool {
	st, err := os.Stat(runLog)
	if err != nil || time.Since(st.ModTime()) > within {
		return false
	}
	b, err := os.ReadFile(runLog)
	if err != nil {
		return false
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.HasPrefix(lines[len(lines)-1], workspace+" ")
}

// waitAnswered waits until every message sent has its final answer, at
// most timeout, and returns how many have none.
func (d *device) waitAnswered(timeout time.Duration) int {
	deadline := time.After(timeout)
	for {
		d.mu.Lock()
		missing := 0
		for _, id := range d.sentIDs {
			if _, ok := d.replies[id]; !ok {
				missing++
			}
		}
		ch := d.changed
		d.mu.Unlock()
		if missing == 0 {
			return 0
		}
		select {
		case <-ch:
		case <-deadline:
			return missing
		}
	}
}

// badAnswers counts the answered messages with more than one final
// answer, or whose answer is not "You said: <text>".
func (d *device) badAnswers() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, id := range d.sentIDs {
		if r, ok := d.replies[id]; ok && (d.finals[id] != 1 || r != "You said: "+d.texts[id]) {
			n++
		}
	}
	return n
}

// consumerStates describes the inbound stream's consumers (FAULT_DEBUG).
func consumerStates(urls string) string {
	nc, err := nats.Connect(urls)
	if err != nil {
		return err.Error()
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "TERMLINK_IN")
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	l := st.ListConsumers(ctx)
	for ci := range l.Info() {
		leader := ""
		if ci.Cluster != nil {
			leader = ci.Cluster.Leader
		}
		fmt.Fprintf(&b, "%s leader=%s delivered=%d ackfloor=%d pending=%d ackpending=%d waiting=%d redelivered=%d\n",
			ci.Name, leader, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumPending, ci.NumAckPending, ci.NumWaiting, ci.NumRedelivered)
	}
	if err := l.Err(); err != nil {
		fmt.Fprintf(&b, "listing: %v\n", err)
	}
	return b.String()
}

// streamLeader is the NATS node that leads stream, "" if unknown.
func streamLeader(urls, stream string) string {
	nc, err := nats.Connect(urls)
	if err != nil {
		return ""
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	if ci := st.CachedInfo(); ci.Cluster != nil {
		return ci.Cluster.Leader
	}
	return ""
}

// runCounts is what countRuns finds on the devices' side, in the run
// log and in the history.
type runCounts struct {
	unanswered, bad             int // messages without their one right answer (waited for)
	doubles, reruns, outOfOrder int
	examples                    []string
	byWorker                    map[string]int // worker name -> runs started
	lines                       []string       // the run log
}

// countRuns counts, over the messages the devices sent, those that ran
// twice with no interruption recorded (or more than twice: doubles),
// twice with it recorded (reruns), and those whose first run started
// before the first run of one their device sent earlier (outOfOrder).
//
// It first waits (at most 2*waitFor) until every message is answered
// and closes the devices.
func countRuns(t *testing.T, tc *testCluster, ds []*device, runLog string) runCounts {
	t.Helper()
	unanswered := 0
	deadline := time.Now().Add(2 * waitFor)
	for _, d := range ds {
		unanswered += d.waitAnswered(time.Until(deadline))
	}
	bad := 0
	for _, d := range ds {
		d.close()
		bad += d.badAnswers()
	}
	starts, lines := runStarts(t, runLog)
	inter := interruptions(t, tc)
	byWorker := map[string]int{}
	for _, l := range lines {
		ws, _, _ := strings.Cut(l, " ")
		byWorker[filepath.Base(filepath.Dir(ws))]++
	}
	doubles, reruns, outOfOrder := 0, 0, 0
	firstRun := map[string]int{} // text -> index of its first run in the log
	for i, l := range lines {
		if _, text, ok := strings.Cut(l, " "); ok {
			if _, seen := firstRun[text]; !seen {
				firstRun[text] = i
			}
		}
	}
	var examples []string
	for _, d := range ds {
		d.mu.Lock()
		lastSent, lastRun := "", -1
		for _, id := range d.sentIDs {
			text := d.texts[id]
			ni := inter[fmt.Sprintf("terminal-dev:local:%s/%s", d.peer, id)]
			switch n := starts[text]; {
			case n > 2, n == 2 && ni != 1:
				doubles++
				examples = append(examples, fmt.Sprintf("%s ran %d times, %d interruptions recorded", text, n, ni))
			case n == 2:
				reruns++
			}
			// In send order, each message's first run must come after
			// the first run of the one sent before it.
			if i, ok := firstRun[text]; ok {
				if i < lastRun {
					outOfOrder++
					examples = append(examples, fmt.Sprintf("%s first ran before %s, sent earlier", text, lastSent))
				} else {
					lastSent, lastRun = text, i
				}
			}
		}
		d.mu.Unlock()
	}
	return runCounts{unanswered: unanswered, bad: bad, doubles: doubles, reruns: reruns, outOfOrder: outOfOrder, examples: examples, byWorker: byWorker, lines: lines}
}
