package cluster

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

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

// openDevices opens node name (role edge or worker, lease 1 s) on the
// JetStream at url and its device registry (publishing every 50 ms), closed
// when the test ends.
func openDevices(t testing.TB, url, name, role string, opt DevicesOptions, ropts ...func(*registry.Options)) *devicesNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := config.Cluster{NATS: []string{url}, Role: role, Name: name, Partitions: 1,
		Replicas: 1, AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, ok := dn.d.Get("ch", peer)
		if want(p, ok) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not %s within 10 s: %+v (listed: %v)", dn.n.Name(), peer, what, p, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	a.d.Disconnected("ch", "kiosk-2", genA)
	time.Sleep(300 * time.Millisecond) // several of A's publishes
	for _, dn := range []*devicesNode{a, b, w} {
		dn.waitPeer(t, "kiosk-2", "online at edge-b", onlineAt("edge-b"))
	}
}

// The live stream of a node (Subscribe) gets the changes of devices on
// another edge.
func TestDevicesSubscribeAcrossNodes(t *testing.T) {
	url := startJetStream(t)
	a := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{})
	w := openDevices(t, url, "worker-1", config.RoleWorker, DevicesOptions{})
	sub := w.d.Subscribe("ch", 64)
	defer sub.Close()
	gen := a.connect(t, "kiosk-1", nil)
	a.d.Disconnected("ch", "kiosk-1", gen)
	var got []string
	timeout := time.After(10 * time.Second)
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
	url := startJetStream(t)
	a := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{})
	b := openDevices(t, url, "edge-b", config.RoleEdge, DevicesOptions{})
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

	again := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{})
	again.waitPeer(t, "kiosk-2", "offline at edge-a", offlineAt("edge-a"))
	time.Sleep(500 * time.Millisecond) // the new run's beats
	b.waitPeer(t, "kiosk-2", "offline at edge-a", offlineAt("edge-a"))
	again.waitPeer(t, "kiosk-1", "online at edge-b", onlineAt("edge-b"))
}

// Pages and cursors run over the devices of every edge, in peer id
// order, with the filters.
func TestDevicesPagesAcrossNodes(t *testing.T) {
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
	w.waitPeer(t, "kiosk-04", "offline at edge-a", offlineAt("edge-a"))
	w.waitPeer(t, "kiosk-09", "online at edge-b", onlineAt("edge-b"))
	if n := w.d.Count("ch"); n != 10 {
		t.Fatalf("the worker counts %d peers", n)
	}
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
	url := startJetStream(t)
	a := openDevices(t, url, "edge-a", config.RoleEdge, DevicesOptions{MaxValueSize: 1500})
	b := openDevices(t, url, "edge-b", config.RoleEdge, DevicesOptions{MaxValueSize: 1500})

	gen := a.connect(t, "screen-1", nil)
	for i := range 3 {
		rows := []string{strings.Repeat("x", 250), strings.Repeat("y", 250), strings.Repeat("z", 250), strings.Repeat("w", 250), fmt.Sprint(i)}
		if !a.d.SetScreen("ch", "screen-1", gen, registry.Screen{Rows: rows}) {
			t.Fatal("screen refused")
		}
		time.Sleep(60 * time.Millisecond)
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
	a.connect(t, "tagged-1", tags)
	a.connect(t, "plain-1", nil)
	b.waitPeer(t, "plain-1", "online at edge-a", onlineAt("edge-a"))
	time.Sleep(200 * time.Millisecond)
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
