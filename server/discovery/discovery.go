// Package discovery advertises termserver on the LAN over mDNS/DNS-SD
// (RFC 6762/6763): service _termlink._tcp, an SRV record with the port, an
// A record per advertised IPv4 address and a TXT record with the channel
// paths and whether TLS and enrollment are on (the format is
// link/discover's, so both ends share one definition).
//
// The responder is github.com/hashicorp/mdns: it listens on UDP 5353
// (joined to 224.0.0.251) and answers each query by unicast to the
// querier. Stop closes its sockets; its reader goroutines end with them.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/hashicorp/mdns"

	"termlink/link/discover"
)

// Config is what to advertise.
type Config struct {
	Instance  string         // DNS-SD instance name; "": the host name's first label
	HostName  string         // SRV target; "": "<host name>.local."
	Port      int            // the HTTP port devices dial
	IPs       []net.IP       // IPv4 addresses to advertise; see AddrsFor
	Interface *net.Interface // listen for queries on this interface; nil: the system's default
	TXT       discover.TXT
	Logger    *slog.Logger
}

// Advertiser answers mDNS queries for one termserver until Stop.
type Advertiser struct {
	srv  *mdns.Server
	zone *mdns.MDNSService
}

// Start begins answering queries for _termlink._tcp.
func Start(ctx context.Context, c Config) (*Advertiser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	zone, err := Zone(c)
	if err != nil {
		return nil, err
	}
	srv, err := mdns.NewServer(&mdns.Config{Zone: zone, Iface: c.Interface})
	if err != nil {
		return nil, fmt.Errorf("mDNS advertisement on UDP 5353: %w", err)
	}
	log.Info("advertising on the LAN (mDNS)", "service", discover.Service, "instance", zone.Instance,
		"addrs", zone.IPs, "port", zone.Port, "txt", strings.Join(zone.TXT, " "))
	return &Advertiser{srv: srv, zone: zone}, nil
}

// Stop closes the responder's sockets. It may be called more than once.
func (a *Advertiser) Stop() error {
	if a == nil {
		return nil
	}
	return a.srv.Shutdown()
}

// Zone builds the DNS-SD records Start answers with.
func Zone(c Config) (*mdns.MDNSService, error) {
	instance, host := c.Instance, c.HostName
	if instance == "" || host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("mDNS instance name from the host name: %w", err)
		}
		label, _, _ := strings.Cut(h, ".")
		if label == "" {
			label = "termserver"
		}
		if instance == "" {
			instance = label
		}
		if host == "" {
			host = label + ".local."
		}
	}
	if len(c.IPs) == 0 {
		return nil, errors.New("mDNS advertisement: no IPv4 address to advertise")
	}
	txt, dropped := c.TXT.Strings()
	if dropped > 0 {
		return nil, fmt.Errorf("mDNS advertisement: %d channel paths do not fit in one 255-byte TXT string", dropped)
	}
	zone, err := mdns.NewMDNSService(instance, discover.Service, "local.", host, c.Port, c.IPs, txt)
	if err != nil {
		return nil, fmt.Errorf("mDNS records for %q: %w", instance, err)
	}
	return zone, nil
}

// AddrsFor lists the IPv4 addresses a listener on addr is reachable at: a
// specific IP as is; for an unspecified one (0.0.0.0, ::), every IPv4
// address of iface, or of every up, multicast-capable interface when
// iface is nil. Loopback addresses count only for a loopback listener.
func AddrsFor(addr net.Addr, iface *net.Interface) ([]net.IP, error) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("mDNS advertisement: listener address %s is not TCP", addr)
	}
	if ip4 := tcp.IP.To4(); ip4 != nil && !ip4.IsUnspecified() {
		return []net.IP{ip4}, nil
	}
	if tcp.IP != nil && !tcp.IP.IsUnspecified() {
		return nil, fmt.Errorf("mDNS advertisement: listener %s is IPv6; only IPv4 is advertised", addr)
	}
	ifaces := []net.Interface{}
	if iface != nil {
		ifaces = append(ifaces, *iface)
	} else {
		all, err := net.Interfaces()
		if err != nil {
			return nil, fmt.Errorf("mDNS advertisement: listing interfaces: %w", err)
		}
		for _, ifi := range all {
			if ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagMulticast != 0 && ifi.Flags&net.FlagLoopback == 0 {
				ifaces = append(ifaces, ifi)
			}
		}
	}
	var ips []net.IP
	for _, ifi := range ifaces {
		addrs, err := ifi.Addrs()
		if err != nil {
			return nil, fmt.Errorf("mDNS advertisement: addresses of %s: %w", ifi.Name, err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip4 := n.IP.To4(); ip4 != nil && !ip4.IsLoopback() {
					ips = append(ips, ip4)
				}
			}
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("mDNS advertisement: no IPv4 address on the LAN interfaces to advertise for %s", addr)
	}
	return ips, nil
}
