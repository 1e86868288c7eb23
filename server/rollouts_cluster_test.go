package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/rollout"
)

// Issue 39 item 3: rollouts are cluster state. Three edges on one
// JetStream: a rollout started through edge-a updates a device
// connected to edge-b (edge-b sends its frame and takes its
// update_status); every edge answers for it. The node that advances the
// rollouts (the lease's holder) stops, as if it died: another takes the
// lease once it expires and takes the next rollout from its canary to
// its end. Two operators' actions through two edges at once are both
// kept, one after the other, or one is refused cleanly.
func TestClusterRolloutFromAnyNode(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	node := func(name string) *testServer {
		cfg := config.Default()
		cfg.Workspace = t.TempDir()
		withAdmin(t)(cfg)
		cfg.Cluster = config.Cluster{NATS: []string{url}, Role: config.RoleEdge, Name: name, Partitions: 1, Replicas: 1,
			AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
		return serve(t, cfg, Options{})
	}
	nodes := map[string]*testServer{"edge-a": node("edge-a"), "edge-b": node("edge-b"), "edge-c": node("edge-c")}
	a, b := nodes["edge-a"], nodes["edge-b"]
	const v2 = "v2.0.0"
	putRelease(t, a.Server, v2, "linux/arm/6", []byte("termd v2 for arm"))
	base := func(ts *testServer) string { return ts.http.URL + "/api/channels/terminal-dev/rollouts" }
	for name, ts := range nodes {
		testwait.Until(t, name+" has the release", func() bool { _, ok := ts.releases.Manifest(v2, "linux/arm/6"); return ok })
	}
	known := func(ts *testServer, peer string) func() bool {
		return func() bool { p, ok := ts.fleet.reg.Get("terminal-dev", peer); return ok && p.Online }
	}
	get := func(ts *testServer, id string) rollout.Rollout {
		var r rollout.Rollout
		getRollout(t, base(ts)+"/"+id, &r)
		return r
	}
	create := func(ts *testServer, body string) rollout.Rollout {
		r := api(t, "POST", base(ts), operatorSecret, body)
		if r.status != 201 {
			t.Fatalf("create through %s: %d %s", ts.http.URL, r.status, r.body)
		}
		var ro rollout.Rollout
		if err := json.Unmarshal(r.body, &ro); err != nil {
			t.Fatal(err)
		}
		return ro
	}
	install := func(c *client, u *link.Update) {
		c.send(&link.UpdateStatus{UpdateID: u.UpdateID, Version: v2, Running: v2, State: link.UpdateInstalled})
	}

	kb := connectUpdater(t, b, "kb", "linux/arm/6", "v1.0.0")
	testwait.Until(t, "edge-a's registry lists kb (on edge-b) online", known(a, "kb"))
	ro := create(a, `{"version":"v2.0.0","peers":["kb"]}`)
	if ro.Counts[rollout.Sent] != 1 { // as one server answers
		t.Fatalf("the answer through edge-a: %+v; want kb sent", ro)
	}
	u := readAs[*link.Update](kb)
	if u.Version != v2 || u.UpdateID != ro.ID+".1" {
		t.Fatalf("kb's frame: %+v", u)
	}
	install(kb, u)
	for name, ts := range nodes {
		testwait.Until(t, name+" shows the rollout done", func() bool {
			r := get(ts, ro.ID)
			return r.State == rollout.Done && r.Counts[rollout.Installed] == 1
		})
	}

	// The controller stops (its ticker, as if its node died); the
	// devices are on the two other nodes.
	var ctl string
	testwait.Until(t, "one node advances the rollouts", func() bool {
		n := 0
		for name, ts := range nodes {
			if ts.rollouts.Controlling() {
				ctl, n = name, n+1
			}
		}
		return n == 1
	})
	var others []*testServer
	for _, name := range []string{"edge-a", "edge-b", "edge-c"} {
		if name != ctl {
			others = append(others, nodes[name])
		}
	}
	d1 := connectUpdater(t, others[0], "d1", "linux/arm/6", "v1.0.0")
	d2 := connectUpdater(t, others[1], "d2", "linux/arm/6", "v1.0.0")
	for _, p := range []string{"d1", "d2"} {
		testwait.Until(t, "the controller's registry lists "+p, known(nodes[ctl], p))
		testwait.Until(t, "edge "+others[0].http.URL+" lists "+p, known(others[0], p))
	}
	ro2 := create(others[0], `{"version":"v2.0.0","peers":["d1","d2"],"canary":1}`)
	u1 := readAs[*link.Update](d1) // the canary: online ones first, then by peer id
	if err := nodes[ctl].rollouts.Close(); err != nil {
		t.Fatal(err)
	}
	install(d1, u1)
	u2 := readAs[*link.Update](d2) // wave 1, released by the new controller
	install(d2, u2)
	testwait.Until(t, "the rollout done, through "+others[1].http.URL, func() bool {
		r := get(others[1], ro2.ID)
		return r.State == rollout.Done && r.Counts[rollout.Installed] == 2
	})
	if !others[0].rollouts.Controlling() && !others[1].rollouts.Controlling() {
		t.Fatal("no node took the lease")
	}

	// Two operators at once, through two nodes: pause and abort of one
	// rollout. Each is kept, or refused with the same words as on one
	// server; the rollout ends aborted on every node.
	connectUpdater(t, others[0], "d3", "linux/arm/6", "v1.0.0")
	testwait.Until(t, "edge "+others[1].http.URL+" lists d3", known(others[1], "d3"))
	ro3 := create(others[1], `{"version":"v2.0.0","peers":["d3"]}`)
	var wg sync.WaitGroup
	codes := make([]int, 2)
	bodies := make([]string, 2)
	for i, act := range []string{"pause", "abort"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := api(t, "POST", base(others[i])+"/"+ro3.ID+"/"+act, operatorSecret, "")
			codes[i], bodies[i] = r.status, string(r.body)
		}()
	}
	wg.Wait()
	if codes[1] != 200 {
		t.Fatalf("abort: %d %s", codes[1], bodies[1])
	}
	if codes[0] != 200 && !(codes[0] == 409 && strings.Contains(bodies[0], fmt.Sprintf("rollout %s is aborted, not running", ro3.ID))) {
		t.Fatalf("pause at the same time as an abort: %d %s", codes[0], bodies[0])
	}
	for _, ts := range others {
		testwait.UntilOK(t, "the rollout aborted on "+ts.http.URL, func() error {
			if r := get(ts, ro3.ID); r.State != rollout.Aborted {
				return fmt.Errorf("%s (%s), the pause answered %d %s", r.State, r.Note, codes[0], bodies[0])
			}
			return nil
		})
	}
	if r := api(t, "POST", base(others[0])+"/"+ro3.ID+"/resume", operatorSecret, ""); r.status != 409 || !strings.Contains(string(r.body), "is aborted, not paused") {
		t.Fatalf("resume after abort, through another node: %d %s", r.status, r.body)
	}
}
