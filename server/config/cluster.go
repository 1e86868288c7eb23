package config

import (
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Cluster is the "cluster" block: the node is one of several termservers
// sharing a NATS JetStream cluster (package server/cluster). Absent, the
// server is the embedded single node and nothing of NATS runs.
//
//	"cluster": {"nats": "nats://a:4222,nats://b:4222", "role": "edge", "name": "edge-1",
//	            "partitions": 16, "replicas": 3, "credentials": "/etc/termlink/nats.creds",
//	            "tls": {"caFile": "ca.pem", "certFile": "c.pem", "keyFile": "k.pem"},
//	            "historyMaxAgeDays": 365, "historyMaxMegabytes": 4096, "consumerStuckSeconds": 20}
type Cluster struct {
	NATS        []string // server URLs
	Role        string   // RoleEdge, RoleWorker or RoleAll
	Name        string   // this node's name, unique in the cluster
	Partitions  int      // session partitions; every node must agree (0: the cluster's, DefaultPartitions for a new one)
	Replicas    int      // JetStream replicas of the streams and buckets
	Credentials string   // NATS .creds file; empty: none
	TLS         ClusterTLS

	AckWait         time.Duration // a run's message is redelivered this long after its last sign of life
	Lease           time.Duration // node liveness and partition lease
	DuplicateWindow time.Duration // the inbound stream's duplicate window
	DedupeTTL       time.Duration // how long a reply stays in the dedupe bucket

	// The session history stream's retention: records older than
	// HistoryMaxAge (0: no age limit) or past HistoryMaxBytes (the
	// oldest go first) are dropped; `termserver export-sessions` is the
	// archive path before they are.
	HistoryMaxAge   time.Duration
	HistoryMaxBytes int64
	// ConsumerStuck is how long a partition's consumer may deliver nothing
	// while messages wait, or have no leader, before its worker deletes
	// and recreates it.
	ConsumerStuck time.Duration
}

// ClusterTLS is the TLS of the NATS connection: a CA to verify the servers
// and, optionally, a client certificate.
type ClusterTLS struct {
	CAFile, CertFile, KeyFile string
}

// Cluster roles.
const (
	RoleEdge   = "edge"   // holds device WebSockets
	RoleWorker = "worker" // runs agents
	RoleAll    = "all"    // both
)

// Cluster defaults.
const (
	// DefaultPartitions: a new cluster's partition count when no node
	// names one. Each partition is a JetStream consumer whose state
	// every NATS node writes to a file up to 10 times a second: 64 took
	// a fifth of the CPU of a 3-node cluster at 600 msg/s (issue 25).
	DefaultPartitions      = 16
	DefaultReplicas        = 3
	DefaultAckWait         = 30 * time.Second
	DefaultLease           = 5 * time.Second
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultDedupeTTL       = 24 * time.Hour
	DefaultHistoryMaxAge   = 0                // no age limit
	DefaultHistoryMaxBytes = 4 << 30          // 4 GiB per replica
	DefaultConsumerStuck   = 20 * time.Second // a NATS node's restart elects new leaders in a few seconds
)

// Enabled reports whether the cluster block is present.
func (c Cluster) Enabled() bool { return len(c.NATS) > 0 }

// Edge reports whether the node holds device connections.
func (c Cluster) Edge() bool { return c.Role == RoleEdge || c.Role == RoleAll }

// Worker reports whether the node runs agents.
func (c Cluster) Worker() bool { return c.Role == RoleWorker || c.Role == RoleAll }

const nodeNamePattern = `^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`

var nodeNameRE = regexp.MustCompile(nodeNamePattern)

// cluster decodes the "cluster" block.
func (w *walker) cluster(path string, n *node) Cluster {
	c := Cluster{Replicas: DefaultReplicas, AckWait: DefaultAckWait,
		Lease: DefaultLease, DuplicateWindow: DefaultDuplicateWindow, DedupeTTL: DefaultDedupeTTL,
		HistoryMaxAge: DefaultHistoryMaxAge, HistoryMaxBytes: DefaultHistoryMaxBytes, ConsumerStuck: DefaultConsumerStuck}
	f := w.fields(path, n, "cluster")
	if f == nil {
		return Cluster{}
	}
	if e, ok := f["nats"]; ok {
		p := join(path, e.key)
		if s, ok := w.nonEmpty(p, e.val); ok {
			for _, u := range strings.Split(s, ",") {
				u = strings.TrimSpace(u)
				pu, err := url.Parse(u)
				switch {
				case u == "":
					w.errorf(p, "empty URL in the list %s", quote(s))
				case err != nil || pu.Host == "":
					w.errorf(p, "invalid NATS URL %s (want nats://host:port or tls://host:port)", quote(u))
				case pu.Scheme != "nats" && pu.Scheme != "tls":
					w.errorf(p, "NATS URL %s: scheme %q is not nats or tls", quote(u), pu.Scheme)
				default:
					c.NATS = append(c.NATS, u)
				}
			}
		}
	} else {
		w.required(path, "nats", "the NATS server URLs, comma-separated")
	}
	if e, ok := f["role"]; ok {
		p := join(path, e.key)
		if s, ok := w.nonEmpty(p, e.val); ok {
			switch s {
			case RoleEdge, RoleWorker, RoleAll:
				c.Role = s
			default:
				w.errorf(p, "unknown role %s (want \"edge\", \"worker\" or \"all\")", quote(s))
			}
		}
	} else {
		w.required(path, "role", `"edge", "worker" or "all"`)
	}
	if e, ok := f["name"]; ok {
		p := join(path, e.key)
		if s, ok := w.nonEmpty(p, e.val); ok {
			if !nodeNameRE.MatchString(s) {
				w.errorf(p, "invalid node name %s: must match %s", quote(s), nodeNamePattern)
			}
			c.Name = s
		}
	} else {
		w.required(path, "name", "this node's name, unique in the cluster")
	}
	if e, ok := f["partitions"]; ok {
		c.Partitions, _ = w.integer(join(path, e.key), e.val, 1, 4096)
	}
	if e, ok := f["replicas"]; ok {
		c.Replicas, _ = w.integer(join(path, e.key), e.val, 1, 5)
	}
	if e, ok := f["credentials"]; ok {
		c.Credentials, _ = w.filePath(join(path, e.key), e.val)
	}
	if e, ok := f["tls"]; ok {
		p := join(path, e.key)
		if tf := w.fields(p, e.val, "cluster.tls"); tf != nil {
			for _, k := range []struct {
				key string
				dst *string
			}{{"caFile", &c.TLS.CAFile}, {"certFile", &c.TLS.CertFile}, {"keyFile", &c.TLS.KeyFile}} {
				if e, ok := tf[k.key]; ok {
					*k.dst, _ = w.filePath(join(p, e.key), e.val)
				}
			}
			if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
				w.errorf(p, "certFile and keyFile go together (a client certificate needs its key)")
			}
		}
	}
	seconds := func(key string, dst *time.Duration, lo, hi int, unit time.Duration) {
		if e, ok := f[key]; ok {
			if n, ok := w.integer(join(path, e.key), e.val, lo, hi); ok {
				*dst = time.Duration(n) * unit
			}
		}
	}
	seconds("ackWaitSeconds", &c.AckWait, 1, 3600, time.Second)
	seconds("leaseSeconds", &c.Lease, 1, 300, time.Second)
	seconds("duplicateWindowSeconds", &c.DuplicateWindow, 1, 86400, time.Second)
	seconds("dedupeHours", &c.DedupeTTL, 1, 24*365, time.Hour)
	// 0: kept until historyMaxMegabytes drops it.
	seconds("historyMaxAgeDays", &c.HistoryMaxAge, 0, 100*365, 24*time.Hour)
	if e, ok := f["historyMaxMegabytes"]; ok {
		// A bound always: a stream that fills the disk stops every
		// stream of the NATS server. Megabytes keep the number in an int
		// on 32-bit builds.
		if n, ok := w.integer(join(path, e.key), e.val, 1, 1<<20); ok {
			c.HistoryMaxBytes = int64(n) << 20
		}
	}
	// More than a lease (a new owner's consumer elects its leader) and
	// more than the worker's 5 s pulls.
	seconds("consumerStuckSeconds", &c.ConsumerStuck, 10, 3600, time.Second)
	return c
}
