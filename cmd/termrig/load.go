package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"termlink/testrig/load"
)

const loadSynopsis = `--server URL[,URL...] [--devices N] [--rate R] [--duration D] [--move D] [flags]

Simulates N terminal devices speaking the channel protocol to URL
(ws://host:port/api/channels/ID/ws; http://host:port or host:port get the
path of --channel). Messages go at R per second in total, spread over the
devices; after --duration sending stops, replies are awaited for --drain,
the connections are closed and a report is printed. Exit status 1 when a
device failed to connect or a message was lost. --rate 0 keeps the devices
idle (heartbeats only); --hold keeps idle devices connected until Ctrl-C.
Ctrl-C stops early and still prints the report.

Several servers (the edges of a cluster): repeat --server or separate the
URLs with commas; device i uses server i mod n, and the report lists the
devices connected to each. --move D makes every device hop to the next
server every D while messages are sent (with --hold: until Ctrl-C),
staggered so that device i first moves at D*(i+1)/N: it closes its
connection, connects to the next server with the same peer id and resends
its unanswered messages with the same message ids (a lean device that lost
its connection, or failed a move, comes back at its next move). The report
counts moves and failed moves; a reply received twice for one message id
counts as a duplicate, a message never answered as lost.

By default every device is lean built-in code, cheap enough for 10,000
idle connections from one process: use it to load the server. --client
makes every device a real link.Client (heartbeats, reconnect backoff,
outbox, resend until answered, as in termd), with a memory outbox or, with
--outbox file, a file outbox in a temp state dir per device (fsync per
message). Use it to test link.Client end to end and how devices ride out
server restarts (the report adds reconnects). It costs about 4 times the
memory of a lean device (about 55 KiB instead of 14 KiB per idle device,
6 goroutines instead of 1): measure connection capacity in lean mode.
With --move a --client device's link.Client is closed and a new one
started on the next server with the same outbox (memory or file), which
resends what is unanswered.

wss:// servers with a self-signed or lab certificate: --ca-file names the
PEM CA(s) to trust. --report-reconnects FILE (with --client) writes one
JSON line each time a device loses its link ("down"), fails an attempt to
get it back ("failed", with the refusal class: 503-maxconns, 503-guard,
http, tls, refused, reset, timeout, other) and has it back ("up"), with
at_unix_ns: the reconnect storm after a server restart, measured by
testrig/bench/storm.sh. The report counts the failures by class.`

// load is `termrig load`.
func (a *app) load(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("load", loadSynopsis)
	var opt load.Options
	var servers listFlag
	fs.Var(&servers, "server", "channel WebSocket `URL` (required); repeat it or separate URLs with commas for several servers: device i uses server i mod n")
	fs.StringVar(&opt.Channel, "channel", load.DefaultChannel, "channel `id` when --server has no path")
	opt.Devices, opt.Rate, opt.Duration, opt.Drain = 10, 10, 10*time.Second, load.DefaultDrain
	opt.ConnectRate, opt.ConnectTimeout = load.DefaultConnectRate, load.DefaultConnectTimeout
	fs.Var(intFlag{&opt.Devices}, "devices", "number of simulated devices `N`")
	fs.Var(floatFlag{&opt.Rate}, "rate", "`R` messages per second over all devices (0: idle devices)")
	fs.Var(durationFlag{&opt.Duration}, "duration", "send messages for `D`")
	fs.Var(durationFlag{&opt.Drain}, "drain", "wait up to `D` for outstanding replies after --duration (0: no wait)")
	fs.Var(intFlag{&opt.ConnectRate}, "connect-rate", "dial `C` devices per second, with at most C handshakes in flight")
	fs.Var(durationFlag{&opt.ConnectTimeout}, "connect-timeout", "limit `D` for one device's dial and connect handshake")
	fs.StringVar(&opt.PeerPrefix, "peer-prefix", load.DefaultPeerPrefix, "peer ids are `prefix`-0, prefix-1, ...")
	fs.StringVar(&opt.Token, "token", "", "device `token` (Authorization: Bearer and connect.token)")
	fs.StringVar(&opt.Text, "text", load.DefaultText, "`text` of every message")
	fs.BoolVar(&opt.Hold, "hold", false, "connect idle devices, print \"connected N devices\", keep them until Ctrl-C")
	fs.BoolVar(&opt.Stream, "stream", false, "devices list the stream capability: report the time to the first delta and the deltas per run, and check them")
	fs.BoolVar(&opt.Client, "client", false, "make every device a real link.Client (end to end, reconnects; higher cost per device)")
	fs.Var(durationFlag{&opt.Move}, "move", "every `D` each device hops to the next --server, staggered, resending its unanswered messages (needs two or more servers; 0: off)")
	fs.StringVar(&opt.Outbox, "outbox", load.OutboxMemory, "with --client: the clients' outbox, `kind` memory or file (fsync, temp state dir per device)")
	fs.Var(intFlag{&opt.ServerPID}, "server-pid", "report the CPU time process `PID` (the server, on this machine) spent sending and draining, per reply")
	fs.StringVar(&opt.CAFile, "ca-file", "", "trust the CA certificates of PEM `file` for wss:// (instead of the system roots)")
	reconnects := fs.String("report-reconnects", "", "with --client: write each device's link losses, failed attempts to get it back and reconnects to `file` (JSON lines)")
	latencies := fs.String("latency-log", "", "write one line per message to `file` at the end: send time (Unix ns), ack and reply delay (µs, -1: none), message id")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("v", false, "log per-device errors to stderr")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	switch {
	case len(servers) == 0 || len(servers) == 1 && servers[0] == "":
		return usagef("--server is required (e.g. --server ws://127.0.0.1:8080)")
	case opt.Move < 0:
		return usagef("--move must not be negative, got %v", opt.Move)
	case opt.Devices < 1:
		return usagef("--devices must be at least 1, got %d", opt.Devices)
	case opt.Rate < 0 || opt.Rate != opt.Rate:
		return usagef("--rate must be 0 or more messages per second, got %v", opt.Rate)
	case opt.Hold && set["rate"] && opt.Rate != 0:
		return usagef("--hold keeps idle devices: use it with --rate 0 (or without --rate)")
	case !opt.Hold && opt.Duration <= 0:
		return usagef("--duration must be positive, got %v", opt.Duration)
	case opt.Drain < 0:
		return usagef("--drain must not be negative, got %v", opt.Drain)
	case opt.ConnectRate < 1:
		return usagef("--connect-rate must be at least 1 per second, got %d", opt.ConnectRate)
	case opt.ConnectTimeout <= 0:
		return usagef("--connect-timeout must be positive, got %v", opt.ConnectTimeout)
	case set["outbox"] && !opt.Client:
		return usagef("--outbox is the outbox of --client devices: add --client")
	case *reconnects != "" && !opt.Client:
		return usagef("--report-reconnects follows link.Client's reconnects: add --client")
	case opt.Outbox != load.OutboxMemory && opt.Outbox != load.OutboxFile:
		return usagef("--outbox must be %s or %s, got %q", load.OutboxMemory, load.OutboxFile, opt.Outbox)
	}
	if !opt.Client {
		opt.Outbox = ""
	}
	urls, err := load.ChannelURLs(servers, opt.Channel)
	if err != nil {
		return usagef("--server: %v", err)
	}
	if opt.Move > 0 && len(urls) < 2 {
		return usagef("--move hops devices between servers: give at least two --server URLs, got %d", len(urls))
	}
	if len(urls) == 1 {
		opt.URL = servers[0] // the single-server form, as typed
	} else {
		opt.URLs = servers
	}
	if opt.Hold {
		opt.Rate = 0
	}
	if opt.Drain == 0 {
		opt.Drain = -1 // --drain 0: do not wait
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	opt.Logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	opt.Status = a.stdout
	if *asJSON {
		opt.Status = a.stderr // keep stdout pure JSON
	}

	if *reconnects != "" {
		f, err := os.Create(*reconnects)
		if err != nil {
			return usagef("--report-reconnects: %v", err)
		}
		defer f.Close()
		opt.Reconnects = f
	}
	if *latencies != "" {
		f, err := os.Create(*latencies)
		if err != nil {
			return usagef("--latency-log: %v", err)
		}
		defer f.Close()
		opt.Latencies = f // buffered by the writer
	}
	rep, err := load.Run(ctx, opt)
	if err != nil {
		return usageError{err}
	}
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	} else {
		rep.WriteText(a.stdout)
	}
	return rep.Err()
}

// listFlag is a repeatable string flag.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(s string) error {
	*f = append(*f, s)
	return nil
}
