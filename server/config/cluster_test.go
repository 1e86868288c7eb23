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
		c.DuplicateWindow != 2*time.Second || c.Lease != DefaultLease || c.DedupeTTL != DefaultDedupeTTL {
		t.Fatalf("decoded %+v", c)
	}
	if def, _ := Parse([]byte(`{` + oneChannel + `}`)); def.Cluster.Enabled() {
		t.Fatal("no cluster block must mean no cluster")
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
	} {
		_, err := Parse([]byte(`{` + oneChannel + `, "cluster": ` + tc.in + `}`))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.in, err, tc.want)
		}
	}
}
