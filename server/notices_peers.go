package server

import (
	"termlink/server/registry"
)

// PeerDirectory is what a notice broadcast needs of a channel's devices:
// the known peers whose tags include every one of tags (none: all).
type PeerDirectory interface {
	PeersWithTags(channelID string, tags map[string]string) []string
}

// registryDirectory is the device registry as a PeerDirectory: every
// device the server has seen, online or not.
type registryDirectory struct{ reg *registry.Registry }

// PeersWithTags implements PeerDirectory.
func (d registryDirectory) PeersWithTags(channelID string, tags map[string]string) []string {
	var out []string
	for _, p := range d.reg.List(channelID, registry.Filter{Tags: tags}) {
		out = append(out, p.PeerID)
	}
	return out
}

// noPeers is the PeerDirectory of mailboxes opened without a registry.
type noPeers struct{}

func (noPeers) PeersWithTags(string, map[string]string) []string { return nil }

// ForPeer is peer's open notices for the registry's peer page.
func (ns *Notices) ForPeer(channelID, peerID string) any { return ns.Pending(channelID, peerID) }
