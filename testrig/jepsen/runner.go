package jepsen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/testrig/cluster"
)

// RunConfig says what a schedule runs on.
type RunConfig struct {
	Termserver string // the termserver binary (cluster.BuildTermserver)
	NATSServer string // the nats-server binary (cluster.BuildNATSServer)
	Dir        string // this schedule's files: nodes, run log, history.jsonl

	Devices    int           // devices (default 20)
	Burst      int           // messages each device sends at once (default 3: several in flight)
	Interval   time.Duration // between a device's bursts (default 3 s)
	AgentDelay time.Duration // how long a run takes (default 0.3 s)
	Lease      time.Duration // leaseSeconds (default 2 s); the ack wait is 2.5 leases
	Partitions int           // default 8
	// AnswerBound bounds the wait, after the faults, for every message
	// sent to be answered (default 90 s).
	AnswerBound time.Duration
	// Netns runs every node in its network namespace of the layout
	// testrig/bench/jepsen-partition.sh makes (netnsLayout; as root, see
	// NetnsReady): needed for partition faults.
	Netns bool
	// DiskFull puts each NATS node's store on a tmpfs of StoreTmpfsSize
	// (as root, see DiskFullReady), unmounted after the run: needed for
	// disk_full faults.
	DiskFull bool
	// Log, when set, gets progress lines.
	Log func(format string, args ...any)
}

func (c *RunConfig) defaults() {
	if c.Devices <= 0 {
		c.Devices = 20
	}
	if c.Burst <= 0 {
		c.Burst = 3
	}
	if c.Interval <= 0 {
		c.Interval = 3 * time.Second
	}
	if c.AgentDelay <= 0 {
		c.AgentDelay = 300 * time.Millisecond
	}
	if c.Lease <= 0 {
		c.Lease = 2 * time.Second
	}
	if c.Partitions <= 0 {
		c.Partitions = 8
	}
	if c.AnswerBound <= 0 {
		c.AnswerBound = 90 * time.Second
	}
	if c.Log == nil {
		c.Log = func(string, ...any) {}
	}
}

// RunTopology is the nodes RunSchedule starts.
var RunTopology = Topology{NATS: []string{"n1", "n2", "n3"}, Edges: []string{"edge-1", "edge-2"}, Workers: []string{"worker-1", "worker-2"}}

// Result is one schedule's outcome.
type Result struct {
	Schedule    Schedule
	Report      Report
	HistoryFile string
	Unanswered  int      // messages sent and still unanswered when the wait ended
	FaultErrors []string // faults the nemesis could not apply or heal
}

// RunSchedule starts 3 NATS nodes, 2 edges and 2 workers as processes
// with the recording agent, runs cfg.Devices devices through the
// schedule's faults, lets the cluster heal, waits until every message
// is answered (or cfg.AnswerBound passes), stops everything, and checks
// the history (written to cfg.Dir/history.jsonl).
func RunSchedule(ctx context.Context, cfg RunConfig, sched Schedule) (res Result, err error) {
	cfg.defaults()
	res.Schedule = sched
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return res, err
	}
	res.HistoryFile = filepath.Join(cfg.Dir, "history.jsonl")
	hf, err := os.Create(res.HistoryFile)
	if err != nil {
		return res, err
	}
	defer hf.Close()
	rec := NewRecorder(hf)
	runLog := filepath.Join(cfg.Dir, "runs.log")

	natsOpt := cluster.NATSOptions{Nodes: 3, Dir: filepath.Join(cfg.Dir, "nats"), Binary: cfg.NATSServer}
	if cfg.Netns {
		for _, name := range RunTopology.NATS {
			natsOpt.Netns, natsOpt.Hosts = append(natsOpt.Netns, netnsLayout[name].ns), append(natsOpt.Hosts, netnsLayout[name].host)
		}
	}
	if cfg.DiskFull {
		// The stores (StartNATS puts node nK's in Dir/nK/store) on tmpfs,
		// unmounted after the nodes stopped (this defer runs after theirs).
		var mounted []string
		defer func() {
			for _, d := range mounted {
				err = errors.Join(err, unmount(d))
			}
		}()
		for _, name := range RunTopology.NATS {
			d := filepath.Join(natsOpt.Dir, name, "store")
			if err := mountTmpfs(d, StoreTmpfsSize); err != nil {
				return res, err
			}
			mounted = append(mounted, d)
		}
	}
	nc, err := cluster.StartNATS(ctx, natsOpt)
	if err != nil {
		return res, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		defer cancel()
		err = errors.Join(err, nc.Close(cctx))
	}()
	nodes := map[string]*cluster.Server{}
	var servers []*cluster.Server
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		defer cancel()
		for _, s := range servers {
			err = errors.Join(err, s.Close(cctx))
		}
	}()
	agent := recordingAgent(runLog, cfg.AgentDelay)
	clusterKeys := map[string]any{"leaseSeconds": int(cfg.Lease.Seconds()), "ackWaitSeconds": int(cfg.Lease.Seconds() * 2.5)}
	var releasesKeys map[string]any
	if cfg.DiskFull {
		// The history stream reserves historyMaxMegabytes (4 GiB by
		// default) and the releases' object store releases.maxBytes (1
		// GiB) on every node: more than a store's tmpfs has.
		clusterKeys["historyMaxMegabytes"] = storeHistoryMiB
		releasesKeys = map[string]any{"maxBytes": storeReleasesBytes}
	}
	for _, name := range append(append([]string{}, RunTopology.Edges...), RunTopology.Workers...) {
		role := "edge"
		if strings.HasPrefix(name, "worker") {
			role = "worker"
		}
		spec := cluster.NodeSpec{Name: name, Role: role, NATS: nc.URLs(),
			Partitions: cfg.Partitions, Replicas: 3, Agent: agent, Cluster: clusterKeys, Releases: releasesKeys, Dir: filepath.Join(cfg.Dir, name)}
		if cfg.Netns {
			spec.Netns, spec.Host = netnsLayout[name].ns, netnsLayout[name].host
		}
		s, err := cluster.StartServer(ctx, cfg.Termserver, spec)
		if err != nil {
			return res, err
		}
		servers = append(servers, s)
		nodes[name] = s
	}
	if cfg.Netns { // whatever a failed heal left cut off, back before the nodes stop
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			err = errors.Join(err, healPartitions(cctx))
		}()
	}
	// WaitClusterNodes reads /api/status, which answers loopback clients
	// only (no admin tokens): in the namespaces the nodes listen on
	// their bridges' addresses, and the warm-up below is the wait.
	for _, s := range servers {
		if cfg.Netns {
			break
		}
		if err := s.WaitClusterNodes(ctx, len(servers)); err != nil {
			return res, err
		}
	}
	cfg.Log("seed %d: cluster up in %s", sched.Seed, cfg.Dir)

	// The devices, each on one edge with the other as its fallback.
	devs := make([]*device, cfg.Devices)
	for i := range devs {
		e1, e2 := servers[i%2], servers[(i+1)%2]
		d, err := startDevice(fmt.Sprintf("j%d-d%02d", sched.Seed, i), e1.WSURL(), e2.WSURL(), rec)
		if err != nil {
			return res, err
		}
		devs[i] = d
		defer d.close()
	}
	// Warm-up: each device's first message answered before the faults
	// (the partitions' consumers have their leaders).
	for _, d := range devs {
		if err := d.send(ctx); err != nil {
			return res, err
		}
	}
	if err := testwait.Poll(ctx, 2*time.Minute, func() error { return unansweredErr(devs) }); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	cfg.Log("seed %d: warm-up answered; faults for %v", sched.Seed, sched.Span)

	// The devices send, and the nemesis applies the schedule.
	start := time.Now()
	sendCtx, stopSending := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, d := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.sendLoop(sendCtx, cfg.Burst, cfg.Interval, time.Duration(i)*cfg.Interval/time.Duration(len(devs)))
		}()
	}
	n := &nemesis{rec: rec, nats: nc, servers: nodes, netns: cfg.Netns, diskFull: cfg.DiskFull,
		log: func(format string, args ...any) { cfg.Log("seed %d: "+format, append([]any{sched.Seed}, args...)...) }}
	res.FaultErrors = n.apply(ctx, start, sched)
	stopSending()
	wg.Wait()
	cfg.Log("seed %d: faults healed; waiting for the answers", sched.Seed)

	// Every message answered, or the bound passed.
	_ = testwait.Poll(ctx, cfg.AnswerBound, func() error { return unansweredErr(devs) })
	for _, d := range devs {
		d.close()
		res.Unanswered += d.unanswered()
	}

	// The runs (the agent's log) and the interruptions (the cluster's
	// history), then the check.
	texts := map[string]Event{}
	for _, e := range rec.History() {
		if e.Kind == KindSend {
			texts[e.Text] = e
		}
	}
	workspaces := map[string]string{}
	for _, name := range RunTopology.Workers {
		workspaces[filepath.Join(nodes[name].Spec.Dir, "workspace")] = name
	}
	runs, err := readRunLog(runLog, texts, workspaces)
	if err != nil {
		return res, err
	}
	for _, e := range runs {
		rec.Add(e)
	}
	inter, err := readInterruptions(ctx, nc.URLs(), devs)
	if err != nil {
		return res, err
	}
	for _, e := range inter {
		rec.Add(e)
	}
	if err := rec.Err(); err != nil {
		return res, fmt.Errorf("writing %s: %w", res.HistoryFile, err)
	}
	res.Report = Check(rec.History(), Options{StallLimit: 2 * cfg.Lease})
	return res, nil
}

func unansweredErr(devs []*device) error {
	n := 0
	for _, d := range devs {
		n += d.unanswered()
	}
	if n > 0 {
		return fmt.Errorf("%d messages unanswered", n)
	}
	return nil
}

// recordingAgent is a plain Terminal Protocol v1 agent that appends
// "start <unix ns> <workspace> <text>" to runLog when a run starts and
// "end ..." when it ends, works for delay, and answers "You said:
// <text>".
func recordingAgent(runLog string, delay time.Duration) cluster.Agent {
	q := strconv.Quote(runLog)
	return cluster.Agent{
		Command: fmt.Sprintf(`echo start "$(date +%%s%%N)" "$(pwd)" {message} >> %s; sleep %.2f; echo end "$(date +%%s%%N)" "$(pwd)" {message} >> %s; printf 'You said: %%s' {message}`,
			q, delay.Seconds(), q),
		Protocol:       "plain",
		TimeoutSeconds: 60,
	}
}

// readRunLog turns the run log into run_start and run_end events: the
// message by its text (texts: the send events), the node by the
// workspace the run started in.
func readRunLog(path string, texts map[string]Event, workspaces map[string]string) (History, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var h History
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 || (fields[0] != "start" && fields[0] != "end") {
			return nil, fmt.Errorf("run log %s line %d: %q: want start|end NS WORKSPACE TEXT", path, line, sc.Text())
		}
		ns, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("run log %s line %d: %w", path, line, err)
		}
		node := ""
		for ws, name := range workspaces {
			if fields[2] == ws || strings.HasPrefix(fields[2], ws+string(filepath.Separator)) {
				node = name
			}
		}
		if node == "" {
			node = "unknown:" + fields[2]
		}
		kind := KindRunStart
		if fields[0] == "end" {
			kind = KindRunEnd
		}
		e := Event{Kind: kind, Time: ns, Node: node}
		if s, ok := texts[fields[3]]; ok {
			e.Device, e.Message, e.Seq = s.Device, s.Message, s.Seq
		} else { // a run of a text no device sent: a phantom
			dev, _, _ := strings.Cut(fields[3], "-m")
			e.Device, e.Message = dev, "text:"+fields[3]
		}
		h = append(h, e)
	}
	return h, sc.Err()
}

// readInterruptions reads the cluster's history stream (TERMLINK_HIST)
// and returns an interrupted event for each message of the devices that
// has a run_interrupted record.
func readInterruptions(ctx context.Context, urls string, devs []*device) (History, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	peers := map[string]bool{}
	for _, d := range devs {
		peers[d.peer] = true
	}
	conn, err := nats.Connect(urls)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, "TERMLINK_HIST")
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var h History
	seen := map[string]bool{}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) || strings.Contains(err.Error(), "not found") {
				continue
			}
			return nil, fmt.Errorf("history seq %d: %w", seq, err)
		}
		var c struct {
			State   string           `json:"state"`
			Session string           `json:"session"`
			Record  map[string]any   `json:"record"`
			Records []map[string]any `json:"records"`
		}
		if err := json.Unmarshal(m.Data, &c); err != nil {
			return nil, fmt.Errorf("history seq %d: %w: %s", seq, err, m.Data)
		}
		if c.Record != nil {
			c.Records = append(c.Records, c.Record)
		}
		peer := c.Session[strings.LastIndex(c.Session, ":")+1:]
		if !peers[peer] {
			continue
		}
		for _, r := range c.Records {
			ev, _ := r["event"].(string)
			role, _ := r["role"].(string)
			id, _ := r["message_id"].(string)
			if role != "system" || ev != "run_interrupted" || id == "" || seen[peer+"/"+id] {
				continue
			}
			seen[peer+"/"+id] = true
			h = append(h, Event{Kind: KindInterrupted, Time: m.Time.UnixNano(), Device: peer, Session: c.Session, Message: id})
		}
	}
	return h, nil
}

// nemesis applies a schedule's faults to the nodes.
type nemesis struct {
	rec      *Recorder
	nats     *cluster.NATS
	servers  map[string]*cluster.Server
	netns    bool // the nodes run in netnsLayout's namespaces
	diskFull bool // the NATS stores are on tmpfs
	log      func(format string, args ...any)
}

// apply runs each fault at its time (a goroutine each, all waited for;
// on one node, after the fault before it healed) and returns what
// failed. A fault started is always healed, even when
// ctx ends (a paused node is continued, a killed one restarted with a
// fresh context bounded to a minute).
func (n *nemesis) apply(ctx context.Context, start time.Time, s Schedule) []string {
	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
	)
	fail := func(f Fault, err error) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf("%s: %v", f, err))
		mu.Unlock()
	}
	// A node's next fault waits until its last one is healed (a restart
	// can take longer than the gap the schedule left).
	healed := map[string]chan struct{}{}
	for _, f := range s.Faults {
		prev, done := healed[f.Node], make(chan struct{})
		healed[f.Node] = done
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			if prev != nil {
				select {
				case <-prev:
				case <-ctx.Done():
					return
				}
			}
			if !waitUntil(ctx, start.Add(f.At)) {
				return
			}
			if f.Note == "" {
				f.Note = n.othersBehind(ctx, f.Node)
			}
			heal, err := n.begin(ctx, f)
			if err != nil {
				fail(f, err)
				return
			}
			n.rec.Add(Event{Kind: KindFaultStart, Time: time.Now().UnixNano(), Fault: f.Kind, Node: f.Node, Note: f.Note})
			waitUntil(ctx, start.Add(f.End()))
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			note, err := heal(hctx)
			if err != nil {
				fail(f, fmt.Errorf("healing: %w", err))
			} else if nn := n.natsNode(f.Node); nn != nil {
				note = joinNotes(note, n.waitHealthy(hctx, nn))
			}
			if note != "" {
				n.log("%s %s healed: %s", f.Kind, f.Node, note)
			}
			n.rec.Add(Event{Kind: KindFaultEnd, Time: time.Now().UnixNano(), Fault: f.Kind, Node: f.Node, Note: note})
		}()
	}
	wg.Wait()
	return errs
}

// natsNode returns the NATS node named name, or nil.
func (n *nemesis) natsNode(name string) *cluster.NATSNode {
	for _, x := range n.nats.Nodes {
		if x.Name == name {
			return x
		}
	}
	return nil
}

// othersBehind returns, when a fault on NATS node node is about to
// start while another NATS node is not healthy (its /healthz: down, cut
// off, or back but not caught up with its raft groups), a note that the
// fault is beyond what JetStream promises and why; "" otherwise. The
// schedule's minority rule counts a node as faulted for a fixed CatchUp
// after it is back; this is what nats-server itself says at the moment
// the fault starts (a node back from a full disk took 90 s to catch up).
func (n *nemesis) othersBehind(ctx context.Context, node string) string {
	if n.natsNode(node) == nil {
		return ""
	}
	var behind []string
	for _, x := range n.nats.Nodes {
		if x.Name == node {
			continue
		}
		if err := x.Healthy(ctx); err != nil {
			behind = append(behind, err.Error())
		}
	}
	if len(behind) == 0 {
		return ""
	}
	return "beyond what JetStream promises: another NATS node not healthy when it started (" + strings.Join(behind, "; ") + ")"
}

// healthyWait bounds how long a NATS fault's heal waits for the node's
// /healthz to say ok.
const healthyWait = 30 * time.Second

// waitHealthy waits (at most healthyWait) until nn's /healthz says ok, so
// that a NATS fault's window lasts until the node has caught up, and
// returns a note for the fault_end event: how long that took, or that it
// did not.
func (n *nemesis) waitHealthy(ctx context.Context, nn *cluster.NATSNode) string {
	t0 := time.Now()
	err := testwait.Poll(ctx, healthyWait, func() error { return nn.Healthy(ctx) })
	if err != nil {
		n.log("%s not healthy %v after its heal: %v", nn.Name, healthyWait, err)
		return fmt.Sprintf("not healthy %v after the heal: %v", healthyWait, err)
	}
	if d := time.Since(t0); d >= time.Second {
		return fmt.Sprintf("healthy %v after the heal", d.Round(100*time.Millisecond))
	}
	return ""
}

// joinNotes joins two notes, either possibly empty.
func joinNotes(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// waitUntil waits for t or ctx's end; it reports whether t came.
func waitUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// restarted turns a restart into a heal with no note.
func restarted(start func(context.Context) error) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) { return "", start(ctx) }
}

// begin applies f and returns how to heal it (the heal's note, if any,
// goes in the fault_end event).
func (n *nemesis) begin(ctx context.Context, f Fault) (func(context.Context) (string, error), error) {
	var nn *cluster.NATSNode
	for _, x := range n.nats.Nodes {
		if x.Name == f.Node {
			nn = x
		}
	}
	s := n.servers[f.Node]
	if nn == nil && s == nil {
		return nil, fmt.Errorf("no node %s", f.Node)
	}
	switch f.Kind {
	case FaultKillNATS:
		if nn == nil {
			return nil, fmt.Errorf("%s is not a NATS node", f.Node)
		}
		nn.Kill()
		return restarted(nn.Start), nil
	case FaultKillEdge, FaultKillWorker:
		if s == nil {
			return nil, fmt.Errorf("%s is not a termserver", f.Node)
		}
		s.Kill()
		return restarted(s.Start), nil
	case FaultPause:
		marker := ""
		if nn != nil {
			marker = filepath.Join(filepath.Dir(nn.LogFile), "nats.conf")
		} else {
			marker = s.ConfigFile
		}
		pid, err := findPID(marker)
		if err != nil {
			return nil, err
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("SIGSTOP %s (pid %d): %w", f.Node, pid, err)
		}
		return func(context.Context) (string, error) { return "", syscall.Kill(pid, syscall.SIGCONT) }, nil
	case FaultPartition:
		if !n.netns {
			return nil, errors.New("the nodes do not run in network namespaces (RunConfig.Netns)")
		}
		return partition(ctx, f.Node)
	case FaultDiskFull:
		if nn == nil {
			return nil, fmt.Errorf("%s is not a NATS node", f.Node)
		}
		if !n.diskFull {
			return nil, errors.New("the NATS stores are not on tmpfs (RunConfig.DiskFull)")
		}
		return n.fillStore(ctx, nn)
	}
	return nil, fmt.Errorf("unknown fault %q", f.Kind)
}

// fillStore fills nn's store (its tmpfs) with a filler file and returns
// the heal: the filler removed. nats-server turns JetStream off for good
// when a write finds no space ("JetStream out of resources, will be
// DISABLED"); the heal then restarts the node (gracefully), as an
// operator who freed the disk would, and says so.
func (n *nemesis) fillStore(ctx context.Context, nn *cluster.NATSNode) (func(context.Context) (string, error), error) {
	var off int64
	if st, err := os.Stat(nn.LogFile); err == nil {
		off = st.Size()
	}
	filler := filepath.Join(nn.StoreDir, fillerName)
	wrote, err := fillDisk(ctx, nn.StoreDir)
	if err != nil {
		_ = os.Remove(filler)
		return nil, fmt.Errorf("filling %s: %w", nn.StoreDir, err)
	}
	n.log("disk_full %s: %d MiB of filler in %s", nn.Name, wrote>>20, nn.StoreDir)
	return func(ctx context.Context) (string, error) {
		if err := os.Remove(filler); err != nil {
			return "", err
		}
		if !strings.Contains(readFrom(nn.LogFile, off), "will be DISABLED") {
			return "", nil
		}
		if err := nn.Stop(ctx); err != nil {
			return "", err
		}
		if err := nn.Start(ctx); err != nil {
			return "", err
		}
		return "JetStream disabled itself (out of space): node restarted", nil
	}, nil
}

// readFrom returns the file from offset off on ("" if unreadable).
func readFrom(name string, off int64) string {
	f, err := os.Open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, 0); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// findPID finds the process whose command line has the argument arg
// (the node's config file: unique to the node this runner started).
// testrig/cluster keeps its processes' ids to itself.
func findPID(arg string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 0 && (args[0] == "ip" || strings.HasSuffix(args[0], "/sh")) {
			continue // not the node itself
		}
		for _, a := range args {
			if a == arg {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process runs with %s", arg)
}

// device is a link.Client that records its sends, acks, refusals,
// resends and replies.
type device struct {
	peer string
	rec  *Recorder
	c    *link.Client
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu       sync.Mutex
	seq      int
	online   bool
	pending  map[string]*pendingMsg // message id -> unanswered message
	answered map[string]bool
	closed   bool
}

type pendingMsg struct {
	seq  int
	sent bool // went out on a connection (it is resent at the next)
}

func startDevice(peer, url, fallback string, rec *Recorder) (*device, error) {
	d := &device{peer: peer, rec: rec, pending: map[string]*pendingMsg{}, answered: map[string]bool{}}
	c, err := link.NewClient(link.ClientConfig{URL: url, Fallbacks: []string{fallback}, PeerID: peer, DeviceName: peer,
		Outbox: link.NewMemoryOutbox(), RetryInitial: 100 * time.Millisecond, RetryMax: time.Second,
		Heartbeat: 2 * time.Second, PongTimeout: 3 * time.Second, Logger: slog.New(&busyHandler{d: d})})
	if err != nil {
		return nil, err
	}
	d.c = c
	ctx, cancel := context.WithCancel(context.Background())
	d.stop = cancel
	d.wg.Add(2)
	go func() { defer d.wg.Done(); _ = c.Run(ctx) }()
	go func() { defer d.wg.Done(); d.events() }()
	return d, nil
}

func (d *device) now() int64 { return time.Now().UnixNano() }

// send sends the device's next message.
func (d *device) send(ctx context.Context) error {
	d.mu.Lock()
	d.seq++
	seq := d.seq
	d.mu.Unlock()
	text := fmt.Sprintf("%s-m%d", d.peer, seq)
	t := d.now()
	id, err := d.c.Send(ctx, text)
	if err != nil {
		return fmt.Errorf("device %s: %w", d.peer, err)
	}
	d.mu.Lock()
	if !d.answered[id] {
		d.pending[id] = &pendingMsg{seq: seq, sent: d.online}
	}
	d.mu.Unlock()
	d.rec.Add(Event{Kind: KindSend, Time: t, Device: d.peer, Message: id, Seq: seq, Text: text})
	return nil
}

// sendLoop sends burst messages every interval (the first after
// offset) until ctx ends.
func (d *device) sendLoop(ctx context.Context, burst int, interval, offset time.Duration) {
	next := time.Now().Add(offset)
	for waitUntil(ctx, next) {
		for range burst {
			if d.send(ctx) != nil {
				return
			}
		}
		next = next.Add(interval)
	}
}

func (d *device) seqOf(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.pending[id]; p != nil {
		return p.seq
	}
	return 0
}

func (d *device) events() {
	acked := map[string]bool{}
	for e := range d.c.Events() {
		t := e.Time.UnixNano()
		if e.Time.IsZero() {
			t = d.now()
		}
		switch e.Kind {
		case link.EventState:
			d.mu.Lock()
			d.online = e.State == link.StateConnected
			var resent []Event
			if d.online {
				for id, p := range d.pending {
					if p.sent {
						resent = append(resent, Event{Kind: KindResend, Time: t, Device: d.peer, Session: e.SessionID, Message: id, Seq: p.seq})
					}
					p.sent = true
				}
			}
			d.mu.Unlock()
			for _, r := range resent {
				d.rec.Add(r)
			}
		case link.EventAck:
			if !acked[e.MessageID] {
				acked[e.MessageID] = true
				d.rec.Add(Event{Kind: KindAck, Time: t, Device: d.peer, Session: e.Ack.SessionID, Message: e.MessageID, Seq: d.seqOf(e.MessageID)})
			}
		case link.EventReply:
			ev := Event{Kind: KindReply, Time: t, Device: d.peer, Message: e.MessageID, Seq: d.seqOf(e.MessageID), Text: e.Reply.Text}
			if e.Reply.FinishReason == link.FinishError {
				// An answer that is an error (a message cut short
				// twice): the checker tells it from a wrong answer.
				ev.Err = "finish_reason error: " + e.Reply.Text
			}
			d.answer(ev)
		case link.EventError:
			if e.MessageID == "" {
				continue
			}
			if e.Final {
				msg := "error"
				if e.Err != nil {
					msg = e.Err.Error()
				}
				d.answer(Event{Kind: KindReply, Time: t, Device: d.peer, Message: e.MessageID, Seq: d.seqOf(e.MessageID), Err: e.Code + ": " + msg})
			} else {
				d.rec.Add(Event{Kind: KindRefused, Time: t, Device: d.peer, Message: e.MessageID, Seq: d.seqOf(e.MessageID), Note: e.Code})
			}
		}
	}
}

func (d *device) answer(e Event) {
	d.mu.Lock()
	delete(d.pending, e.Message)
	d.answered[e.Message] = true
	d.mu.Unlock()
	d.rec.Add(e)
	_ = d.c.Delivered(e.Message)
}

// unanswered counts the messages sent and not answered.
func (d *device) unanswered() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}

// close stops the client and waits for its goroutines.
func (d *device) close() {
	d.mu.Lock()
	closed := d.closed
	d.closed = true
	d.mu.Unlock()
	if closed {
		return
	}
	_ = d.c.Close()
	d.stop()
	d.wg.Wait()
}

// busyHandler is the client's logger: it records the refusals the
// client does not report as events (code busy: resent after a backoff).
type busyHandler struct{ d *device }

func (h *busyHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *busyHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *busyHandler) WithGroup(string) slog.Handler            { return h }
func (h *busyHandler) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "server busy") {
		return nil
	}
	var id, reason string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "message_id":
			id = a.Value.String()
		case "reason":
			reason = a.Value.String()
		}
		return true
	})
	if id != "" {
		h.d.rec.Add(Event{Kind: KindRefused, Time: r.Time.UnixNano(), Device: h.d.peer, Message: id, Seq: h.d.seqOf(id), Note: "busy: " + reason})
	}
	return nil
}
