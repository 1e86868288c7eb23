// Package discover finds a termserver on the LAN over mDNS/DNS-SD
// (service _termlink._tcp, RFC 6762/6763) for `termd --server auto`, and
// falls back to a configured or last-known URL when nothing answers.
//
// It also owns the TXT record format both ends share (TXT, ParseTXT); the
// server's advertiser (server/discovery) writes what ParseTXT reads.
// The browse is its own small mDNS client (dnsmsg.go): one query goes
// out over IPv4 multicast (224.0.0.251:5353) from an ephemeral port, and
// answers are read both there (unicast to the querying socket: a legacy
// unicast query, RFC 6762 §6.7, as termserver's advertiser and Avahi
// answer it) and on the multicast group. The server's advertiser
// (server/discovery) uses github.com/hashicorp/mdns; termd does not link
// it (it and github.com/miekg/dns were about 500 KB of termd for ARMv6).
package discover

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultWindow is how long Browse listens for answers.
const DefaultWindow = 3 * time.Second

// Found is one termserver that answered.
type Found struct {
	Instance string // the instance name, e.g. "lab1"
	Host     string // the SRV target, e.g. "lab1.local"
	Addr     net.IP // its IPv4 address (from the A record)
	Port     int
	TXT      TXT
	Err      error // the TXT record did not parse: shown, never picked
}

// HostPort is Addr:Port.
func (f Found) HostPort() string { return net.JoinHostPort(f.Addr.String(), strconv.Itoa(f.Port)) }

// URL is the channel URL for f: wss:// when it says tls=1. It takes the
// path of channel if f serves it, else f's first path.
func (f Found) URL(channel string) string {
	path := f.TXT.Paths[0]
	want := "/api/channels/" + channel + "/ws"
	for _, p := range f.TXT.Paths {
		if p == want {
			path = p
		}
	}
	scheme := "ws"
	if f.TXT.TLS {
		scheme = "wss"
	}
	return (&url.URL{Scheme: scheme, Host: f.HostPort(), Path: path}).String()
}

func (f Found) String() string {
	if f.Err != nil {
		return fmt.Sprintf("%s at %s: %v", f.Instance, f.HostPort(), f.Err)
	}
	return fmt.Sprintf("%s at %s path=%s tls=%s enroll=%s", f.Instance, f.HostPort(),
		strings.Join(f.TXT.Paths, ","), bit(f.TXT.TLS), bit(f.TXT.Enroll))
}

// BrowseOptions narrow a Browse.
type BrowseOptions struct {
	Window    time.Duration  // how long to listen; default DefaultWindow; ctx's deadline shortens it
	Interface *net.Interface // multicast interface for the query; nil: the system's default
}

// mdnsGroup is mDNS's IPv4 multicast group and port (RFC 6762 §3).
var mdnsGroup = &net.UDPAddr{IP: net.IPv4(224, 0, 0, 251), Port: 5353}

// Bounds of one Browse: instances it returns (64 servers on one LAN is
// plenty) and names it keeps track of meanwhile (answers for other
// services share the group).
const (
	maxFound   = 64
	maxPending = 256
)

// Browse sends one DNS-SD query for _termlink._tcp over IPv4 and returns
// every instance that answered within the window (or before ctx's
// deadline, whichever is sooner), in the order they answered. An instance
// is returned once its SRV, TXT and A records have all come (an instance
// that gave only some is asked again for the rest, once). Entries whose
// TXT does not parse are returned with Err set. A cancel of ctx ends the
// browse at once: what answered so far and ctx's error.
func Browse(ctx context.Context, o BrowseOptions) ([]Found, error) {
	window := o.Window
	if window <= 0 {
		window = DefaultWindow
	}
	if dl, ok := ctx.Deadline(); ok {
		window = min(window, time.Until(dl))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if window <= 0 {
		return nil, context.DeadlineExceeded
	}
	uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		return nil, fmt.Errorf("mDNS query for %s: a UDP socket: %w", Service, err)
	}
	defer uc.Close()
	mc, err := net.ListenMulticastUDP("udp4", o.Interface, mdnsGroup)
	if err != nil {
		return nil, fmt.Errorf("mDNS query for %s: joining %s: %w", Service, mdnsGroup, err)
	}
	defer mc.Close()
	if o.Interface != nil {
		if err := setMulticastInterface(uc, o.Interface); err != nil {
			return nil, fmt.Errorf("mDNS query for %s on %s: %w", Service, o.Interface.Name, err)
		}
	}

	// One reader per socket; both end when Browse closes the sockets, and
	// Browse waits for them.
	done := make(chan struct{})
	msgs := make(chan []record, 16)
	var wg sync.WaitGroup
	for _, c := range []*net.UDPConn{uc, mc} {
		wg.Go(func() { readRecords(c, msgs, done) })
	}
	defer func() {
		close(done)
		uc.Close()
		mc.Close()
		wg.Wait()
	}()

	q, err := buildQuery(Service+".local.", typePTR)
	if err != nil {
		return nil, err
	}
	if _, err := uc.WriteToUDP(q, mdnsGroup); err != nil {
		return nil, fmt.Errorf("mDNS query for %s: %w", Service, err)
	}

	b := newBrowser()
	timer := time.NewTimer(window)
	defer timer.Stop()
	for {
		select {
		case rs := <-msgs:
			for _, name := range b.add(rs) {
				if q, err := buildQuery(name, typeANY); err == nil {
					uc.WriteToUDP(q, mdnsGroup) // best effort: the window goes on
				}
			}
			if len(b.found) == maxFound {
				return b.found, nil
			}
		case <-timer.C:
			return b.found, nil
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return b.found, nil // the window ended with ctx's deadline
			}
			return b.found, ctx.Err()
		}
	}
}

// readRecords reads DNS responses on c and sends each one's records to
// msgs until c is closed. Queries (its own, looped back; other hosts')
// and packets that do not parse are dropped.
func readRecords(c *net.UDPConn, msgs chan<- []record, done <-chan struct{}) {
	buf := make([]byte, maxPacket+1)
	for {
		n, _, err := c.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-done:
				return
			default:
				continue
			}
		}
		rs, err := parseResponse(buf[:n])
		if err != nil || len(rs) == 0 {
			continue
		}
		select {
		case msgs <- rs:
		case <-done:
			return
		}
	}
}

// pending is an instance being put together from the records that name
// it, its SRV target or its PTR.
type pending struct {
	name    string // the instance's full name, as its first record spelled it
	host    string
	addrV4  net.IP
	port    int
	txt     []string
	hasTXT  bool
	asked   bool // asked again for the records it lacked
	reached bool // returned
}

// browser puts instances together from the records of the answers, as
// hashicorp/mdns's client did: a PTR names an instance; an SRV gives its
// host and port, and the host's A record is the instance's address; a
// TXT its fields. Names match case-insensitively.
type browser struct {
	byName map[string]*pending
	found  []Found
}

func newBrowser() *browser { return &browser{byName: map[string]*pending{}} }

func (b *browser) entry(name string) *pending {
	k := strings.ToLower(name)
	if p, ok := b.byName[k]; ok {
		return p
	}
	if len(b.byName) >= maxPending {
		return nil
	}
	p := &pending{name: name}
	b.byName[k] = p
	return p
}

// add takes one message's records and returns the instance names to ask
// again (those still lacking records, once each).
func (b *browser) add(rs []record) []string {
	service := "." + strings.ToLower(Service) + ".local."
	var touched []*pending
	for _, r := range rs {
		var p *pending
		switch r.Type {
		case typePTR:
			if !strings.HasSuffix(strings.ToLower(r.Target), service) {
				continue // another service's instance
			}
			p = b.entry(r.Target)
		case typeSRV:
			if p = b.entry(r.Name); p == nil {
				continue
			}
			p.host, p.port = r.Target, int(r.Port)
			if !strings.EqualFold(r.Target, r.Name) {
				if _, ok := b.byName[strings.ToLower(r.Target)]; !ok && len(b.byName) < maxPending {
					b.byName[strings.ToLower(r.Target)] = p // the host's A record lands on p
				}
			}
		case typeTXT:
			if p = b.entry(r.Name); p != nil {
				p.txt, p.hasTXT = r.TXT, true
			}
		case typeA:
			if p = b.entry(r.Name); p != nil {
				p.addrV4 = r.IP
			}
		default:
			continue
		}
		if p != nil {
			touched = append(touched, p)
		}
	}
	var ask []string
	for _, p := range touched {
		if p.reached || !strings.HasSuffix(strings.ToLower(p.name), service) {
			continue
		}
		if p.addrV4 != nil && p.port != 0 && p.hasTXT {
			p.reached = true
			if len(b.found) < maxFound {
				b.found = append(b.found, p.found())
			}
		} else if !p.asked {
			p.asked = true
			ask = append(ask, p.name)
		}
	}
	return ask
}

func (p *pending) found() Found {
	f := Found{
		Instance: instanceName(p.name),
		Host:     strings.TrimSuffix(p.host, "."),
		Addr:     p.addrV4,
		Port:     p.port,
	}
	f.TXT, f.Err = ParseTXT(p.txt)
	return f
}

// LibraryLog routes the standard library logger, which the mDNS library
// of termserver's advertiser (github.com/hashicorp/mdns, server/discovery;
// Browse logs nothing there) writes to ("[INFO] mdns: Closing client ..." on every query, "[ERR]
// mdns: ..." for packets it cannot handle), into l: the library's lines at
// debug level, any other line at warn. A command calls it once at start
// (it sets the process's standard logger); on a console board stderr is
// the display.
func LibraryLog(l *slog.Logger) {
	log.SetFlags(0)
	log.SetOutput(stdLogWriter{l})
}

type stdLogWriter struct{ l *slog.Logger }

func (w stdLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(line, "[INFO] mdns: "); ok {
		w.l.Debug("mdns library", "detail", rest)
	} else if rest, ok := strings.CutPrefix(line, "[ERR] mdns: "); ok {
		w.l.Debug("mdns library", "err", rest)
	} else {
		w.l.Warn(line)
	}
	return len(p), nil
}

// instanceName takes "lab1._termlink._tcp.local." to "lab1" (DNS escapes
// such as "\032" are left as they are).
func instanceName(full string) string {
	if i := strings.Index(full, "."+Service+"."); i > 0 {
		return full[:i]
	}
	return strings.TrimSuffix(full, ".")
}

// ErrNoServer is returned by Pick when nothing usable answered.
var ErrNoServer = errors.New("no termserver answered")

// Pick chooses the first usable entry, or the one whose instance is name
// (case-insensitive) when name is set.
func Pick(found []Found, name string) (Found, error) {
	usable := 0
	for _, f := range found {
		if f.Err != nil {
			continue
		}
		usable++
		if name == "" || strings.EqualFold(f.Instance, name) {
			return f, nil
		}
	}
	if name != "" && usable > 0 {
		return Found{}, fmt.Errorf("%w named %q (%d other answered)", ErrNoServer, name, usable)
	}
	return Found{}, ErrNoServer
}
