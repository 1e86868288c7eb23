package rollouttest

import (
	"slices"
	"strings"
	"sync"

	"termlink/link"
	"termlink/release"
	"termlink/server/events"
	"termlink/server/registry"
	"termlink/server/releases"
	"termlink/server/rollout"
)

// Channel is the channel of the Fleet's devices.
const Channel = "terminal-dev"

// Fleet is a device registry shared by nodes (as the cluster's is),
// each device connected to one node or none, a release store, and what
// each node sent.
type Fleet struct {
	mu       sync.Mutex
	peers    map[string]registry.Peer
	at       map[string]string // peer -> the node it is connected to
	releases map[string]bool   // version + " " + platform
	sent     map[string][]*link.Update
	events   []events.Event
}

// NewFleet has release v2 for linux/arm/6 and no device.
func NewFleet() *Fleet {
	return &Fleet{peers: map[string]registry.Peer{}, at: map[string]string{}, releases: map[string]bool{"v2 linux/arm/6": true},
		sent: map[string][]*link.Update{}}
}

// Connect puts peer online on node, running version (a device with the
// update capability on linux/arm/6); node "" takes it offline.
func (f *Fleet) Connect(peer, node, version string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.peers[peer]
	if !ok {
		p = registry.Peer{PeerID: peer, ChannelID: Channel, Platform: "linux/arm/6", Capabilities: []string{link.CapText, link.CapUpdate}}
	}
	p.Online, p.Version = node != "", version
	f.peers[peer] = p
	f.at[peer] = node
}

// Sent is the update frames node sent peer.
func (f *Fleet) Sent(node, peer string) []*link.Update {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent[node+" "+peer])
}

// Options are a node's Manager options over the fleet.
func (f *Fleet) Options(node string) rollout.Options {
	return rollout.Options{Channels: []string{Channel}, Devices: f, Releases: fleetReleases{f}, Node: node,
		Send: func(channelID, peerID string, fr link.Frame) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.at[peerID] != node || node == "" {
				return false
			}
			f.sent[node+" "+peerID] = append(f.sent[node+" "+peerID], fr.(*link.Update))
			return true
		},
		Event: func(_ string, e events.Event) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.events = append(f.events, e)
		},
		URL: func(c, v, p string) string { return "/api/channels/" + c + "/releases/" + v + "/" + p + "/binary" },
	}
}

// Installed is the update_status of a device that installed version.
func Installed(version string) *link.UpdateStatus {
	return &link.UpdateStatus{Version: version, Running: version, State: link.UpdateInstalled}
}

// Get implements rollout.Devices.
func (f *Fleet) Get(_, peerID string) (registry.Peer, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.peers[peerID]
	return p, ok
}

// List implements rollout.Devices.
func (f *Fleet) List(_ string, flt registry.Filter) []registry.Peer {
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

// SetUpdate implements rollout.Devices.
func (f *Fleet) SetUpdate(_, peerID string, u registry.UpdateState) bool {
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
func (f *Fleet) SetBusy(_, peerID string, b registry.BusyState) bool {
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

type fleetReleases struct{ f *Fleet }

func (fleetReleases) Ready() error { return nil }

func (r fleetReleases) List(version string) []releases.Entry {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	var out []releases.Entry
	for k := range r.f.releases {
		if v, p, _ := strings.Cut(k, " "); v == version {
			out = append(out, releases.Entry{Version: v, Platform: p})
		}
	}
	return out
}

func (r fleetReleases) Manifest(version, platform string) (*release.Manifest, bool) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if !r.f.releases[version+" "+platform] {
		return nil, false
	}
	return &release.Manifest{Version: version, Platform: platform, Size: 1, SHA256: strings.Repeat("0", 64), Signature: "x"}, true
}
