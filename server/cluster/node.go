package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/config"
)

// Names of the streams, buckets and subjects (the README and the tests
// name them too).
const (
	InStream       = "TERMLINK_IN"
	HistStream     = "TERMLINK_HIST" // the session history, each message's claim and cached reply
	PresenceBucket = "termlink_presence"
	NodesBucket    = "termlink_nodes"
	PartsBucket    = "termlink_parts"

	inPrefix      = "termlink.in."
	histPrefix    = "termlink.hist."
	outPrefix     = "termlink.out."
	cancelSubject = "termlink.cancel"
)

// opTimeout bounds one NATS request when the caller's context has no
// deadline of its own.
const opTimeout = 10 * time.Second

// Node is this termserver's membership in the cluster: its NATS
// connection and the streams and buckets every node shares.
type Node struct {
	cfg config.Cluster
	log *slog.Logger

	nc       *nats.Conn
	js       jetstream.JetStream
	in       jetstream.Stream
	hist     jetstream.Stream
	presence jetstream.KeyValue
	nodes    jetstream.KeyValue
	parts    jetstream.KeyValue

	mu     sync.Mutex
	info   NodeInfo // what the heartbeat publishes
	subs   []*nats.Subscription
	worker *worker
	mirror atomic.Pointer[presenceMirror] // a worker's copy of the presence bucket (MirrorPresence)
	diag   *diagServer                    // an edge's diag requests (ServeDiag; nil: none)

	bg     sync.WaitGroup
	stopBg context.CancelFunc
	bgCtx  context.Context

	// histWait is how long a history read waits for a batch that does
	// not come (histFetchWait; tests take a short one).
	histWait time.Duration
}

// NodeInfo is one node as the nodes bucket has it.
type NodeInfo struct {
	Name            string  `json:"name"`
	Role            string  `json:"role"`
	URL             string  `json:"url,omitempty"`
	DevicesOnline   int     `json:"devicesOnline"`
	PartitionsOwned int     `json:"partitionsOwned"`
	Updated         string  `json:"updated"`
	SeenSecondsAgo  float64 `json:"seenSecondsAgo"`
}

// Open connects to NATS, creates or updates the streams and buckets, and
// checks that this node agrees with the cluster on the partition count.
func Open(ctx context.Context, cfg config.Cluster, log *slog.Logger) (*Node, error) {
	n, err := connect(cfg, log)
	if err != nil {
		return nil, err
	}
	// A cluster just started may not have elected its JetStream leader
	// yet, and requests then go unanswered: try again until ctx ends.
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = n.setup(actx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, errPartitions) {
			n.nc.Close()
			return nil, err
		}
		n.log.Warn("cluster: JetStream not ready; retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			n.nc.Close()
			return nil, err
		case <-time.After(time.Duration(min(attempt, 5)) * 500 * time.Millisecond):
		}
	}
	n.bgCtx, n.stopBg = context.WithCancel(context.Background())
	return n, nil
}

// OpenReader connects to read what the cluster stores (the session
// history) without joining it: no stream or bucket is created or changed.
func OpenReader(ctx context.Context, cfg config.Cluster, log *slog.Logger) (*Node, error) {
	n, err := connect(cfg, log)
	if err != nil {
		return nil, err
	}
	// As in Open: a JetStream that is electing its leader (a node just
	// restarted, or the cluster just started) answers "no responders" or
	// not at all; ask again for a while. A stream that is not there is
	// an answer, not a wait.
	ready, cancel := context.WithTimeout(ctx, readerReadyWait)
	defer cancel()
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ready, 5*time.Second)
		n.hist, err = n.js.Stream(actx, HistStream)
		acancel()
		if err == nil {
			break
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) || ready.Err() != nil {
			n.nc.Close()
			return nil, fmt.Errorf("cluster: stream %s: %w", HistStream, err)
		}
		n.log.Warn("cluster: JetStream not ready; retrying", "attempt", attempt, "err", err)
		select {
		case <-ready.Done():
			n.nc.Close()
			return nil, fmt.Errorf("cluster: stream %s: JetStream not ready within %s: %w", HistStream, readerReadyWait, err)
		case <-time.After(time.Duration(min(attempt, 5)) * 200 * time.Millisecond):
		}
	}
	n.bgCtx, n.stopBg = context.WithCancel(context.Background())
	return n, nil
}

// readerReadyWait is how long OpenReader waits for JetStream to answer.
const readerReadyWait = 30 * time.Second

func connect(cfg config.Cluster, log *slog.Logger) (*Node, error) {
	if log == nil {
		log = slog.Default()
	}
	opts := []nats.Option{
		nats.Name("termserver " + cfg.Name),
		nats.MaxReconnects(-1), // never give up: the cluster comes back
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("cluster: disconnected from NATS; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("cluster: reconnected to NATS", "server", c.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			log.Warn("cluster: NATS error", "subject", subj, "err", err)
		}),
	}
	if cfg.Credentials != "" {
		opts = append(opts, nats.UserCredentials(cfg.Credentials))
	}
	if cfg.TLS.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.TLS.CAFile))
	}
	if cfg.TLS.CertFile != "" {
		opts = append(opts, nats.ClientCert(cfg.TLS.CertFile, cfg.TLS.KeyFile))
	}
	nc, err := nats.Connect(strings.Join(cfg.NATS, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connecting to NATS %s: %w", strings.Join(cfg.NATS, ","), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: JetStream: %w", err)
	}
	return &Node{cfg: cfg, log: log, nc: nc, js: js, info: NodeInfo{Name: cfg.Name, Role: cfg.Role}, histWait: histFetchWait}, nil
}

// setup creates or updates what the cluster shares. Creation is
// idempotent, so every node does it at start.
func (n *Node) setup(ctx context.Context) error {
	// The cluster's partition count, from the stream that has it: a node
	// that names none takes it (the default for a new cluster), one that
	// names another is refused before it could change the stream's.
	if s, err := n.js.Stream(ctx, InStream); err == nil {
		if got, err := strconv.Atoi(s.CachedInfo().Config.Metadata["partitions"]); err == nil && got > 0 {
			if n.cfg.Partitions == 0 {
				n.cfg.Partitions = got
			} else if got != n.cfg.Partitions {
				return fmt.Errorf("%w: stream %s is partitioned %d ways, this node is configured with %d: every node must use the same cluster.partitions (or leave it out to take the cluster's)",
					errPartitions, InStream, got, n.cfg.Partitions)
			}
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("cluster: stream %s: %w", InStream, err)
	}
	if n.cfg.Partitions == 0 {
		n.cfg.Partitions = config.DefaultPartitions
	}
	cfg := n.cfg
	var err error
	partitions := strconv.Itoa(cfg.Partitions)
	n.in, err = ensure(ctx, "stream "+InStream, func(ctx context.Context) (jetstream.Stream, error) {
		return n.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        InStream,
			Description: "termlink: accepted device messages, one subject per session partition",
			Subjects:    []string{inPrefix + ">"},
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DuplicateWindow,
			MaxAge:      cfg.DedupeTTL, // a message older than its claim is never run
			Metadata:    map[string]string{"partitions": partitions},
		})
	})
	if err != nil {
		return err
	}
	info, err := n.in.Info(ctx)
	if err != nil {
		return fmt.Errorf("cluster: stream %s: %w", InStream, err)
	}
	if got := info.Config.Metadata["partitions"]; got != partitions {
		// CreateOrUpdate set ours: another node would have refused a
		// different count; say what the stream had.
		return fmt.Errorf("%w: stream %s is partitioned %s ways, this node is configured with %d: every node must use the same cluster.partitions", errPartitions, InStream, got, cfg.Partitions)
	}
	n.hist, err = ensure(ctx, "stream "+HistStream, func(ctx context.Context) (jetstream.Stream, error) {
		return n.js.CreateOrUpdateStream(ctx, histStreamConfig(cfg)) // retention.go
	})
	if err != nil {
		return histStreamError(cfg, err)
	}
	kv := func(name, what string, ttl time.Duration, storage jetstream.StorageType) (jetstream.KeyValue, error) {
		return ensure(ctx, "bucket "+name, func(ctx context.Context) (jetstream.KeyValue, error) {
			return n.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, Description: what,
				TTL: ttl, History: 1, Replicas: cfg.Replicas, Storage: storage})
		})
	}
	if n.presence, err = kv(PresenceBucket, "termlink: which edge holds which peer", 0, jetstream.FileStorage); err != nil {
		return err
	}
	if n.nodes, err = kv(NodesBucket, "termlink: live nodes", cfg.Lease, jetstream.MemoryStorage); err != nil {
		return err
	}
	if n.parts, err = kv(PartsBucket, "termlink: partition leases", cfg.Lease, jetstream.MemoryStorage); err != nil {
		return err
	}
	return nil
}

var errPartitions = errors.New("cluster: partition count mismatch")

// Name is this node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Config is the cluster block this node runs with.
func (n *Node) Config() config.Cluster { return n.cfg }

// Conn is the NATS connection.
func (n *Node) Conn() *nats.Conn { return n.nc }

// Close stops the heartbeat and the subscriptions, removes this node from
// the nodes bucket and closes the connection (draining what it sent).
func (n *Node) Close() {
	n.mu.Lock()
	d := n.diag
	n.mu.Unlock()
	if d != nil {
		d.stop() // first: its answers go out on the connection
	}
	n.stopBg()
	n.bg.Wait()
	n.mu.Lock()
	subs := n.subs
	n.subs = nil
	n.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	if n.nodes != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = n.nodes.Delete(ctx, n.cfg.Name)
		cancel()
	}
	_ = n.nc.Drain()
	n.nc.Close()
}

// Go runs fn on a goroutine the node owns until Close.
func (n *Node) Go(fn func(ctx context.Context)) {
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		fn(n.bgCtx)
	}()
}

// Partition is the partition of a session: FNV-1a of its key.
func Partition(sessionKey string, partitions int) int {
	h := fnv.New32a()
	h.Write([]byte(sessionKey))
	return int(h.Sum32() % uint32(partitions))
}

// MessageKey is a message's key in the dedupe bucket and its Nats-Msg-Id.
func MessageKey(sessionKey, messageID string) string {
	return "m." + digest(sessionKey+"\n"+messageID)
}

// SessionDigest names a session in subjects (session keys may hold
// characters subjects cannot).
func SessionDigest(sessionKey string) string { return digest(sessionKey) }

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:20])
}

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, opTimeout)
}

// SetURL records the node's HTTP base URL for the nodes bucket.
func (n *Node) SetURL(url string) {
	n.mu.Lock()
	n.info.URL = url
	n.mu.Unlock()
}

// Heartbeat publishes this node in the nodes bucket every lease/3 until
// Close; devices reports the devices online now.
func (n *Node) Heartbeat(devices func() int, owned func() int) {
	n.Go(func(ctx context.Context) {
		t := time.NewTicker(n.cfg.Lease / 3)
		defer t.Stop()
		for {
			n.beat(ctx, devices, owned)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

func (n *Node) beat(ctx context.Context, devices func() int, owned func() int) {
	n.mu.Lock()
	info := n.info
	n.mu.Unlock()
	if devices != nil {
		info.DevicesOnline = devices()
	}
	if owned != nil {
		info.PartitionsOwned = owned()
	}
	info.Updated = time.Now().UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(info)
	cctx, cancel := context.WithTimeout(ctx, n.cfg.Lease/3)
	defer cancel()
	if _, err := n.nodes.Put(cctx, info.Name, b); err != nil && ctx.Err() == nil {
		n.log.Warn("cluster: heartbeat not published", "err", err)
	}
}

// Nodes lists the live nodes, sorted by name.
func (n *Node) Nodes(ctx context.Context) ([]NodeInfo, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	keys, err := n.nodes.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: listing nodes: %w", err)
	}
	var out []NodeInfo
	for _, k := range keys {
		e, err := n.nodes.Get(ctx, k)
		if err != nil {
			continue // expired meanwhile
		}
		var ni NodeInfo
		if json.Unmarshal(e.Value(), &ni) != nil {
			continue
		}
		ni.SeenSecondsAgo = time.Since(e.Created()).Seconds()
		out = append(out, ni)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (n *Node) addSub(s *nats.Subscription) {
	n.mu.Lock()
	n.subs = append(n.subs, s)
	n.mu.Unlock()
}
