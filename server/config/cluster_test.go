package config

import (
	"strings"
	"testing"
	"time"
)

const oneChannel = `"channels": {"t": {"accountId": "local"}}`

func TestClusterBlock(t *testing.T) {
	cfg, err := Parse([]byte(`{` + oneChannel + `, "cluster": {"nats": "nats://127.0.0.1:4222, nats://127.0.0.1:4223", "role": "edge",
		"name": "edge-1", "partitions": 16, "replicas": 1, "ackWaitSeconds": 7, "duplicateWindowSeconds": 2}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Cluster
	if !c.Enabled() || !c.Edge() || c.Worker() || c.Name != "edge-1" || c.Partitions != 16 || c.Replicas != 1 ||
		len(c.NATS) != 2 || c.NATS[1] != "nats://127.0.0.1:4223" || c.AckWait != 7*time.Second ||
		c.DuplicateWindow != 2*time.Second || c.Lease != DefaultLease || c.DedupeTTL != DefaultDedupeTTL ||
		c.HistoryMaxAge != 0 || c.HistoryMaxBytes != DefaultHistoryMaxBytes || c.ConsumerStuck != DefaultConsumerStuck {
		t.Fatalf("decoded %+v", c)
	}
	if def, _ := Parse([]byte(`{` + oneChannel + `}`)); def.Cluster.Enabled() {
		t.Fatal("no cluster block must mean no cluster")
	}
}

// TestClusterRetention: the history's retention and the stuck consumer's
// bound, in camelCase and snake_case.
func TestClusterRetention(t *testing.T) {
	for _, keys := range []string{
		`"historyMaxAgeDays": 30, "historyMaxMegabytes": 512, "consumerStuckSeconds": 45`,
		`"history_max_age_days": 30, "history_max_megabytes": 512, "consumer_stuck_seconds": 45`,
	} {
		cfg, err := Parse([]byte(`{` + oneChannel + `, "cluster": {"nats": "nats://x:1", "role": "all", "name": "a", ` + keys + `}}`))
		if err != nil {
			t.Fatalf("%s: %v", keys, err)
		}
		c := cfg.Cluster
		if c.HistoryMaxAge != 30*24*time.Hour || c.HistoryMaxBytes != 512<<20 || c.ConsumerStuck != 45*time.Second {
			t.Errorf("%s: decoded %+v", keys, c)
		}
	}
}

func TestClusterBlockErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"role": "edge", "name": "a"}`, "cluster.nats: required"},
		{`{"nats": "http://x:1", "role": "edge", "name": "a"}`, `scheme "http" is not nats or tls`},
		{`{"nats": "nats://x:1,", "role": "edge", "name": "a"}`, "empty URL"},
		{`{"nats": "nats://x:1", "role": "boss", "name": "a"}`, `unknown role "boss"`},
		{`{"nats": "nats://x:1", "role": "all", "name": "a b"}`, "invalid node name"},
		{`{"nats": "nats://x:1", "role": "all"}`, "cluster.name: required"},
		{`{"nats": "nats://x:1", "role": "all", "name": "a", "partitions": 0}`, "cluster.partitions: must be an integer between 1 and 4096"},
		{`{"nats": "nats://x:1", "role": "all", "name": "a", "tls": {"certFile": "c.pem"}}`, "certFile and keyFile go together"},
		{`{"nats": "nats://x:1", "role": "all", "name": "a", "leader": true}`, "cluster.leader: unknown key"},
		{`{"nats": "nats://x:1", "role": "all", "name": "a", "historyMaxAgeDays": -1}`, "cluster.historyMaxAgeDays: must be an integer between 0 and 36500"},
		{`{"nats": "nats://x:1", "role": "all", "name": "a", "historyMaxAgeDays": "30d"}`, "cluster.historyMaxAgeDays: must be an integer"},
		{`{"nats": "nats://x:1", "role": "all", "name": "a", "historyMaxMegabytes": 0}`, "cluster.historyMaxMegabytes: must be an integer between 1 and 1048576"},
		{`{"nats": "nats://x:1", "role": "all", "name": "a", "history_max_megabytes": 1.5}`, "cluster.history_max_megabytes: must be an integer"},
		{`{"nats": "nats://x:1", "role": "all", "name": "a", "consumerStuckSeconds": 5}`, "cluster.consumerStuckSeconds: must be an integer between 10 and 3600"},
		{`{"nats": "nats://x:1", "role": "all", "name": "a", "historyMaxBytes": 5}`, "cluster.historyMaxBytes: unknown key"},
	} {
		_, err := Parse([]byte(`{` + oneChannel + `, "cluster": ` + tc.in + `}`))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.in, err, tc.want)
		}
	}
}
