package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/server/rollout"
	"termlink/server/rollout/rollouttest"
)

// The contract of package rollout on the cluster's store: each handle
// is another node of the same NATS.
func TestRolloutsContract(t *testing.T) {
	t.Parallel()
	rollouttest.Run(t, func(t *testing.T) func() rollout.Storage {
		url := startJetStream(t)
		nodes := 0
		return func() rollout.Storage {
			nodes++
			n := openNode(t, url, fmt.Sprintf("node-%d", nodes))
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
			defer cancel()
			st, err := n.RolloutStorage(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	})
}

// What is read from the bucket is checked as the local files are: a
// record that does not parse and a key that is not a rollout's are
// refused, each logged naming its key, and change nothing; the node
// keeps running and loads the good ones.
func TestRolloutsBadRecordRefused(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	n := openNode(t, url, "edge-a")
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	st, err := n.RolloutStorage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range map[string]string{
		RolloutKey("ro-00000000000b"): `{"id":"ro-00000000000b","id":"x"}`,
		RolloutKey("ro-00000000000c"): `{"id":"ro-00000000000d"}`,
		"r.not-a-rollout":             `{}`,
	} {
		if _, err := st.kv.Put(ctx, key, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	var logged syncbuf.Buffer
	f := rollouttest.NewFleet()
	f.Connect("d1", "edge-a", "v1")
	opt := f.Options("")
	opt.Log = slog.New(slog.NewTextHandler(&logged, nil))
	m, err := n.OpenRollouts(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, want := range []string{RolloutKey("ro-00000000000b"), "each key may appear once", RolloutKey("ro-00000000000c"), "r.not-a-rollout"} {
		testwait.Until(t, "the refusal logged: "+want, func() bool { return strings.Contains(logged.String(), want) })
	}
	if r, err := m.Create(rollouttest.Channel, rollout.Request{Version: "v2", Target: rollout.Target{All: true}}, "otto"); err != nil || len(m.List(rollouttest.Channel, "")) != 1 {
		t.Fatalf("a rollout over a bucket with bad records: %+v, %v", r, err)
	}
}
