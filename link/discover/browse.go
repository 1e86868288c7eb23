// Package discover finds a termserver on the LAN over mDNS/DNS-SD
// (service _termlink._tcp, RFC 6762/6763) for `termd --server auto`, and
// falls back to a configured or last-known URL when nothing answers.
//
// It also owns the TXT record format both ends share (TXT, ParseTXT); the
// server's advertiser (server/discovery) writes what ParseTXT reads.
// mDNS itself is github.com/hashicorp/mdns: queries go out over IPv4
// multicast (224.0.0.251:5353) and answers come back by unicast to the
// querying socket.
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
	"time"

	"github.com/hashicorp/mdns"
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

// Browse sends one DNS-SD query for _termlink._tcp over IPv4 and returns
// every instance that answered within the window (or before ctx's
// deadline, whichever is sooner), in the order they answered. The mDNS
// library takes a timeout, not a context: a cancel without a deadline
// waits out the window. Entries whose TXT does not parse are returned with
// Err set.
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
	// The library sends an entry without blocking and drops it when the
	// channel is full; 64 servers on one LAN is plenty.
	entries := make(chan *mdns.ServiceEntry, 64)
	p := &mdns.QueryParam{
		Service:     Service,
		Domain:      "local",
		Timeout:     window,
		Interface:   o.Interface,
		Entries:     entries,
		DisableIPv6: true,
	}
	if err := mdns.Query(p); err != nil {
		return nil, fmt.Errorf("mDNS query for %s: %w", Service, err)
	}
	close(entries)
	var found []Found
	seen := map[string]bool{}
	for e := range entries {
		if e.AddrV4 == nil || seen[e.Name] {
			continue
		}
		seen[e.Name] = true
		found = append(found, entryFound(e))
	}
	return found, nil
}

// LibraryLog routes the standard library logger, which the mDNS library
// writes to ("[INFO] mdns: Closing client ..." on every query, "[ERR]
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

func entryFound(e *mdns.ServiceEntry) Found {
	f := Found{
		Instance: instanceName(e.Name),
		Host:     strings.TrimSuffix(e.Host, "."),
		Addr:     e.AddrV4,
		Port:     e.Port,
	}
	f.TXT, f.Err = ParseTXT(e.InfoFields)
	return f
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
