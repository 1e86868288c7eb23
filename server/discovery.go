package server

import (
	"context"
	"net"
	"slices"

	"termlink/link/discover"
	"termlink/server/config"
	"termlink/server/discovery"
)

// startDiscovery advertises s on the LAN over mDNS when the config's
// "discovery" block is on (discovery.Advertise; nil when it is off or
// cannot start).
func (s *Server) startDiscovery(ctx context.Context, addr net.Addr) *discovery.Advertiser {
	if !s.cfg.Discovery.Enabled {
		return nil
	}
	txt := discover.TXT{Paths: s.channelPaths(), TLS: s.TLSEnabled(), Enroll: s.enrollmentOn()}
	return discovery.Advertise(ctx, s.cfg.Discovery, addr, txt, s.log)
}

// channelPaths lists the enabled channels' WebSocket paths, the default
// channel first.
func (s *Server) channelPaths() []string {
	var paths []string
	for _, id := range s.rt.Order {
		if s.rt.Channels[id].Adapter == nil {
			continue
		}
		p := "/api/channels/" + id + "/ws"
		if id == config.DefaultChannelID {
			paths = slices.Insert(paths, 0, p)
		} else {
			paths = append(paths, p)
		}
	}
	return paths
}
