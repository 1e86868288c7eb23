package load

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"termlink/link"
)

// Defaults used when an Options field is zero.
const (
	DefaultChannel        = link.DefaultChannel
	DefaultPeerPrefix     = "load"
	DefaultText           = "hello from termrig load"
	DefaultDrain          = 5 * time.Second
	DefaultConnectRate    = 500
	DefaultConnectTimeout = 10 * time.Second
	// DefaultHeartbeat is the ping interval when connected carries no
	// heartbeat_seconds.
	DefaultHeartbeat = 30 * time.Second
)

// writeWait bounds every write to a connection.
const writeWait = 5 * time.Second

// Options configures Run.
type Options struct {
	// URL of the channel WebSocket: ws://host:port/api/channels/ID/ws.
	// http(s):// URLs and bare host:port are accepted; without a path the
	// channel path of Channel is filled in (see ChannelURL). Set URL or
	// URLs, not both.
	URL string
	// URLs are several servers (the edges of a cluster): device i uses
	// URLs[i mod len(URLs)]. Each is read like URL. After withDefaults
	// URLs holds the channel URLs and URL their comma-separated list.
	URLs []string
	// Move, when positive, makes every device hop to the next server of
	// URLs every Move while messages are sent (and in Hold mode): a lean
	// device closes its WebSocket, dials the next server with the same
	// peer id and resends its unanswered messages (same message ids); a
	// client-mode device's link.Client is closed and a new one started on
	// the next URL with the same outbox, which resends them. The moves
	// are staggered: device i first moves at Move*(i+1)/Devices after
	// sending starts. It needs at least two URLs.
	Move time.Duration
	// Channel is the channel id used when URL has no path (default
	// "terminal-dev").
	Channel string
	// Devices is the number of simulated devices (at least 1).
	Devices int
	// Rate is the total number of messages per second over all devices;
	// 0 leaves the devices idle (heartbeats only).
	Rate float64
	// Duration is how long messages are sent (or, with Rate 0, how long
	// the idle devices stay connected). Required unless Hold is set.
	Duration time.Duration
	// Drain is how long to wait for outstanding replies after Duration
	// (default 5s; negative means no wait).
	Drain time.Duration
	// ConnectRate is how many devices start dialing per second, and how
	// many handshakes may be in flight at once (default 500).
	ConnectRate int
	// ConnectTimeout bounds one device's dial + connect handshake
	// (default 10s).
	ConnectTimeout time.Duration
	// PeerPrefix names the devices <PeerPrefix>-<i> (default "load").
	PeerPrefix string
	// Token, when set, is sent as "Authorization: Bearer <Token>" and in
	// the connect frame.
	Token string
	// Text is the text of every user message (default DefaultText).
	Text string
	// Hold keeps the idle devices connected after the connect phase until
	// ctx is cancelled (for measuring server memory per connection). It
	// requires Rate 0; Duration is then ignored.
	Hold bool
	// Client makes every device a real link.Client (dial, connect,
	// heartbeats, reconnect backoff, outbox and resend) instead of the
	// lean built-in device. Use it to test link.Client end to end and how
	// the clients and the server ride out disconnects together (a
	// reconnecting device resends what is unanswered; the report counts
	// Reconnects). It costs about 4 times the memory per device (6
	// goroutines instead of 1), so measure connection capacity (10,000
	// idle devices) in lean mode.
	Client bool
	// Stream makes the lean devices list "stream": the report then has
	// the time to each message's first delta frame, the deltas per run,
	// and checks that each run's deltas add up to the start of its reply
	// (and follow each other without gaps). Lean mode only.
	Stream bool
	// Outbox is the outbox of each client: OutboxMemory (default) or
	// OutboxFile (a link.FileOutbox, fsync per message, in a temp state
	// dir per device, removed when Run returns). Client mode only.
	Outbox string
	// ServerPID, when set, is the process id of the server under test,
	// on this machine (Linux): the report then has the CPU time it spent
	// from the start of sending to the end of the drain (ServerCPUMs),
	// and that time per reply received in the same window.
	ServerPID int
	// CAFile is a PEM file of CA certificates trusted for wss:// servers
	// (a self-signed or lab CA) instead of the system roots; read once
	// and shared by every device, lean or client.
	CAFile string
	// Reconnects, when set, receives the reconnect log of client mode:
	// one JSON line (ReconnectEvent) each time a device in use loses its
	// link ("down"), fails an attempt to get it back ("failed", with its
	// refusal class: RefusalClass) and has it back ("up"), with the time
	// in Unix nanoseconds, for measuring a reconnect storm after a
	// server restart (testrig/bench/storm.sh). Client mode only.
	Reconnects io.Writer
	// Latencies, when set, receives one line per message sent, written
	// once the run is over: the send time (Unix nanoseconds), then the
	// ack's and the final reply's delay after it in microseconds (-1:
	// none came), then the message id. A time series of the round trips
	// (which moments the slow ones share) beside a server's own traces.
	Latencies io.Writer
	// Status receives progress lines meant for a person, such as
	// "connected N devices" in Hold mode (nil: discarded).
	Status io.Writer
	// Logger receives debug detail (per-device errors) and phase changes
	// (nil: discarded).
	Logger *slog.Logger
}

// withDefaults validates opt and fills in the defaults.
func (opt Options) withDefaults() (Options, error) {
	var errs []error
	if opt.Channel == "" {
		opt.Channel = DefaultChannel
	}
	urls, err := channelURLs(opt.URL, opt.URLs, opt.Channel)
	if err != nil {
		errs = append(errs, err)
	}
	opt.URLs, opt.URL = urls, strings.Join(urls, ",")
	switch {
	case opt.Move < 0:
		errs = append(errs, fmt.Errorf("move must not be negative, got %v", opt.Move))
	case opt.Move > 0 && len(urls) < 2 && err == nil:
		errs = append(errs, fmt.Errorf("move hops devices between servers: give at least two server URLs, got %d", len(urls)))
	}
	if opt.Devices < 1 {
		errs = append(errs, fmt.Errorf("devices must be at least 1, got %d", opt.Devices))
	}
	if opt.Rate < 0 || opt.Rate != opt.Rate || opt.Rate > 1e7 {
		errs = append(errs, fmt.Errorf("rate must be between 0 and 1e7 messages/s, got %v", opt.Rate))
	}
	if opt.Hold {
		if opt.Rate != 0 {
			errs = append(errs, errors.New("hold measures idle connections: use it with rate 0"))
		}
	} else if opt.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration must be positive, got %v", opt.Duration))
	}
	switch {
	case opt.Drain == 0:
		opt.Drain = DefaultDrain
	case opt.Drain < 0:
		opt.Drain = 0
	}
	if opt.ConnectRate == 0 {
		opt.ConnectRate = DefaultConnectRate
	} else if opt.ConnectRate < 0 {
		errs = append(errs, fmt.Errorf("connect rate must be positive, got %d", opt.ConnectRate))
	}
	if opt.ConnectTimeout == 0 {
		opt.ConnectTimeout = DefaultConnectTimeout
	} else if opt.ConnectTimeout < 0 {
		errs = append(errs, fmt.Errorf("connect timeout must be positive, got %v", opt.ConnectTimeout))
	}
	if opt.PeerPrefix == "" {
		opt.PeerPrefix = DefaultPeerPrefix
	}
	if opt.Text == "" {
		opt.Text = DefaultText
	} else if strings.TrimSpace(opt.Text) == "" {
		errs = append(errs, errors.New("text must not be blank (the server refuses blank messages)"))
	}
	switch {
	case !opt.Client && opt.Outbox != "":
		errs = append(errs, fmt.Errorf("outbox %q is for client mode: set Client", opt.Outbox))
	case !opt.Client:
	case opt.Outbox == "":
		opt.Outbox = OutboxMemory
	case opt.Outbox != OutboxMemory && opt.Outbox != OutboxFile:
		errs = append(errs, fmt.Errorf("outbox must be %q or %q, got %q", OutboxMemory, OutboxFile, opt.Outbox))
	}
	if opt.Stream && opt.Client {
		errs = append(errs, errors.New("stream is measured by the lean devices: leave client mode off"))
	}
	if opt.Reconnects != nil && !opt.Client {
		errs = append(errs, errors.New("the reconnect log follows link.Client's reconnects: set Client"))
	}
	if opt.ServerPID < 0 {
		errs = append(errs, fmt.Errorf("server pid must be positive, got %d", opt.ServerPID))
	} else if opt.ServerPID > 0 {
		if _, err := processCPU(opt.ServerPID); err != nil {
			errs = append(errs, err)
		}
	}
	if opt.Status == nil {
		opt.Status = io.Discard
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	return opt, errors.Join(errs...)
}

// ChannelURLs is link.ChannelURL for each server of a list whose entries may
// be comma-separated lists themselves; an empty entry is an error that
// says which.
func ChannelURLs(list []string, channel string) ([]string, error) {
	return channelURLs("", list, channel)
}

// channelURLs checks and completes the server URLs: single (the URL
// field) or several (URLs; each entry may itself be a comma-separated
// list), not both.
func channelURLs(single string, several []string, channel string) ([]string, error) {
	if single != "" && len(several) > 0 {
		return nil, errors.New("give the server URL in URL or URLs, not both")
	}
	if len(several) == 0 {
		u, err := link.ChannelURL(single, channel)
		if err != nil {
			return nil, err
		}
		return []string{u}, nil
	}
	raw := SplitURLs(several)
	urls := make([]string, 0, len(raw))
	var errs []error
	for i, r := range raw {
		if strings.TrimSpace(r) == "" {
			errs = append(errs, fmt.Errorf("server URL %d of %d is empty", i+1, len(raw)))
			continue
		}
		u, err := link.ChannelURL(r, channel)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		urls = append(urls, u)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return urls, nil
}

// SplitURLs splits every comma-separated entry of list: {"a,b", "c"}
// gives {"a", "b", "c"}. Empty parts are kept (as "") for the caller to
// refuse.
func SplitURLs(list []string) []string {
	var out []string
	for _, e := range list {
		out = append(out, strings.Split(e, ",")...)
	}
	return out
}
