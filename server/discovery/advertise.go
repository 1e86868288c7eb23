package discovery

import (
	"context"
	"log/slog"
	"net"

	"termlink/link/discover"
	"termlink/server/config"
)

// Advertise advertises the server listening on addr on the LAN over mDNS
// when d is on; nil (a no-op Stop) when it is off or cannot start:
// devices then need the URL, which the error logged says.
func Advertise(ctx context.Context, d config.Discovery, addr net.Addr, txt discover.TXT, log *slog.Logger) *Advertiser {
	if !d.Enabled {
		return nil
	}
	var iface *net.Interface
	if d.Interface != "" {
		ifi, err := net.InterfaceByName(d.Interface)
		if err != nil {
			log.Error("LAN discovery not started: devices need --server URL", "interface", d.Interface, "err", err)
			return nil
		}
		iface = ifi
	}
	ips, err := AddrsFor(addr, iface)
	if err != nil {
		log.Error("LAN discovery not started: devices need --server URL", "err", err)
		return nil
	}
	if ips[0].IsLoopback() {
		log.Warn("LAN discovery advertises a loopback address: only this machine can use it", "addr", addr.String())
	}
	adv, err := Start(ctx, Config{Instance: d.Instance, Port: addr.(*net.TCPAddr).Port,
		IPs: ips, Interface: iface, TXT: txt, Logger: log})
	if err != nil {
		log.Error("LAN discovery not started: devices need --server URL", "err", err)
		return nil
	}
	return adv
}
