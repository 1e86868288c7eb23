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
// "discovery" block is on; nil (a no-op Stop) when it is off or cannot
// start: devices then need the URL, which the error says.
func (s *Server) startDiscovery(ctx context.Context, addr net.Addr) *discovery.Advertiser {
	d := s.cfg.Discovery
	if !d.Enabled {
		return nil
	}
	var iface *net.Interface
	if d.Interface != "" {
		ifi, err := net.InterfaceByName(d.Interface)
		if err != nil {
			s.log.Error("LAN discovery not started: devices need --server URL", "interface", d.Interface, "err", err)
			return nil
		}
		iface = ifi
	}
	ips, err := discovery.AddrsFor(addr, iface)
	if err != nil {
		s.log.Error("LAN discovery not started: devices need --server URL", "err", err)
		return nil
	}
	if ips[0].IsLoopback() {
		s.log.Warn("LAN discovery advertises a loopback address: only this machine can use it", "addr", addr.String())
	}
	txt := discover.TXT{Paths: s.channelPaths(),
		TLS:    s.TLSEnabled(),
		Enroll: s.enrollmentOn(),
	}
	adv, err := discovery.Start(ctx, discovery.Config{Instance: d.Instance, Port: addr.(*net.TCPAddr).Port,
		IPs: ips, Interface: iface, TXT: txt, Logger: s.log})
	if err != nil {
		s.log.Error("LAN discovery not started: devices need --server URL", "err", err)
		return nil
	}
	return adv
}

// channelPaths lists the enabled channels' WebSocket paths, the default
// channel first.
func (s *Server) channelPaths() []string {
	var paths []string
	for _, id := range s.rt.order {
		if s.rt.channels[id].adapter == nil {
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
