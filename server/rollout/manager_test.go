package rollout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"termlink/link"
	"termlink/release"
	"termlink/server/events"
	"termlink/server/registry"
	"termlink/server/releases"
)

const ch = "terminal-dev"

// fakeFleet is the registry, the release store, the connections and the
// event log a Manager sees.
type fakeFleet struct {
	mu       sync.Mutex
	peers    map[string]registry.Peer
	releases map[string]bool // version + " " + platform
	loading  error           // Ready's answer (a store loading in the background)
	sent     []*link.Update  // in order
	sentTo   []string
	events   []events.Event
}

func newFakeFleet() *fakeFleet {
	return &fakeFleet{peers: map[string]registry.Peer{}, releases: map[string]bool{}}
}

func (f *fakeFleet) Get(channelID, peerID string) (registry.Peer, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.peers[peerID]
	return p, ok
}

// SetUpdate keeps what the manager believed, as the registry does.
func (f *fakeFleet) SetUpdate(_, peerID string, u registry.UpdateState) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.peers[peerID]
	if ok {
		p.Update = &u
		f.peers[peerID] = p
	}
	return ok
}

// SetBusy keeps a device's busy frame, as the registry does (online only).
func (f *fakeFleet) SetBusy(_, peerID string, b registry.BusyState) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.peers[peerID]
	if !ok || !p.Online {
		return false
	}
	p.Busy = &b
	f.peers[peerID] = p
	return true
}

func (f *fakeFleet) List(channelID string, flt registry.Filter) []registry.Peer {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []registry.Peer
	for _, p := range f.peers {
		ok := true
		for k, v := range flt.Tags {
			ok = ok && p.Tags[k] == v
		}
		if ok {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b registry.Peer) int { return strings.Compare(a.PeerID, b.PeerID) })
	return out
}

func (f *fakeFleet) Releases(version string) []releases.Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []releases.Entry
	for k := range f.releases {
		v, p, _ := strings.Cut(k, " ")
		if v == version {
			out = append(out, releases.Entry{Version: v, Platform: p})
		}
	}
	return out
}

func (f *fakeFleet) Manifest(version, platform string) (*release.Manifest, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.releases[version+" "+platform] {
		return nil, false
	}
	return &release.Manifest{Version: version, Platform: platform, Size: 1, SHA256: strings.Repeat("0", 64), Signature: "x"}, true
}

func (f *fakeFleet) send(channelID, peerID string, fr link.Frame) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.peers[peerID]; !ok || !p.Online {
		return false
	}
	f.sent = append(f.sent, fr.(*link.Update))
	f.sentTo = append(f.sentTo, peerID)
	return true
}

func (f *fakeFleet) event(channelID string, e events.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

// takeSent returns the peers sent a frame since the last call, sorted.
func (f *fakeFleet) takeSent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.sentTo)
	f.sentTo = nil
	slices.Sort(out)
	return out
}

func (f *fakeFleet) add(id, version, platform string, online bool, tags map[string]string, caps ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if caps == nil {
		caps = []string{link.CapText, link.CapUpdate}
	}
	f.peers[id] = registry.Peer{PeerID: id, ChannelID: ch, Version: version, Platform: platform, Online: online, Tags: tags, Capabilities: caps}
}

func (f *fakeFleet) setOnline(id string, on bool, version string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.peers[id]
	p.Online = on
	if version != "" {
		p.Version = version
	}
	f.peers[id] = p
}

func (f *fakeFleet) hasEvent(name, peer string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.events {
		if e.Event == name && (peer == "" || e.PeerID == peer) {
			return true
		}
	}
	return false
}

type releasesOf struct{ f *fakeFleet }

func (r releasesOf) Ready() error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	return r.f.loading
}

func (r releasesOf) List(v string) []releases.Entry { return r.f.Releases(v) }
func (r releasesOf) Manifest(v, p string) (*release.Manifest, bool) {
	return r.f.Manifest(v, p)
}

func open(t *testing.T, f *fakeFleet, dir string, mut func(*Options)) *Manager {
	t.Helper()
	opt := Options{Dir: dir, Channels: []string{ch}, Devices: f, Releases: releasesOf{f}, Send: f.send, Event: f.event,
		URL:  func(c, v, p string) string { return "/api/channels/" + c + "/releases/" + v + "/" + p + "/binary" },
		Tick: time.Hour, NoSync: true}
	if mut != nil {
		mut(&opt)
	}
	m, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// fleetOf has n online devices d01..dNN on v1 linux/arm/6, and release v2.
func fleetOf(n int) *fakeFleet {
	f := newFakeFleet()
	for i := 1; i <= n; i++ {
		f.add(fmt.Sprintf("d%02d", i), "v1", "linux/arm/6", true, map[string]string{"site": "a"})
	}
	f.releases["v2 linux/arm/6"] = true
	return f
}

func report(m *Manager, peer, version, state, reason string) {
	m.Report(ch, peer, &link.UpdateStatus{Version: version, Running: map[bool]string{true: version, false: "v1"}[state == link.UpdateInstalled], State: state, Reason: reason})
}

func install(m *Manager, f *fakeFleet, peers ...string) {
	for _, p := range peers {
		f.setOnline(p, true, "v2")
		report(m, p, "v2", link.UpdateInstalled, "")
	}
}

func state(t *testing.T, m *Manager, id string) Rollout {
	t.Helper()
	r, err := m.Get(ch, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func devState(r Rollout, peer string) Device {
	for _, d := range r.Devices {
		if d.PeerID == peer {
			return d
		}
	}
	return Device{}
}

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

// Canaries first; the next wave only once every canary is installed;
// then waves of percent of the targeted devices; done at the end.
func TestCanariesThenWaves(t *testing.T) {
	f := fleetOf(10)
	m := open(t, f, t.TempDir(), nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{Tag: "site=a"}, Canary: 2, Percent: 50}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	if r.Waves != 3 || r.State != Running {
		t.Fatalf("waves %d state %s, want 3 waves (canaries, 5, 3) running", r.Waves, r.State)
	}
	eq(t, "canaries", f.takeSent(), []string{"d01", "d02"})
	report(m, "d01", "v2", link.UpdateDownloading, "")
	install(m, f, "d01")
	m.tick()
	eq(t, "after one canary", f.takeSent(), nil)
	install(m, f, "d02")
	eq(t, "wave 1", f.takeSent(), []string{"d03", "d04", "d05", "d06", "d07"})
	install(m, f, "d03", "d04", "d05", "d06")
	eq(t, "wave 1 not all installed", f.takeSent(), nil)
	install(m, f, "d07")
	eq(t, "wave 2", f.takeSent(), []string{"d08", "d09", "d10"})
	install(m, f, "d08", "d09", "d10")
	r = state(t, m, r.ID)
	if r.State != Done || r.Counts[Installed] != 10 {
		t.Fatalf("state %s counts %v, want done with 10 installed", r.State, r.Counts)
	}
	if !f.hasEvent(events.RolloutDone, "") || !f.hasEvent(events.RolloutWave, "") || !f.hasEvent(events.RolloutCreated, "") {
		t.Fatalf("events %v", f.events)
	}
	// An update frame carries the manifest and the device route.
	u := f.sent[0]
	if u.Version != "v2" || u.URL != "/api/channels/terminal-dev/releases/v2/linux/arm/6/binary" || !strings.Contains(u.Manifest, `"version": "v2"`) || u.UpdateID != r.ID+".1" {
		t.Fatalf("update frame %+v", u)
	}
}

// A failure pauses the rollout by itself, naming the device; nothing new
// is sent while paused; resume goes on without the failed device; abort
// ends it.
func TestPauseOnFailureResumeAbort(t *testing.T) {
	f := fleetOf(6)
	m := open(t, f, t.TempDir(), nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Canary: 2, Percent: 50}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	f.takeSent()
	m.Report(ch, "d01", &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateRolledBack, Reason: "health gate: no heartbeat in 30s"})
	r = state(t, m, r.ID)
	if r.State != Paused || r.Paused == nil || r.Paused.PeerID != "d01" || r.Paused.State != RolledBack || !strings.Contains(r.Paused.Reason, "no heartbeat") {
		t.Fatalf("after d01 rolled back: %s %+v", r.State, r.Paused)
	}
	if !f.hasEvent(events.RolloutPaused, "d01") || !f.hasEvent(events.RolloutDevice, "d01") {
		t.Fatal("no paused/device event naming d01")
	}
	// What the rollouts believed is kept in the registry (their rule).
	if p, _ := f.Get(ch, "d01"); p.Update == nil || p.Update.State != link.UpdateRolledBack || p.Update.Version != "v2" {
		t.Fatalf("d01's update in the registry: %+v", p.Update)
	}
	install(m, f, "d02")
	m.tick()
	eq(t, "while paused", f.takeSent(), nil)
	// The same failure resent on a reconnect is not news.
	report(m, "d01", "v2", link.UpdateRolledBack, "health gate: no heartbeat in 30s")
	if _, err := m.Resume(ch, r.ID, "otto", false); err != nil {
		t.Fatal(err)
	}
	eq(t, "after resume (without retry)", f.takeSent(), []string{"d03", "d04", "d05"})
	report(m, "d01", "v2", link.UpdateRolledBack, "health gate: no heartbeat in 30s")
	if r = state(t, m, r.ID); r.State != Running || devState(r, "d01").State != RolledBack {
		t.Fatalf("a failure resent after resume paused it again: %s %+v", r.State, devState(r, "d01"))
	}
	if _, err := m.Pause(ch, r.ID, "otto"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ch, r.ID, "otto", false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Abort(ch, r.ID, "otto"); err != nil {
		t.Fatal(err)
	}
	install(m, f, "d03", "d04", "d05")
	m.tick()
	eq(t, "after abort", f.takeSent(), nil)
	if r = state(t, m, r.ID); r.State != Aborted {
		t.Fatalf("state %s, want aborted", r.State)
	}
	if _, err := m.Resume(ch, r.ID, "otto", false); err == nil || err.(*Error).Status != 409 {
		t.Fatalf("resume of an aborted rollout: %v", err)
	}
}

// Resume with retry sends the failed device a new attempt; a report of
// the earlier attempt is then not news.
func TestResumeRetry(t *testing.T) {
	f := fleetOf(3)
	m := open(t, f, t.TempDir(), nil)
	r, _ := m.Create(ch, Request{Version: "v2", Target: Target{Peers: []string{"d01", "d02"}}, Canary: 1}, "otto")
	eq(t, "canary", f.takeSent(), []string{"d01"})
	m.Report(ch, "d01", &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateFailed, Reason: "sha256 mismatch"})
	if _, err := m.Resume(ch, r.ID, "otto", true); err != nil {
		t.Fatal(err)
	}
	eq(t, "retry", f.takeSent(), []string{"d01"})
	if u := f.sent[len(f.sent)-1]; u.UpdateID != r.ID+".2" {
		t.Fatalf("retry's update_id %s, want %s.2", u.UpdateID, r.ID)
	}
	m.Report(ch, "d01", &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateFailed, Reason: "sha256 mismatch"})
	if r = state(t, m, r.ID); r.State != Running || devState(r, "d01").State != Sent {
		t.Fatalf("the first attempt's failure counted again: %s %+v", r.State, devState(r, "d01"))
	}
	install(m, f, "d01")
	eq(t, "wave 1", f.takeSent(), []string{"d02"})
}

// A device offline when released gets its frame when it connects; one
// that goes offline mid-download is offline, not failed, and is sent the
// frame again if it comes back at rest on its old version.
func TestOfflineThenBack(t *testing.T) {
	f := fleetOf(3)
	f.setOnline("d03", false, "")
	m := open(t, f, t.TempDir(), nil)
	r, _ := m.Create(ch, Request{Version: "v2", Target: Target{All: true}}, "otto")
	eq(t, "online ones", f.takeSent(), []string{"d01", "d02"})
	if d := devState(state(t, m, r.ID), "d03"); d.State != Offline {
		t.Fatalf("d03 %+v, want offline", d)
	}
	f.setOnline("d03", true, "")
	m.DeviceConnected(ch, &link.Connect{PeerID: "d03", Version: "v1"})
	eq(t, "d03 back", f.takeSent(), []string{"d03"})

	report(m, "d01", "v2", link.UpdateDownloading, "")
	f.setOnline("d01", false, "")
	m.tick()
	if d := devState(state(t, m, r.ID), "d01"); d.State != Offline || d.Was != Downloading || r.State == Paused {
		t.Fatalf("d01 went offline downloading: %+v", d)
	}
	f.setOnline("d01", true, "")
	m.DeviceConnected(ch, &link.Connect{PeerID: "d01", Version: "v1"})
	eq(t, "d01 back: waits for its status", f.takeSent(), nil)
	m.Report(ch, "d01", &link.UpdateStatus{Version: "v1", Running: "v1", State: link.UpdateInstalled}) // restarted: at rest on v1
	eq(t, "d01 at rest on v1", f.takeSent(), []string{"d01"})

	// Restarting, offline, back on the new version: installed once it says so.
	report(m, "d02", "v2", link.UpdateRestarting, "")
	f.setOnline("d02", false, "")
	m.tick()
	f.setOnline("d02", true, "v2")
	m.DeviceConnected(ch, &link.Connect{PeerID: "d02", Version: "v2"})
	if d := devState(state(t, m, r.ID), "d02"); d.State != Restarting {
		t.Fatalf("d02 back on v2: %+v", d)
	}
	install(m, f, "d02")
	if d := devState(state(t, m, r.ID), "d02"); d.State != Installed {
		t.Fatalf("d02: %+v", d)
	}
	eq(t, "nothing sent twice", f.takeSent(), nil)
}

// The server restarts mid-rollout: the new Manager goes on from the file.
func TestRestartMidRollout(t *testing.T) {
	f := fleetOf(4)
	dir := t.TempDir()
	m := open(t, f, dir, nil)
	r, _ := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Canary: 1, Percent: 50}, "otto")
	f.takeSent()
	report(m, "d01", "v2", link.UpdateRestarting, "")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := open(t, f, dir, nil)
	if d := devState(state(t, m2, r.ID), "d01"); d.State != Restarting {
		t.Fatalf("after restart d01 is %+v", d)
	}
	install(m2, f, "d01")
	eq(t, "wave 1 after restart", f.takeSent(), []string{"d02", "d03"})
	if _, err := m2.Create(ch, Request{Version: "v2", Target: Target{All: true}}, "otto"); err == nil || err.(*Error).Status != 409 {
		t.Fatalf("a second active rollout on the channel: %v", err)
	}
}

// Devices that cannot take the release are skipped, and say why.
func TestSkipped(t *testing.T) {
	f := fleetOf(1)
	f.add("old", "v0", "", true, nil, link.CapText)
	f.add("x86", "v1", "linux/amd64", true, nil)
	f.add("same", "v2", "linux/arm/6", true, nil)
	m := open(t, f, t.TempDir(), nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Canary: 1}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	for peer, want := range map[string]string{"old": "update capability", "x86": "no release v2 for its platform linux/amd64", "same": "runs v2 already"} {
		if d := devState(r, peer); !strings.Contains(d.Reason, want) || (d.State != Skipped && d.State != Installed) {
			t.Errorf("%s: %+v, want skipped/installed because %q", peer, d, want)
		}
	}
	eq(t, "sent", f.takeSent(), []string{"d01"})
	install(m, f, "d01")
	if r = state(t, m, r.ID); r.State != Done {
		t.Fatalf("state %s %v", r.State, r.Counts)
	}
}

// Issue 40 deliver 3: a rollout to a version older than a device runs
// is a downgrade the device would refuse; the server knows the version
// it runs and skips it, saying so, unless the rollout allows downgrades.
// A version that does not order (a development build) is left to the
// device.
func TestDowngradeSkipped(t *testing.T) {
	f := fleetOf(1)
	f.add("newer", "v3.1", "linux/arm/6", true, nil)
	f.add("devel", "devel", "linux/arm/6", true, nil)
	m := open(t, f, t.TempDir(), nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Canary: 3}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	if d := devState(r, "newer"); d.State != Skipped || !strings.Contains(d.Reason, "it runs v3.1, newer than v2: a downgrade") {
		t.Errorf("a device on v3.1 in a rollout of v2: %+v, want skipped as a downgrade", d)
	}
	if d := devState(r, "devel"); d.State == Skipped {
		t.Errorf("a device on a development build: %+v, want it sent (the device decides)", d)
	}
	eq(t, "sent", f.takeSent(), []string{"d01", "devel"})

	f2 := fleetOf(0)
	f2.add("newer", "v3.1", "linux/arm/6", true, nil)
	m2 := open(t, f2, t.TempDir(), nil)
	r, err = m2.Create(ch, Request{Version: "v2", Target: Target{All: true}, Canary: 1, AllowDowngrade: true}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	if d := devState(r, "newer"); d.State == Skipped {
		t.Errorf("a downgrade allowed: %+v, want it sent", d)
	}
	eq(t, "sent", f2.takeSent(), []string{"newer"})
}

// Refusals with their reasons, and the bounds.
func TestCreateRefusals(t *testing.T) {
	f := fleetOf(4)
	m := open(t, f, t.TempDir(), func(o *Options) { o.MaxDevices = 3; o.MaxRollouts = 1 })
	for _, tc := range []struct {
		q      Request
		status int
		want   string
	}{
		{Request{Version: "v9", Target: Target{All: true}}, 404, "no release v9"},
		{Request{Version: "v2"}, 400, "exactly one of"},
		{Request{Version: "v2", Target: Target{All: true, Tag: "a=b"}}, 400, "exactly one of"},
		{Request{Version: "v2", Target: Target{Tag: "nokey"}}, 400, "key=value"},
		{Request{Version: "v2", Target: Target{Peers: []string{"d01", "nope"}}}, 404, "peer nope not known"},
		{Request{Version: "v2", Target: Target{Tag: "site=b"}}, 404, "no device"},
		{Request{Version: "v2", Target: Target{All: true}}, 413, "at most 3"},
		{Request{Version: "v2", Target: Target{Peers: []string{"d01"}}, Percent: 101}, 400, "percent"},
	} {
		_, err := m.Create(ch, tc.q, "otto")
		e, ok := err.(*Error)
		if !ok || e.Status != tc.status || !strings.Contains(e.Msg, tc.want) {
			t.Errorf("%+v: %v, want %d %q", tc.q, err, tc.status, tc.want)
		}
	}
	if _, err := m.Create("nope", Request{Version: "v2", Target: Target{All: true}}, "otto"); err == nil || err.(*Error).Status != 404 {
		t.Errorf("unknown channel: %v", err)
	}
	// The bound on rollouts kept: a finished one is dropped for a new one.
	r1, err := m.Create(ch, Request{Version: "v2", Target: Target{Peers: []string{"d01"}}}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ch, Request{Version: "v2", Target: Target{Peers: []string{"d02"}}}, "otto"); err == nil {
		t.Fatal("a second active rollout taken")
	}
	install(m, f, "d01")
	if _, err := m.Create(ch, Request{Version: "v2", Target: Target{Peers: []string{"d02"}}}, "otto"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ch, r1.ID); err == nil {
		t.Fatal("the finished rollout was kept past the bound")
	}
	if _, err := os.Stat(filepath.Join(m.opt.Dir, r1.ID+".json")); !os.IsNotExist(err) {
		t.Fatalf("its file: %v", err)
	}
}

// A rollout file that does not parse is moved aside; the others load.
func TestBadFileMovedAside(t *testing.T) {
	f := fleetOf(2)
	dir := t.TempDir()
	m := open(t, f, dir, nil)
	r, _ := m.Create(ch, Request{Version: "v2", Target: Target{All: true}}, "otto")
	m.Close()
	bad := filepath.Join(dir, "ro-0123456789ab.json")
	os.WriteFile(bad, []byte(`{"id":"ro-0123456789ab","id":"x"}`), 0o644)
	m2 := open(t, f, dir, nil)
	if _, err := m2.Get(ch, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bad + ".bad"); err != nil {
		t.Fatalf("bad file not moved aside: %v", err)
	}
}

// A device that restarted mid-download while the rollout was paused is
// sent the release on resume, not left downloading.
func TestRestartedWhilePaused(t *testing.T) {
	f := fleetOf(2)
	m := open(t, f, t.TempDir(), nil)
	r, _ := m.Create(ch, Request{Version: "v2", Target: Target{All: true}}, "otto")
	eq(t, "both", f.takeSent(), []string{"d01", "d02"})
	report(m, "d01", "v2", link.UpdateDownloading, "")
	if _, err := m.Pause(ch, r.ID, "otto"); err != nil {
		t.Fatal(err)
	}
	m.DeviceConnected(ch, &link.Connect{PeerID: "d01", Version: "v1"})
	m.Report(ch, "d01", &link.UpdateStatus{Version: "v1", Running: "v1", State: link.UpdateInstalled})
	eq(t, "while paused", f.takeSent(), nil)
	if _, err := m.Resume(ch, r.ID, "otto", false); err != nil {
		t.Fatal(err)
	}
	eq(t, "on resume", f.takeSent(), []string{"d01"})
}

// A device is believed only about an update this rollout sent it: a
// device pending in a later wave that reports failed (with any
// update_id, or none) or installed changes nothing, pauses nothing; a
// report about another rollout's update, resent on a connect, neither.
// (Issue 36 row 4: a device at attempt 0 paused a whole rollout.)
func TestReportOfAnUpdateNeverSent(t *testing.T) {
	f := fleetOf(4)
	m := open(t, f, t.TempDir(), nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Canary: 1, Percent: 50}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "canary", f.takeSent(), []string{"d01"})
	for _, st := range []*link.UpdateStatus{
		{UpdateID: "someone-else.1", Version: "v2", Running: "v1", State: link.UpdateFailed, Reason: "forged"},
		{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateRolledBack, Reason: "guessed id"},
		{Version: "v2", Running: "v1", State: link.UpdateRolledBack, Reason: "no id"},
		{Version: "v2", Running: "v2", State: link.UpdateInstalled},
		{UpdateID: r.ID + ".1", Version: "v2", Running: "v2", State: link.UpdateDownloading},
	} {
		m.Report(ch, "d03", st)
	}
	r = state(t, m, r.ID)
	if r.State != Running || r.Paused != nil {
		t.Fatalf("a device never sent the release changed the rollout: %s %+v", r.State, r.Paused)
	}
	if d := devState(r, "d03"); d.State != Pending || d.Running != "v1" || d.Reason != "" {
		t.Fatalf("d03, never sent the release: %+v, want pending on v1", d)
	}
	if f.hasEvent(events.RolloutDevice, "d03") {
		t.Fatal("an event for a report nobody asked for")
	}
	// The canary, which was sent it, is believed.
	m.Report(ch, "d01", &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateFailed, Reason: "disk full"})
	if r = state(t, m, r.ID); r.State != Paused || r.Paused.PeerID != "d01" {
		t.Fatalf("the canary's failure: %s %+v", r.State, r.Paused)
	}
}

// Report says what it believed (issue 36): the registry keeps a device's
// update state only from a report about the update this rollout sent it;
// an update_id that names no update sent to that device is refused with
// an error naming it; a start report (no update_id) and a resend of an
// earlier attempt are neither.
func TestReportSaysWhatItBelieved(t *testing.T) {
	f := fleetOf(4)
	m := open(t, f, t.TempDir(), nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Canary: 1, Percent: 50}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "canary", f.takeSent(), []string{"d01"})
	for _, c := range []struct {
		peer     string
		st       *link.UpdateStatus
		believed bool
		err      string // in the error; "" none
	}{
		{"d03", &link.UpdateStatus{UpdateID: "someone-else.1", Version: "v2", Running: "v1", State: link.UpdateFailed}, false, `update_id "someone-else.1" names no update this server sent to d03`},
		{"d03", &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateFailed}, false, "names no update this server sent to d03"},
		{"d01", &link.UpdateStatus{UpdateID: r.ID + ".2", Version: "v2", Running: "v1", State: link.UpdateFailed}, false, "names no update"},
		{"d01", &link.UpdateStatus{UpdateID: r.ID + ".01", Version: "v2", Running: "v1", State: link.UpdateFailed}, false, "names no update"},
		{"d01", &link.UpdateStatus{UpdateID: r.ID, Version: "v2", Running: "v1", State: link.UpdateFailed}, false, "names no update"},
		{"d03", &link.UpdateStatus{Version: "v2", Running: "v1", State: link.UpdateRolledBack}, false, ""}, // a start report: not news
		{"d01", &link.UpdateStatus{Version: "v1", Running: "v1", State: link.UpdateInstalled}, false, ""},  // at rest on another version
		{"d01", &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateDownloading}, true, ""},
		{"d01", &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateFailed, Reason: "disk full"}, true, ""},
		{"d01", &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateFailed, Reason: "disk full"}, false, ""}, // the same again
	} {
		believed, err := m.Report(ch, c.peer, c.st)
		switch {
		case c.err == "" && err != nil, c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Fatalf("Report(%s, %+v) error %v, want %q", c.peer, c.st, err, c.err)
		case believed != c.believed:
			t.Fatalf("Report(%s, %+v) believed %v, want %v", c.peer, c.st, believed, c.believed)
		}
	}
	// Resumed: attempt 2 is sent; attempt 1's report, resent on a
	// connect, is no error and not believed.
	if _, err := m.Resume(ch, r.ID, "otto", true); err != nil {
		t.Fatal(err)
	}
	eq(t, "resent", f.takeSent(), []string{"d01"})
	if believed, err := m.Report(ch, "d01", &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateFailed}); believed || err != nil {
		t.Fatalf("attempt 1's report after attempt 2 was sent: believed %v, error %v", believed, err)
	}
	if believed, err := m.Report(ch, "d01", &link.UpdateStatus{UpdateID: r.ID + ".2", Version: "v2", Running: "v1", State: link.UpdateDownloading}); !believed || err != nil {
		t.Fatalf("attempt 2's report: believed %v, error %v", believed, err)
	}
}

// A device's old connection may deliver its last report ("restarting")
// after its new connection's start report: the start report names the
// attempt (its update_id), so a rollback reported while the server still
// thinks the device is downloading is believed, and the late
// "restarting" does not leave the device restarting for good.
func TestStartReportOvertakesRestarting(t *testing.T) {
	f := fleetOf(2)
	m := open(t, f, t.TempDir(), nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Canary: 1, Percent: 50}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "canary", f.takeSent(), []string{"d01"})
	id := r.ID + ".1"
	for _, c := range []struct {
		st       *link.UpdateStatus
		believed bool
	}{
		{&link.UpdateStatus{UpdateID: id, Version: "v2", Running: "v1", State: link.UpdateDownloading}, true},
		{&link.UpdateStatus{UpdateID: id, Version: "v2", Running: "v1", State: link.UpdateRolledBack, Reason: "no heartbeat"}, true}, // the new connection's
		{&link.UpdateStatus{UpdateID: id, Version: "v2", Running: "v1", State: link.UpdateRestarting}, false},                        // the old one's, late
	} {
		if believed, err := m.Report(ch, "d01", c.st); believed != c.believed || err != nil {
			t.Fatalf("Report(%+v): believed %v, error %v; want %v", c.st, believed, err, c.believed)
		}
	}
	r = state(t, m, r.ID)
	if r.State != Paused || r.Paused == nil || r.Paused.PeerID != "d01" || r.Paused.State != link.UpdateRolledBack {
		t.Fatalf("rollout %s paused %+v; want paused by d01's rollback", r.State, r.Paused)
	}
	if d := r.Devices[0]; d.PeerID != "d01" || d.State != RolledBack {
		t.Fatalf("d01: %+v, want rolled_back", d)
	}
	// The same with a success: installed (named), then the late restarting.
	f2 := fleetOf(1)
	m2 := open(t, f2, t.TempDir(), nil)
	r2, err := m2.Create(ch, Request{Version: "v2", Target: Target{All: true}}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	id2 := r2.ID + ".1"
	m2.Report(ch, "d01", &link.UpdateStatus{UpdateID: id2, Version: "v2", Running: "v1", State: link.UpdateDownloading})
	m2.Report(ch, "d01", &link.UpdateStatus{UpdateID: id2, Version: "v2", Running: "v2", State: link.UpdateInstalled})
	m2.Report(ch, "d01", &link.UpdateStatus{UpdateID: id2, Version: "v2", Running: "v1", State: link.UpdateRestarting})
	if d := state(t, m2, r2.ID).Devices[0]; d.State != Installed {
		t.Fatalf("d01 after installed and a late restarting: %+v", d)
	}
}

// heldStorage is a LocalStorage whose next Put, once armed, waits until
// released (a slow disk, a NATS write waiting out an election).
type heldStorage struct {
	*LocalStorage
	armed   atomic.Bool
	writing chan struct{}
	release chan struct{}
}

func (h *heldStorage) Put(ctx context.Context, id string, value []byte, rev uint64) (uint64, error) {
	if h.armed.CompareAndSwap(true, false) {
		close(h.writing)
		<-h.release
	}
	return h.LocalStorage.Put(ctx, id, value, rev)
}

// A device released by an operator's action answers its frame while the
// action's record is being written: its answer is judged against what
// the action did, not the record before it. It used to be dropped as
// about "an update never sent" (the action ran on a copy taken in only
// once written), and the device stayed "sent" (TestReleaseRollout, in
// make test's race step under load: 2 runs in 4 with stress-ng).
func TestAnswerWhileTheActionIsWritten(t *testing.T) {
	f := fleetOf(4)
	local, err := OpenLocal(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	st := &heldStorage{LocalStorage: local, writing: make(chan struct{}), release: make(chan struct{})}
	opt := Options{Channels: []string{ch}, Devices: f, Releases: releasesOf{f}, Send: f.send, Event: f.event,
		URL:  func(c, v, p string) string { return "/api/channels/" + c + "/releases/" + v + "/" + p + "/binary" },
		Tick: time.Hour, NoSync: true}
	m, err := New(context.Background(), st, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Canary: 1, Percent: 50}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "canary sent", f.takeSent(), []string{"d01"})
	m.Report(ch, "d01", &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateFailed, Reason: "sha256 mismatch"})
	if r = state(t, m, r.ID); r.State != Paused {
		t.Fatalf("after the canary failed: %s, want paused", r.State)
	}

	if err := m.flush(); err != nil { // what is behind is written first, not held
		t.Fatal(err)
	}
	st.armed.Store(true)
	resumed := make(chan error, 1)
	go func() {
		_, err := m.Resume(ch, r.ID, "otto", false)
		resumed <- err
	}()
	<-st.writing // the resume's record is being written; its wave was sent
	sent := f.takeSent()
	if len(sent) == 0 {
		close(st.release)
		t.Fatal("the resume sent no device its frame before writing its record")
	}
	believed, err := m.Report(ch, sent[0], &link.UpdateStatus{UpdateID: r.ID + ".1", Version: "v2", Running: "v1", State: link.UpdateDownloading})
	close(st.release)
	if err := <-resumed; err != nil {
		t.Fatal(err)
	}
	if err != nil || !believed {
		t.Errorf("%s's downloading report while the resume was written: believed %v, err %v; want believed", sent[0], believed, err)
	}
	if d := devState(state(t, m, r.ID), sent[0]); d.State != Downloading {
		t.Errorf("%s after its report: %+v, want downloading", sent[0], d)
	}
}

// A node whose release store still loads (a cluster node's, in the
// background) refuses a new rollout with 503 and sends nothing, skipping
// no device for it; once loaded, what waited is sent.
func TestReleasesStillLoading(t *testing.T) {
	f := fleetOf(2)
	f.setOnline("d02", false, "")
	m := open(t, f, t.TempDir(), nil)
	f.mu.Lock()
	f.loading = &releases.Error{Status: 503, Msg: "loading"}
	f.mu.Unlock()
	if _, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}}, "otto"); err == nil {
		t.Fatal("a rollout started while the releases load")
	} else if e := (*releases.Error)(nil); !errors.As(err, &e) || e.Status != 503 {
		t.Fatalf("create while loading: %v, want the store's 503", err)
	}
	f.mu.Lock()
	f.loading = nil
	f.mu.Unlock()
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "online one", f.takeSent(), []string{"d01"})
	// d02 comes online while the store loads again (a node restarted).
	f.mu.Lock()
	f.loading = &releases.Error{Status: 503, Msg: "loading"}
	f.mu.Unlock()
	f.setOnline("d02", true, "")
	m.DeviceConnected(ch, &link.Connect{PeerID: "d02", Version: "v1"})
	m.tick()
	eq(t, "nothing while loading", f.takeSent(), nil)
	if d := devState(state(t, m, r.ID), "d02"); d.State == Skipped {
		t.Fatalf("d02 skipped while the releases load: %+v", d)
	}
	f.mu.Lock()
	f.loading = nil
	f.mu.Unlock()
	m.tick()
	eq(t, "d02 once loaded", f.takeSent(), []string{"d02"})
}
