package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSOptions configures StartNATS.
type NATSOptions struct {
	// Nodes is the number of JetStream nodes (default 3).
	Nodes int
	// Dir holds each node's store, config file and log (required).
	Dir string
	// Binary is the nats-server executable (BuildNATSServer): the nodes
	// run as processes. Empty: they run in this process, as a library.
	Binary string
	// ClusterName is the NATS cluster's name (default "termlink").
	ClusterName string
	// SyncAlways makes every node fsync each JetStream write before it
	// acks it (nats-server's jetstream { sync_interval: always }). False:
	// nats-server's default, an fsync every 2 minutes.
	SyncAlways bool
	// Netns, when set, names for each node (by index) the network
	// namespace it runs in (ip netns exec NAME; the nodes must be
	// processes) and Hosts the address it listens on there (default
	// 127.0.0.1). Off by default: testrig/bench/cluster-partition.sh
	// makes the namespaces.
	Netns, Hosts []string
}

// NATS is a JetStream cluster on loopback.
type NATS struct {
	Nodes []*NATSNode
}

// NATSNode is one nats-server of the cluster. Its ports and store stay
// the same across Stop/Kill and Start.
type NATSNode struct {
	Name        string // n1, n2, ...
	Host        string // the address it listens on (127.0.0.1 unless NATSOptions.Hosts)
	Netns       string // the network namespace it runs in ("": this one's)
	ClientPort  int
	ClusterPort int
	// MonitorPort is nats-server's HTTP monitoring port (Healthy asks
	// its /healthz).
	MonitorPort int
	StoreDir    string
	LogFile     string

	clusterName string
	routes      []string // every node's cluster URL, this one's included
	syncAlways  bool     // jetstream { sync_interval: always }
	binary      string
	confFile    string

	mu  sync.Mutex
	run natsRun // nil while stopped
}

// natsRun is one running nats-server: a process or an in-process server.
type natsRun interface {
	stop(ctx context.Context) error // graceful
	kill()                          // at once (SIGKILL for a process)
	exited() bool
}

// URL is the node's client URL.
func (n *NATSNode) URL() string {
	return "nats://" + net.JoinHostPort(n.Host, strconv.Itoa(n.ClientPort))
}

// URLs returns every node's client URL, comma-separated: a termserver
// config's cluster.nats.
func (c *NATS) URLs() string {
	var us []string
	for _, n := range c.Nodes {
		us = append(us, n.URL())
	}
	return strings.Join(us, ",")
}

// StartNATS starts a JetStream cluster and waits until it is ready
// (WaitReady). A port taken meanwhile by someone else makes it try again
// with new ports (three times).
func StartNATS(ctx context.Context, opt NATSOptions) (*NATS, error) {
	if opt.Nodes == 0 {
		opt.Nodes = 3
	}
	if opt.Nodes < 1 {
		return nil, fmt.Errorf("nats: %d nodes: want at least 1", opt.Nodes)
	}
	if opt.Dir == "" {
		return nil, errors.New("nats: no directory for the nodes' files")
	}
	if opt.ClusterName == "" {
		opt.ClusterName = "termlink"
	}
	if len(opt.Netns) > 0 && (len(opt.Netns) != opt.Nodes || len(opt.Hosts) != opt.Nodes || opt.Binary == "") {
		return nil, fmt.Errorf("nats: Netns needs one namespace and one host per node, and a Binary")
	}
	var err error
	for range 3 {
		var c *NATS
		if c, err = startNATSOnce(ctx, opt); err == nil {
			if err = c.WaitReady(ctx); err != nil {
				_ = c.Close(context.Background())
				return nil, err
			}
			return c, nil
		}
		if !addrInUse(err) {
			return nil, err
		}
	}
	return nil, err
}

func startNATSOnce(ctx context.Context, opt NATSOptions) (*NATS, error) {
	ports, err := freePorts(3 * opt.Nodes)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	c := &NATS{}
	hosts, netns := make([]string, opt.Nodes), make([]string, opt.Nodes)
	var routes []string
	for i := range opt.Nodes {
		hosts[i] = "127.0.0.1"
		if i < len(opt.Hosts) {
			hosts[i] = opt.Hosts[i]
		}
		if i < len(opt.Netns) {
			netns[i] = opt.Netns[i]
		}
		routes = append(routes, "nats://"+net.JoinHostPort(hosts[i], strconv.Itoa(ports[3*i+1])))
	}
	for i := range opt.Nodes {
		name := "n" + strconv.Itoa(i+1)
		dir := filepath.Join(opt.Dir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("nats %s: %w", name, err)
		}
		c.Nodes = append(c.Nodes, &NATSNode{
			Name: name, Host: hosts[i], Netns: netns[i], ClientPort: ports[3*i], ClusterPort: ports[3*i+1], MonitorPort: ports[3*i+2],
			StoreDir: filepath.Join(dir, "store"), LogFile: filepath.Join(dir, "nats.log"),
			clusterName: opt.ClusterName, routes: routes, binary: opt.Binary, syncAlways: opt.SyncAlways,
			confFile: filepath.Join(dir, "nats.conf"),
		})
	}
	for _, n := range c.Nodes {
		if err := n.start(ctx); err != nil {
			_ = c.Close(context.Background())
			return nil, err
		}
	}
	return c, nil
}

// Start starts a stopped node again with the same ports and store, and
// waits until it accepts clients (not until it has caught up: call
// WaitReady for that). A port taken meanwhile is retried for 10 s.
func (n *NATSNode) Start(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := n.start(ctx)
		if err == nil || !addrInUse(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *NATSNode) start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.run != nil && !n.run.exited() {
		return fmt.Errorf("nats %s: already running", n.Name)
	}
	var (
		r   natsRun
		err error
	)
	if n.binary != "" {
		r, err = n.startProcess(ctx)
	} else {
		r, err = n.startEmbedded()
	}
	if err != nil {
		return err
	}
	n.run = r
	return nil
}

// Stop shuts the node down gracefully (SIGTERM for a process).
func (n *NATSNode) Stop(ctx context.Context) error {
	n.mu.Lock()
	r := n.run
	n.run = nil
	n.mu.Unlock()
	if r == nil {
		return nil
	}
	if err := r.stop(ctx); err != nil {
		return fmt.Errorf("nats %s: %w", n.Name, err)
	}
	return nil
}

// Kill ends the node at once: SIGKILL for a process; an in-process
// server cannot be killed, it is shut down.
func (n *NATSNode) Kill() {
	n.mu.Lock()
	r := n.run
	n.run = nil
	n.mu.Unlock()
	if r != nil {
		r.kill()
	}
}

// Healthy asks the node's /healthz (nats-server's own check: JetStream
// enabled, the meta group and every stream and consumer this node has a
// replica of current) and returns nil when it answers ok, otherwise what
// it said or why it could not be asked. A node that is down, cut off or
// still catching up after a restart is not healthy.
func (n *NATSNode) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	u := "http://" + net.JoinHostPort(n.Host, strconv.Itoa(n.MonitorPort)) + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("nats %s: healthz: %w", n.Name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("nats %s: healthz %d: %s", n.Name, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// Running reports whether the node has been started and has not exited.
func (n *NATSNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.run != nil && !n.run.exited()
}

// Close stops every node (SIGTERM, then SIGKILL after a grace period or
// when ctx ends).
func (c *NATS) Close(ctx context.Context) error {
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Stop(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitListening waits until the node's client port and its cluster
// (route) port accept connections, or its run has exited (then the error
// has its log tail). A node whose cluster port was taken between
// freePorts and its start listened for clients and then exited: the other
// nodes dialled its route for a minute and the cluster never became ready
// (TestMoveEdgeMidConversation in a make test); it is errAddrInUse now,
// and StartNATS tries again on other ports.
func (n *NATSNode) waitListening(ctx context.Context, r natsRun) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ports := []int{n.ClientPort}
	if len(n.routes) >= 2 { // a node alone has no cluster block (natsConfig)
		ports = append(ports, n.ClusterPort)
	}
	for _, port := range ports {
		if err := n.waitPort(ctx, r, port); err != nil {
			return err
		}
	}
	return nil
}

// waitPort waits until port accepts connections or the run has exited.
func (n *NATSNode) waitPort(ctx context.Context, r natsRun, port int) error {
	addr := net.JoinHostPort(n.Host, strconv.Itoa(port))
	for {
		if r.exited() {
			tail := logTail(n.LogFile, 20)
			if strings.Contains(tail, "address already in use") {
				return fmt.Errorf("nats %s exited: %w; log:\n%s", n.Name, errAddrInUse, tail)
			}
			return fmt.Errorf("nats %s exited before it listened on %s; log:\n%s", n.Name, addr, tail)
		}
		d := net.Dialer{Timeout: time.Second}
		if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			r.kill()
			return fmt.Errorf("nats %s did not listen on %s: %w; log:\n%s", n.Name, addr, ctx.Err(), logTail(n.LogFile, 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ReadyTimeout bounds WaitReady.
const ReadyTimeout = 60 * time.Second

// WaitReady waits (at most ReadyTimeout) until every running node
// answers a JetStream request (which needs an elected meta leader) and
// the cluster can place a stream replicated on every node (all of them
// have joined JetStream). The error names the node that is not ready,
// with the tail of its log.
func (c *NATS) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	var running []*NATSNode
	for _, n := range c.Nodes {
		if n.Running() {
			running = append(running, n)
		}
	}
	for _, n := range running {
		if err := n.waitJetStream(ctx); err != nil {
			return err
		}
	}
	if len(running) == len(c.Nodes) {
		return c.probeReplicated(ctx)
	}
	return nil
}

// waitJetStream waits until a JetStream request through n succeeds.
func (n *NATSNode) waitJetStream(ctx context.Context) error {
	var last error
	for {
		last = func() error {
			nc, err := nats.Connect(n.URL(), nats.Timeout(2*time.Second), nats.MaxReconnects(0))
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err = js.AccountInfo(rctx)
			return err
		}()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nats %s (%s): JetStream not ready: %v; log:\n%s", n.Name, n.URL(), last, logTail(n.LogFile, 20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// probeReplicated creates and deletes a memory stream with one replica
// per node (at most 5, JetStream's limit): that succeeds only once every
// node has joined the JetStream meta group.
func (c *NATS) probeReplicated(ctx context.Context) error {
	replicas := min(len(c.Nodes), 5)
	nc, err := nats.Connect(c.URLs(), nats.Timeout(2*time.Second))
	if err != nil {
		return fmt.Errorf("nats: connecting to %s: %w", c.URLs(), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	name := "TERMRIG_READY_" + nats.NewInbox()[len(nats.InboxPrefix):]
	var last error
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, last = js.CreateStream(rctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{"termrig.ready." + name},
			Storage: jetstream.MemoryStorage, Replicas: replicas,
		})
		if last == nil {
			last = js.DeleteStream(rctx, name)
		}
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			var logs []string
			for _, n := range c.Nodes {
				logs = append(logs, fmt.Sprintf("--- %s (%s):\n%s", n.Name, n.URL(), logTail(n.LogFile, 10)))
			}
			return fmt.Errorf("nats: cannot place a stream with %d replicas (not every node joined JetStream): %v\n%s",
				replicas, last, strings.Join(logs, "\n"))
		case <-time.After(300 * time.Millisecond):
		}
	}
}
