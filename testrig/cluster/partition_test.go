package cluster_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"termlink/testrig/cluster"
)

// The namespaces testrig/bench/cluster-partition.sh makes (keep the two
// in step): each node in its own, on the bridge tlpc0 (10.77.0.0/24, the
// root namespace is 10.77.0.1) through its interface c0, whose other end
// in the root namespace is NS-c; the edges also on the bridge tlpd0
// (10.77.1.0/24, root 10.77.1.1) through d0, where the devices (this
// process, in the root namespace) reach them. No routing between the two
// bridges: an edge cut off from tlpc0 still has its devices.
var (
	partNATS    = []struct{ ns, host string }{{"tlp-n1", "10.77.0.11"}, {"tlp-n2", "10.77.0.12"}, {"tlp-n3", "10.77.0.13"}}
	partEdges   = []struct{ ns, host string }{{"tlp-e1", "10.77.1.21"}, {"tlp-e2", "10.77.1.22"}}
	partWorkers = []struct{ ns, host string }{{"tlp-w1", "10.77.0.31"}, {"tlp-w2", "10.77.0.32"}}
)

// TestPartitionRepetition is one repetition of
// testrig/bench/cluster-partition.sh (issue 25 item 6), run only when
// TERMLINK_NETNS=1 (the script has made the namespaces; as root). As
// TestFaultRepetition, with every node a process in its own network
// namespace: 3 nats-server nodes, 2 edges, 2 workers (8 partitions,
// replicas 3, lease 2 s, ack wait 5 s); PART_DEVICES devices (30), half
// on each edge with the other as fallback, send one message a second for
// PART_SECONDS (36) to an agent whose runs last 0.2 s, while
//
//	a NATS node (the leader of the partition leases', the claims' or
//	the inbound stream, in turn) is cut off from everyone (its veth
//	leaves the bridge: cutOff) from 1/12 of the time for a third of it;
//	edge-1 is cut off from the cluster (its c0; its devices still reach
//	it on d0) from 7/12 of the time for a third of it.
//
// Counted as in TestFaultRepetition (double_no_interruption,
// out_of_order, unanswered, bad_answers must be 0; reruns allowed), and
// what each minority side did while cut off: the devices' messages sent
// meanwhile that were acked or answered before the heal, the devices of
// the cut edge that reconnected, and the warnings in the cut node's log.
// One line per repetition (and the minority's lines) go to
// TERMLINK_PARTITION_OUT.
func TestPartitionRepetition(t *testing.T) {
	if os.Getenv("TERMLINK_NETNS") != "1" {
		t.Skip("set TERMLINK_NETNS=1 (testrig/bench/cluster-partition.sh makes the namespaces, as root)")
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v %s", err, out)
	}
	for _, ns := range []string{"tlp-n1", "tlp-n2", "tlp-n3", "tlp-e1", "tlp-e2", "tlp-w1", "tlp-w2"} {
		if !regexp.MustCompile(`(?m)^` + ns + `\b`).Match(out) {
			t.Fatalf("no network namespace %s: run testrig/bench/cluster-partition.sh", ns)
		}
	}
	partitionRepetition(t)
}

// cutOff cuts the namespace ns off from the bridge tlpc0 (its veth's
// root end NS-c leaves the bridge: its c0 keeps its carrier and what it
// sends is dropped silently, as in a partition; this machine's kernel
// has no tc netem) or, cut false, puts it back.
func cutOff(t *testing.T, ns string, cut bool) {
	t.Helper()
	argv := []string{"ip", "link", "set", "dev", ns + "-c", "master", "tlpc0"}
	if cut {
		argv = append(argv[:len(argv)-2], "nomaster")
	}
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Errorf("%s: %v %s", strings.Join(argv, " "), err, out)
	}
}

func partitionRepetition(t *testing.T) {
	rep := int(repetition.Add(1))
	devices, seconds := envInt("PART_DEVICES", 30), envInt("PART_SECONDS", 36)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := cluster.BuildNATSServer(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	opt := cluster.NATSOptions{Nodes: 3, Dir: t.TempDir(), Binary: bin}
	for _, n := range partNATS {
		opt.Netns, opt.Hosts = append(opt.Netns, n.ns), append(opt.Hosts, n.host)
	}
	nc, err := cluster.StartNATS(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{nats: nc}
	t.Cleanup(func() {
		for _, n := range partNATS { // healed before the nodes stop
			cutOff(t, n.ns, false)
		}
		cutOff(t, partEdges[0].ns, false)
		if t.Failed() {
			for _, n := range nc.Nodes {
				if b, err := os.ReadFile(n.LogFile); err == nil && len(b) > 3000 {
					t.Logf("--- nats %s log tail:\n%s", n.Name, b[len(b)-3000:])
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := nc.Close(ctx); err != nil {
			t.Errorf("stopping nats: %v", err)
		}
	})
	extra := map[string]any{"leaseSeconds": 2, "ackWaitSeconds": 5}
	start := func(name, role, ns, host string) *cluster.Server {
		return cluster.StartServerForTest(t, termserverBin, cluster.NodeSpec{Name: name, Role: role, NATS: nc.URLs(),
			Partitions: 8, Replicas: 3, Agent: slowAgent(runLog, 200*time.Millisecond), Cluster: extra, Host: host, Netns: ns})
	}
	for i, e := range partEdges {
		tc.edges = append(tc.edges, start(fmt.Sprintf("edge-%d", i+1), "edge", e.ns, e.host))
	}
	for i, w := range partWorkers {
		tc.workers = append(tc.workers, start(fmt.Sprintf("worker-%d", i+1), "worker", w.ns, w.host))
	}
	// Ready: a message through each edge is answered (the operator API,
	// /api/status, answers loopback clients only without admin tokens).
	for i, e := range tc.edges {
		w := newDevice(t, fmt.Sprintf("p%d-warm-%d", rep, i), e.WSURL())
		w.send(fmt.Sprintf("p%d-warm-%d", rep, i))
		w.waitReplies(waitFor)
		w.close()
	}
	var ds []*device
	for i := range devices {
		ds = append(ds, newDevice(t, fmt.Sprintf("p%d-%d", rep, i), tc.edges[i%2].WSURL(), tc.edges[(i+1)%2].WSURL()))
	}
	time.Sleep(3 * time.Second) // the partitions' consumers have elected their leaders

	victim := nc.Nodes[rep%len(nc.Nodes)]
	leaderOf := []string{"KV_termlink_parts", "TERMLINK_HIST", "TERMLINK_IN"}[rep%3]
	if name := streamLeader(nc.URLs(), leaderOf); name != "" {
		for _, n := range nc.Nodes {
			if n.Name == name {
				victim = n
			}
		}
	}
	victimNS := victim.Netns
	third, edgeNS := seconds/3, partEdges[0].ns
	natsCut, edgeCut := seconds/12, seconds/2+seconds/12
	var all []string
	for _, s := range append(tc.edges, tc.workers...) {
		all = append(all, s.LogFile)
	}
	natsPhase := &cutPhase{name: "nats " + victim.Name + " (leader of " + leaderOf + ")", logs: append([]string{victim.LogFile}, all...)}
	edgePhase := &cutPhase{name: "edge-1 (from the cluster; its devices still reach it)", logs: all}
	start0 := time.Now()
	for s := range seconds {
		switch s {
		case natsCut:
			natsPhase.begin(ds, nil)
			cutOff(t, victimNS, true)
		case natsCut + third:
			cutOff(t, victimNS, false)
			natsPhase.end(ds)
		case edgeCut:
			edgePhase.begin(ds, func(i int) bool { return i%2 == 0 })
			cutOff(t, edgeNS, true)
		case edgeCut + third:
			cutOff(t, edgeNS, false)
			edgePhase.end(ds)
		}
		for i, d := range ds {
			id := d.send(fmt.Sprintf("p%d-%d-%d", rep, i, s))
			for _, p := range []*cutPhase{natsPhase, edgePhase} {
				if p.cutting && (p.only == nil || p.only(i)) {
					p.sent[d] = append(p.sent[d], id)
				}
			}
		}
		time.Sleep(time.Until(start0.Add(time.Duration(s+1) * time.Second)))
	}
	rc := countRuns(t, tc, ds, runLog)
	w1, w2 := tc.workers[0].Spec.Name, tc.workers[1].Spec.Name
	line := fmt.Sprintf("scenario=partition rep=%d messages=%d runs=%d double_no_interruption=%d out_of_order=%d unanswered=%d bad_answers=%d reruns=%d runs_by=%s/%d,%s/%d %s %s",
		rep, devices*seconds, len(rc.lines), rc.doubles, rc.outOfOrder, rc.unanswered, rc.bad, rc.reruns,
		w1, rc.byWorker[w1], w2, rc.byWorker[w2], natsPhase.counts("nats_cut"), edgePhase.counts("edge_cut"))
	lines := append([]string{line}, natsPhase.describe(), edgePhase.describe())
	for i, e := range rc.examples {
		if i == 10 {
			break
		}
		lines = append(lines, "  "+e)
	}
	t.Log(strings.Join(lines, "\n"))
	if out := os.Getenv("TERMLINK_PARTITION_OUT"); out != "" {
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(f, strings.Join(lines, "\n"))
		_ = f.Close()
	}
	if os.Getenv("FAULT_DEBUG") != "" {
		for _, w := range append(tc.edges, tc.workers...) {
			t.Logf("--- %s log tail:\n%s", w.Spec.Name, w.LogTail(60))
		}
	}
	if rc.doubles+rc.outOfOrder+rc.unanswered+rc.bad > 0 {
		t.Errorf("%s", line)
	}
}

// cutPhase is what the minority side did during one cut: the messages
// the devices (those only selects) sent meanwhile, how many of them were
// acked and answered before the heal, how many of the devices connected
// again, and the warnings the cut node logged.
type cutPhase struct {
	name     string
	logs     []string // the cut node's log, and others' to watch
	only     func(i int) bool
	cutting  bool
	sent     map[*device][]string
	connects map[*device]int
	logOffs  []int64
	took     time.Duration
	began    time.Time

	nsent, acked, answered, reconnected int
	warnings                            int
	samples                             []string
}

func (p *cutPhase) begin(ds []*device, only func(int) bool) {
	p.only, p.cutting, p.began = only, true, time.Now()
	p.sent, p.connects = map[*device][]string{}, map[*device]int{}
	for i, d := range ds {
		if only == nil || only(i) {
			p.connects[d] = d.connected()
		}
	}
	p.logOffs = make([]int64, len(p.logs))
	for i, l := range p.logs {
		if st, err := os.Stat(l); err == nil {
			p.logOffs[i] = st.Size()
		}
	}
}

var (
	logNoise = regexp.MustCompile(`^\[\d+\] \S+ \S+ |^time=\S+ |[0-9a-f]{8,}|\d+(\.\d+)?(ms|s|µs)?`)
	warnLine = regexp.MustCompile(`\[(WRN|ERR)\]|level=(WARN|ERROR)`)
)

func (p *cutPhase) end(ds []*device) {
	p.cutting, p.took = false, time.Since(p.began)
	for d, ids := range p.sent {
		d.mu.Lock()
		for _, id := range ids {
			p.nsent++
			if d.acked[id] {
				p.acked++
			}
			if _, ok := d.replies[id]; ok {
				p.answered++
			}
		}
		d.mu.Unlock()
	}
	for d, n := range p.connects {
		if d.connected() > n {
			p.reconnected++
		}
	}
	kinds := map[string]int{}
	for i, name := range p.logs {
		for _, l := range strings.Split(readFrom(name, p.logOffs[i]), "\n") {
			if !warnLine.MatchString(l) {
				continue
			}
			p.warnings++
			k := filepath.Base(filepath.Dir(name)) + ": " + logNoise.ReplaceAllString(l, "")
			if len(k) > 110 {
				k = k[:110]
			}
			kinds[k]++
		}
	}
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return kinds[ks[i]] > kinds[ks[j]] })
	for i, k := range ks {
		if i == 4 {
			break
		}
		p.samples = append(p.samples, fmt.Sprintf("%dx %s", kinds[k], k))
	}
}

// readFrom returns the file from offset off on ("" if unreadable).
func readFrom(name string, off int64) string {
	f, err := os.Open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	_, _ = f.Seek(off, io.SeekStart)
	b, _ := io.ReadAll(f)
	return string(b)
}

func (p *cutPhase) counts(prefix string) string {
	return fmt.Sprintf("%s_sent=%d %s_acked_in_cut=%d %s_answered_in_cut=%d %s_devices_reconnected=%d/%d %s_log_warnings=%d",
		prefix, p.nsent, prefix, p.acked, prefix, p.answered, prefix, p.reconnected, len(p.connects), prefix, p.warnings)
}

func (p *cutPhase) describe() string {
	return fmt.Sprintf("  minority %s, cut %.1fs: of %d messages sent meanwhile %d acked, %d answered before the heal; %d of %d devices reconnected; %d warnings logged (its log, the termservers'), most: %s",
		p.name, p.took.Seconds(), p.nsent, p.acked, p.answered, p.reconnected, len(p.connects), p.warnings, strings.Join(p.samples, " | "))
}
