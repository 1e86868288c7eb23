package server

import (
	"maps"
	"sort"
	"sync"
)

// PeerDirectory is what a notice broadcast needs of a channel's devices:
// every peer it knows, with the tags its device sent in connect. The
// device registry implements it; seenPeers stands in until then.
type PeerDirectory interface {
	KnownPeers(channelID string) []KnownPeer
}

// KnownPeer is one peer of a PeerDirectory.
type KnownPeer struct {
	PeerID string
	Tags   map[string]string
}

// seenPeers is a PeerDirectory of the peers that connected since the
// server started, with the tags of their last connect (memory only).
type seenPeers struct {
	mu sync.Mutex
	m  map[string]map[string]map[string]string // channel -> peer -> tags
}

func (s *seenPeers) record(channelID, peerID string, tags map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]map[string]map[string]string{}
	}
	if s.m[channelID] == nil {
		s.m[channelID] = map[string]map[string]string{}
	}
	s.m[channelID][peerID] = maps.Clone(tags)
}

// KnownPeers implements PeerDirectory.
func (s *seenPeers) KnownPeers(channelID string) []KnownPeer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]KnownPeer, 0, len(s.m[channelID]))
	for p, t := range s.m[channelID] {
		out = append(out, KnownPeer{PeerID: p, Tags: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PeerID < out[j].PeerID })
	return out
}

// selectPeers returns the known peers whose tags include every one of want
// (nil or empty: all of them), sorted.
func selectPeers(dir PeerDirectory, channelID string, want map[string]string) []string {
	var out []string
	for _, p := range dir.KnownPeers(channelID) {
		ok := true
		for k, v := range want {
			if got, has := p.Tags[k]; !has || got != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, p.PeerID)
		}
	}
	return out
}
