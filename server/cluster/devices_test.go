package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/registry"
)

// syncBuffer is a log both a node's goroutines and the test use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// devicesNode is one node of the test's cluster with its device
// registry.
type devicesNode struct {
	n   *Node
	d   *Devices
	log *syncBuffer
}

// devicesLease is the lease of the nodes openDevices opens: a loaded
// machine's late beat must not show a live edge's devices offline while
// a test looks at them. TestDevicesEdgeGone, which waits for an edge's
// beat to stop, takes 1 s.
const devicesLease = 10 * time.Second

// openDevices opens node name (role edge or worker, devicesLease) on
// the JetStream at url and its device registry (publishing every 50
// ms), closed when the test ends.
func openDevices(t testing.TB, url, name, role string, opt DevicesOptions, ropts ...func(*registry.Options)) *devicesNode {
	t.Helper()
	return openDevicesLease(t, devicesLease, url, name, role, opt, ropts...)
}

func openDevicesLease(t testing.TB, lease time.Duration, url, name, role string, opt DevicesOptions, ropts ...func(*registry.Options)) *devicesNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	cfg := config.Cluster{NATS: []string{url}, Role: role, Name: name, Partitions: 1,
		Replicas: 1, AckWait: time.Second, Lease: lease, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
	buf := &syncBuffer{}
	n, err := Open(ctx, cfg, slog.New(slog.NewTextHandler(buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if opt.Flush == 0 {
		opt.Flush = 50 * time.Millisecond
	}
	ropt := registry.Options{Logger: n.log, FlushInterval: time.Hour}
	for _, f := range ropts {
		f(&ropt)
	}
	d, err := n.OpenDevices(ctx, t.TempDir(), ropt, opt)
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	dn := &devicesNode{n: n, d: d, log: buf}
	t.Cleanup(dn.close)
	return dn
}

func (dn *devicesNode) close() {
	dn.n.Close()
	_ = dn.d.Close()
}

// connect connects peer to the node's registry.
func (dn *devicesNode) connect(t *testing.T, peer string, tags map[string]string) uint64 {
	t.Helper()
	gen, _, err := dn.d.Connected(registry.Device{ChannelID: "ch", PeerID: peer, DeviceName: "Kiosk " + peer, Tags: tags, Authenticated: true})
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

// waitPeer waits until the node lists peer as want says.
func (dn *devicesNode) waitPeer(t *testing.T, peer, what string, want func(p registry.Peer, ok bool) bool) registry.Peer {
	t.Helper()
	var p registry.Peer
	testwait.UntilOK(t, dn.n.Name()+" to list "+peer+" "+what, func() error {
		var ok bool
		if p, ok = dn.d.Get("ch", peer); !want(p, ok) {
			return fmt.Errorf("%+v (listed: %v)", p, ok)
		}
		return nil
	})
	return p
}

// publishedSince reports whether the node's publisher wrote peer's
// record (or found another edge's newer and left it) in a publish begun
// at or after at.
func (dn *devicesNode) publishedSince(peer string, at time.Time) bool {
	dn.d.mu.Lock()
	defer dn.d.mu.Unlock()
	p, ok := dn.d.published[devKey{"ch", peer}]
	return ok && !p.Before(at)
}

// inBucket reads peer's record from the bucket (its stream's leader):
// ok false when there is none.
func (dn *devicesNode) inBucket(t *testing.T, peer string) (devicesRecord, bool) {
	t.Helper()
	data, rev, err := dn.n.kvGet(context.Background(), dn.d.kv, devKey{"ch", peer}.String())
	if err != nil {
		t.Fatal(err)
	}
	var rec devicesRecord
	if rev != 0 {
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatal(err)
		}
	}
	return rec, rev != 0
}

func onlineAt(edge string) func(registry.Peer, bool) bool {
	return func(p registry.Peer, ok bool) bool { return ok && p.Online && p.Edge == edge }
}

func offlineAt(edge string) func(registry.Peer, bool) bool {
	return func(p registry.Peer, ok bool) bool { return ok && !p.Online && p.Edge == edge }
}

// A peer connected on edge A is listed on edge B and on a worker with
// edge A, what it said of itself and online; its disconnect on A shows
// it offline there, still at A. A newer connection on B wins over A's
// older one, whichever edge publishes last.
func TestDevicesAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{})
	b := openDevices(t, url, "edge-b", config.RoleEdge, DevicesOptions{})
	w := openDevices(t, url, "worker-1", config.RoleWorker, DevicesOptions{})

	gen := a.connect(t, "kiosk-1", map[string]string{"site": "lobby"})
	for _, dn := range []*devicesNode{a, b, w} {
		p := dn.waitPeer(t, "kiosk-1", "online at edge-a", onlineAt("edge-a"))
		if p.DeviceName != "Kiosk kiosk-1" || p.Tags["site"] != "lobby" || p.ConnectedSince == nil || !p.Authenticated {
			t.Errorf("%s lists %+v", dn.n.Name(), p)
		}
	}
	if total, byTag := w.d.Online("ch", 10); total != 1 || byTag["site=lobby"] != 1 {
		t.Errorf("the worker counts %d online, %v", total, byTag)
	}
	if !a.d.SetScreen("ch", "kiosk-1", gen, registry.Screen{Rows: []string{"Hello", "lobby"}, Backlight: true}) {
		t.Fatal("screen refused")
	}
	b.waitPeer(t, "kiosk-1", "showing its screen", func(p registry.Peer, ok bool) bool {
		return ok && p.Screen != nil && len(p.Screen.Rows) == 2 && p.Screen.Rows[1] == "lobby" && p.Screen.Backlight
	})
	a.d.Disconnected("ch", "kiosk-1", gen)
	p := b.waitPeer(t, "kiosk-1", "offline at edge-a", offlineAt("edge-a"))
	if p.ConnectedSince != nil {
		t.Errorf("offline with connected_since %v", *p.ConnectedSince)
	}

	// The device moves to edge B; edge A's connection ends after B
	// published: B's newer connection stays.
	genA := a.connect(t, "kiosk-2", nil)
	w.waitPeer(t, "kiosk-2", "online at edge-a", onlineAt("edge-a"))
	b.connect(t, "kiosk-2", nil)
	w.waitPeer(t, "kiosk-2", "online at edge-b", onlineAt("edge-b"))
	gone := time.Now()
	a.d.Disconnected("ch", "kiosk-2", genA)
	testwait.Until(t, "A's publish of kiosk-2's disconnect", func() bool { return a.publishedSince("kiosk-2", gone) })
	if rec, ok := a.inBucket(t, "kiosk-2"); !ok || rec.Edge != "edge-b" || !rec.Peer.Online {
		t.Fatalf("after A's publish of its older connection's end the bucket holds %+v (%v), want B's online record", rec, ok)
	}
	for _, dn := range []*devicesNode{a, b, w} {
		dn.waitPeer(t, "kiosk-2", "online at edge-b", onlineAt("edge-b"))
	}
}

// The live stream of a node (Subscribe) gets the changes of devices on
// another edge.
func TestDevicesSubscribeAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{})
	w := openDevices(t, url, "worker-1", config.RoleWorker, DevicesOptions{})
	sub := w.d.Subscribe("ch", 64)
	defer sub.Close()
	gen := a.connect(t, "kiosk-1", nil)
	a.d.Disconnected("ch", "kiosk-1", gen)
	var got []string
	timeout := time.After(testwait.Deadline)
	for len(got) == 0 || got[len(got)-1] != "offline@edge-a" {
		select {
		case p := <-sub.C():
			state := "offline"
			if p.Online {
				state = "online"
			}
			got = append(got, state+"@"+p.Edge)
		case <-timeout:
			t.Fatalf("the worker's stream: %v, want it to end offline@edge-a", got)
		}
	}
}

// When an edge's beat stops (its process killed: its NATS connection
// gone without a word), every node shows its devices offline after a
// lease; the device connecting to another edge is online there. The edge
// restarted under the same name does not bring its lost connections
// back.
func TestDevicesEdgeGone(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openDevicesLease(t, time.Second, url, "edge-a", config.RoleEdge, DevicesOptions{})
	b := openDevicesLease(t, time.Second, url, "edge-b", config.RoleEdge, DevicesOptions{})
	a.connect(t, "kiosk-1", nil)
	a.connect(t, "kiosk-2", nil)
	b.waitPeer(t, "kiosk-1", "online at edge-a", onlineAt("edge-a"))
	b.waitPeer(t, "kiosk-2", "online at edge-a", onlineAt("edge-a"))

	a.n.nc.Close() // a SIGKILL as NATS sees it: no more beats, no last publish
	gone := time.Now()
	b.waitPeer(t, "kiosk-1", "offline at edge-a", offlineAt("edge-a"))
	if took := time.Since(gone); took < 500*time.Millisecond {
		t.Errorf("offline after %v, before the beat could be missed", took)
	}
	if total, _ := b.d.Online("ch", 10); total != 0 {
		t.Errorf("edge B counts %d online", total)
	}
	b.connect(t, "kiosk-1", nil)
	b.waitPeer(t, "kiosk-1", "online at edge-b", onlineAt("edge-b"))

	again := openDevicesLease(t, time.Second, url, "edge-a", config.RoleEdge, DevicesOptions{})
	again.waitPeer(t, "kiosk-2", "offline at edge-a", offlineAt("edge-a"))
	// Once B hears the new run beat, the lost connection would show
	// online there if a beat of the edge's name revived it.
	testwait.Until(t, "B to hear the beat of edge-a's new run", func() bool {
		b.d.mmu.Lock()
		defer b.d.mmu.Unlock()
		return b.d.beats["edge-a"].run == again.d.Run()
	})
	if p, ok := b.d.Get("ch", "kiosk-2"); !ok || p.Online || p.Edge != "edge-a" {
		t.Errorf("B lists kiosk-2 as %+v (%v) after edge-a's new run beat, want offline at edge-a", p, ok)
	}
	again.waitPeer(t, "kiosk-1", "online at edge-b", onlineAt("edge-b"))
}

// Pages and cursors run over the devices of every edge, in peer id
// order, with the filters.
func TestDevicesPagesAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{})
	b := openDevices(t, url, "edge-b", config.RoleEdge, DevicesOptions{})
	w := openDevices(t, url, "worker-1", config.RoleWorker, DevicesOptions{})
	var want []string
	gens := map[string]uint64{}
	for i := range 10 {
		peer := fmt.Sprintf("kiosk-%02d", i)
		want = append(want, peer)
		site := "lobby"
		if i%3 == 0 {
			site = "hall"
		}
		on := a
		if i%2 == 1 {
			on = b
		}
		gens[peer] = on.connect(t, peer, map[string]string{"site": site})
	}
	a.d.Disconnected("ch", "kiosk-04", gens["kiosk-04"])
	// A publish writes its peers at once, in no order: the last one
	// seen says nothing of the others.
	testwait.UntilOK(t, "the worker to count the 10 peers", func() error {
		if n := w.d.Count("ch"); n != 10 {
			return fmt.Errorf("%d peers", n)
		}
		return nil
	})
	w.waitPeer(t, "kiosk-04", "offline at edge-a", offlineAt("edge-a"))
	var got []string
	after, pages := "", 0
	for {
		peers, next := w.d.Page("ch", registry.Filter{}, after, 3)
		pages++
		for _, p := range peers {
			got = append(got, p.PeerID)
			wantEdge := "edge-a"
			if (p.PeerID[len(p.PeerID)-1]-'0')%2 == 1 {
				wantEdge = "edge-b"
			}
			if p.Edge != wantEdge {
				t.Errorf("%s at %q, want %s", p.PeerID, p.Edge, wantEdge)
			}
		}
		if next == "" {
			break
		}
		after = next
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || pages != 4 {
		t.Errorf("paged in %d: %v", pages, got)
	}
	online := true
	peers, next := w.d.Page("ch", registry.Filter{Tags: map[string]string{"site": "lobby"}, Online: &online}, "kiosk-02", 2)
	var ids []string
	for _, p := range peers {
		ids = append(ids, p.PeerID)
	}
	if strings.Join(ids, ",") != "kiosk-05,kiosk-07" || next != "kiosk-07" {
		t.Errorf("online lobby after kiosk-02: %v next %q", ids, next)
	}
	if l := w.d.List("ch", registry.Filter{Tags: map[string]string{"site": "hall"}}); len(l) != 4 {
		t.Errorf("hall lists %d", len(l))
	}
}

// A record over the bucket's value size goes without its screen, or is
// not published at all: a clear warning each, once, and the node goes
// on publishing the others.
func TestDevicesOversize(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{MaxValueSize: 1500})
	b := openDevices(t, url, "edge-b", config.RoleEdge, DevicesOptions{MaxValueSize: 1500})

	gen := a.connect(t, "screen-1", nil)
	for i := range 3 { // three publishes of the screen, each over the size
		rows := []string{strings.Repeat("x", 250), strings.Repeat("y", 250), strings.Repeat("z", 250), strings.Repeat("w", 250), fmt.Sprint(i)}
		at := time.Now()
		if !a.d.SetScreen("ch", "screen-1", gen, registry.Screen{Rows: rows}) {
			t.Fatal("screen refused")
		}
		testwait.Until(t, fmt.Sprintf("A's publish of screen %d", i), func() bool { return a.publishedSince("screen-1", at) })
	}
	p := b.waitPeer(t, "screen-1", "online at edge-a", onlineAt("edge-a"))
	if p.Screen != nil {
		t.Errorf("the screen went into the bucket: %+v", p.Screen)
	}
	if own, _ := a.d.local.Get("ch", "screen-1"); own.Screen == nil {
		t.Error("the edge's own registry lost the screen")
	}

	tags := map[string]string{}
	for i := range 20 {
		tags[fmt.Sprintf("tag%02d", i)] = strings.Repeat("v", 90)
	}
	at := time.Now()
	a.connect(t, "tagged-1", tags)
	a.connect(t, "plain-1", nil)
	b.waitPeer(t, "plain-1", "online at edge-a", onlineAt("edge-a"))
	testwait.Until(t, "A's publish of tagged-1", func() bool { return a.publishedSince("tagged-1", at) })
	if rec, ok := a.inBucket(t, "tagged-1"); ok {
		t.Errorf("the record over the value size is in the bucket: %+v", rec)
	}
	if _, ok := b.d.Get("ch", "tagged-1"); ok {
		t.Error("the record over the value size is listed")
	}
	log := a.log.String()
	for _, want := range []string{"screen mirror left out", "not published to the cluster's registry: its record is over the bucket's value size"} {
		if n := strings.Count(log, want); n != 1 {
			t.Errorf("%d warnings %q; log:\n%s", n, want, log)
		}
	}
}

// A device the edge's registry forgets to make room (its channel full)
// leaves every node's list.
func TestDevicesForgottenLeaveTheCluster(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{}, func(o *registry.Options) { o.MaxPeers = 2 })
	b := openDevices(t, url, "edge-b", config.RoleEdge, DevicesOptions{})
	gen := a.connect(t, "kiosk-1", nil)
	a.d.Disconnected("ch", "kiosk-1", gen)
	a.connect(t, "kiosk-2", nil)
	b.waitPeer(t, "kiosk-1", "offline at edge-a", offlineAt("edge-a"))
	b.waitPeer(t, "kiosk-2", "online at edge-a", onlineAt("edge-a"))
	a.connect(t, "kiosk-3", nil) // kiosk-1 goes: offline, seen longest ago
	b.waitPeer(t, "kiosk-3", "online at edge-a", onlineAt("edge-a"))
	b.waitPeer(t, "kiosk-1", "gone", func(_ registry.Peer, ok bool) bool { return !ok })
	if n := b.d.Count("ch"); n != 2 {
		t.Errorf("edge B counts %d", n)
	}
}

// A peer's record that reaches the mirror while its edge's beat is late
// shows offline; the edge's next beat shows it online again. The mirror
// once kept the edge's run alive while the beat was late (no tick had
// looked yet), so the next beat changed nothing and the peer stayed
// offline for good on a loaded machine.
func TestDevicesRecordWhileTheBeatIsLate(t *testing.T) {
	t.Parallel()
	d := &Devices{n: &Node{cfg: config.Cluster{Name: "worker-1", Lease: time.Second}}, view: registry.NewView(nil),
		records: map[devKey]mirrored{}, byEdge: map[string]map[devKey]struct{}{}, beats: map[string]beatSeen{}, alive: map[string]string{}}
	now := time.Now()
	d.mmu.Lock()
	defer d.mmu.Unlock()
	d.beats["edge-a"] = beatSeen{run: "run-1", seen: now}
	d.reliveEdgeLocked("edge-a", now)
	d.beats["edge-a"] = beatSeen{run: "run-1", seen: now.Add(-2 * time.Second)} // late: no beat for two leases
	k := devKey{"ch", "kiosk-1"}
	d.putLocked(k, mirrored{devicesRecord{Edge: "edge-a", Run: "run-1", Since: now, At: now,
		Peer: registry.Peer{PeerID: "kiosk-1", ChannelID: "ch", Online: true}}, 1})
	if p, ok := d.view.Get("ch", "kiosk-1"); !ok || p.Online {
		t.Fatalf("put while the beat is late: %+v (%v), want offline", p, ok)
	}
	d.beats["edge-a"] = beatSeen{run: "run-1", seen: time.Now()} // the next beat
	d.reliveEdgeLocked("edge-a", time.Now())
	if p, ok := d.view.Get("ch", "kiosk-1"); !ok || !p.Online {
		t.Fatalf("after the edge's next beat: %+v (%v), want online", p, ok)
	}
}

// A forgotten peer leaves the bucket even when the edge's mirror is
// behind its own writes: without the record (the watch has not brought
// it yet), or at an older revision. The edge once left the record for
// good then (TestDevicesForgottenLeaveTheCluster failed on a loaded
// machine).
func TestDevicesRemoveWhileTheMirrorIsBehind(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{})
	ctx := context.Background()
	for _, behind := range []string{"without the record", "at an older revision"} {
		peer := "kiosk-" + strings.Fields(behind)[0]
		k := devKey{"ch", peer}
		mirrored := func() uint64 {
			a.d.mmu.Lock()
			defer a.d.mmu.Unlock()
			return a.d.records[k].rev
		}
		a.connect(t, peer, nil)
		testwait.Until(t, "A's mirror to hold "+peer, func() bool { return mirrored() != 0 })
		first := mirrored()
		a.connect(t, peer, nil) // a second publish: the first is a revision before the last
		testwait.Until(t, "A's mirror to hold "+peer+"'s second publish", func() bool { return mirrored() > first })
		a.d.mmu.Lock()
		if behind == "without the record" {
			delete(a.d.records, k)
		} else {
			m := a.d.records[k]
			m.rev = first
			a.d.records[k] = m
		}
		a.d.mmu.Unlock()
		if err := a.d.remove(ctx, k); err != nil {
			t.Fatalf("%s: remove: %v", behind, err)
		}
		if rec, ok := a.inBucket(t, peer); ok {
			t.Errorf("mirror %s: the bucket still holds %+v", behind, rec)
		}
	}
}

// A node counts a peer's reconnects of the last hour when it reads it,
// from the minutes its edge published: a record published two hours
// after its reconnects shows none, as the edge's own registry does (a
// node showed the count the edge published, for good once the device
// stayed away); a fresh one shows its count.
func TestDevicesReconnectsCountedWhereRead(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{})
	b := openDevices(t, url, "edge-b", config.RoleEdge, DevicesOptions{})
	for range 3 {
		a.connect(t, "kiosk-1", nil)
	}
	b.waitPeer(t, "kiosk-1", "with 2 reconnects", func(p registry.Peer, ok bool) bool { return ok && p.ReconnectsLastHour == 2 })

	old := time.Now().Add(-2 * time.Hour)
	rec := devicesRecord{Edge: "edge-gone", Run: "r", Since: old, At: old,
		Peer:       registry.Peer{ChannelID: "ch", PeerID: "old-1", LastSeen: old.UTC().Format(time.RFC3339), ReconnectsLastHour: 5},
		Reconnects: [][2]int64{{old.Unix() / 60, 5}}}
	val, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.d.kv.Put(context.Background(), devKey{"ch", "old-1"}.String(), val); err != nil {
		t.Fatal(err)
	}
	p := b.waitPeer(t, "old-1", "listed", func(_ registry.Peer, ok bool) bool { return ok })
	if p.ReconnectsLastHour != 0 {
		t.Errorf("a record of reconnects two hours ago shows %d reconnects in the last hour", p.ReconnectsLastHour)
	}
}
