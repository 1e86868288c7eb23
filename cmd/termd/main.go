// Command termd is the terminal device daemon: it drives the board's
// display and keypad (or serial console) and holds one persistent session
// to a termserver channel.
//
//	termd --server URL [--board NAME | --board-file FILE] [--peer-id ID]
//	      [--state-dir DIR] [--token-file FILE | --enroll] [--ca-file FILE] [--cert FILE --key FILE] [--device-name NAME]
//	      [--tag KEY=VALUE]... [--idle-seconds N] [--idle-text TEXT] [--backlight-off-after N]
//	      [--supervise [--update-gate DURATION]] [--release-key FILE]
//
// Without hardware, --board sim draws a VT100 chat console in this
// terminal, and --board sim-lcd the emulated 20x4 HD44780 LCD (the glass
// of termrig demo) with the keyboard as its keypad; both log to
// state-dir/termd.log, never over the screen.
//
// With --supervise termd runs as the supervisor of termd itself (its
// child, the worker, with the same flags): a signed release the worker
// downloads and stages runs on trial and replaces the binary only after
// it has connected and completed its first heartbeat within
// --update-gate; otherwise the supervisor runs the installed binary
// again and records why (package device/update). --release-key pins the
// release key (default: release.pub in the state dir, if there).
//
// Without a token (no --token-file, none kept in the state dir) and with
// --enroll, termd shows a pairing code on its display for an operator to
// approve and keeps the token it gets in state-dir/token (0600; package device/termd).
//
// As a kiosk termd shows the notices the server pushes (they take over
// the screen for their display_seconds; an alert blinks the backlight; a
// key dismisses them), and with --idle-seconds an unattended screen shows
// --idle-text (else the latest notice, else a clock), and while offline
// also why on its bottom row; --backlight-off-after turns the backlight
// off. The key that wakes the screen types nothing.
//
// Offline, the status line says why in short ("unknown CA", "token
// refused"); the send key with nothing typed (keypad '#', console Enter on
// a blank line) shows the full reason, which is logged at INFO once per
// change with the next try. After --enroll, "Enrolled as ID" stays over
// the screen for a few seconds or until a key.
//
// The peer id is random, generated once and kept in the state dir, beside the
// outbox of messages not yet answered. A state dir that cannot be written
// (disk full, read-only, a file in the way) does not stop termd: the
// display shows the problem ("disk full" and a '!' mark), messages are
// kept in memory, and they are stored once the state dir works again (the
// peer id is then kept too; meanwhile it is derived from /etc/machine-id
// and the state dir's path, so it stays the same across restarts and two
// termd with different state dirs still differ). Under systemd (Type=notify) it
// sends READY, WATCHDOG and STOPPING; see termd.service.
//
// This command only parses the flags into a device/termd Config and calls
// termd.Run (or update.Supervise); the state dir and the peer id are
// package device/state.
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"termlink/boards"
	"termlink/device/health"
	"termlink/device/state"
	app "termlink/device/termd"
	"termlink/device/update"
	"termlink/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		var exit *update.ExitError
		if errors.As(err, &exit) { // the worker said why
			stop()
			os.Exit(exit.Code)
		}
		fmt.Fprintln(os.Stderr, "termd:", err)
		os.Exit(1)
	}
}

// updateFlags are the flags of self-update (package device/update).
type updateFlags struct {
	supervise  bool
	gate       time.Duration
	releaseKey string
	keyGiven   bool
}

// run parses the flags and runs termd (package device/termd), or with
// --supervise its supervisor (package device/update), which runs termd
// again as its worker.
func run(ctx context.Context, args []string) error {
	cfg, uf, done, err := parseFlags(args)
	if done || err != nil {
		return err
	}
	worker := update.FromEnv()
	if uf.supervise && worker == nil {
		// The worker's log file (never the screen of the sim board), and
		// so the worker's log ring too.
		log, closeLog, err := app.SupervisorLog(cfg)
		if err != nil {
			return err
		}
		defer closeLog()
		return update.Supervise(ctx, update.Config{Args: args, StateDir: cfg.StateDir, Gate: uf.gate, Logger: log})
	}
	if worker != nil {
		cfg.Healthy, cfg.Worker = worker.Healthy, worker
	}
	if cfg.ReleaseKey, err = loadReleaseKey(uf, cfg.StateDir); err != nil {
		return err
	}
	// Why the last run stopped (issue 43): read, and the marks readied
	// for this one — a panic's report goes to the crash file as the
	// process dies; whatever Run returns, it stopped by itself.
	boot, _ := health.Start(cfg.StateDir, time.Now(), health.Options{CaptureCrash: true, BootID: health.ReadBootID("/")}) // its error: termd logs boot.Err
	cfg.Boot = &boot
	err = app.Run(ctx, cfg)
	if merr := health.CleanStop(cfg.StateDir); merr != nil && err == nil {
		fmt.Fprintln(os.Stderr, "termd:", merr)
	}
	return err
}

// loadReleaseKey reads the pinned release key: --release-key's file
// (which must be there), else release.pub in the state dir (none: nil,
// this termd does not update itself).
func loadReleaseKey(uf updateFlags, stateDir string) (ed25519.PublicKey, error) {
	path := uf.releaseKey
	if !uf.keyGiven {
		path = filepath.Join(stateDir, release.PublicKeyFile)
		if _, err := os.Stat(path); err != nil {
			return nil, nil // none there (or a state dir that does not work: termd runs anyway)
		}
	}
	key, err := release.LoadPublicKey(path)
	if err != nil {
		return nil, fmt.Errorf("--release-key: %w", err)
	}
	return key, nil
}

// parseFlags turns the command line into a app.Config; done is true
// when there is nothing to run (--help, --version).
func parseFlags(args []string) (cfg app.Config, uf updateFlags, done bool, err error) {
	fs := flag.NewFlagSet("termd", flag.ContinueOnError)
	fs.Usage = func() { printUsage(fs) }
	fs.StringVar(&cfg.Server, "server", "", "channel `URL`: ws://host:8080/api/channels/terminal-dev/ws (or http://host:8080), several comma-separated (the edges of a cluster: the next is dialled when one fails), or \"auto\": find it on the LAN (mDNS)")
	fs.StringVar(&cfg.ServerName, "server-name", "", "with --server auto: use the server advertised as `name` (default: the first that answers)")
	fs.StringVar(&cfg.ServerFallback, "server-fallback", "", "with --server auto: channel `URL` used when no server answers (default: the last one found)")
	fs.StringVar(&cfg.Channel, "channel", "terminal-dev", "channel `id` when --server has no path")
	board := fs.String("board", "sim", "board profile `name`: "+strings.Join(boards.Names(), ", "))
	fs.StringVar(&cfg.BoardFile, "board-file", "", "custom board profile JSON `file` (instead of --board)")
	fs.StringVar(&cfg.PeerID, "peer-id", "", "this device's stable `id` (default: generated once, kept in the state dir)")
	fs.StringVar(&cfg.StateDir, "state-dir", state.DefaultDir(), "`dir` for the peer id and the outbox")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "`file` holding the channel token (sent as Authorization: Bearer); mode 0600 (default: state-dir/token, kept by --enroll)")
	fs.BoolVar(&cfg.Enroll, "enroll", false, "with no token: get one by a pairing code shown on the display, which an operator approves (the channel needs \"enrollment\": true)")
	fs.StringVar(&cfg.CAFile, "ca-file", "", "PEM `file` of CAs to trust for wss://")
	fs.StringVar(&cfg.CertFile, "cert", "", "PEM `file` of this device's client certificate, for a channel with mutual TLS (with --key)")
	fs.StringVar(&cfg.KeyFile, "key", "", "PEM `file` of the client certificate's private key (mode 0600: refused when group or others may read it)")
	fs.StringVar(&cfg.DeviceName, "device-name", "", "name shown by the server (default: the host name)")
	fs.StringVar(&cfg.LogFile, "log-file", "", "log to `file` (default: stderr, or state-dir/termd.log when the display is this terminal)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	tags := tagFlag{}
	fs.Var(tags, "tag", "operator tag `key=value` sent to the server's device registry (repeatable), e.g. --tag site=lobby")
	idleSeconds := fs.Int("idle-seconds", 0, "after `N` seconds without a key show --idle-text, else the latest notice, else a clock, and while offline why (0: never; default: the board's kiosk.idleSeconds)")
	idleText := fs.String("idle-text", "", "`text` of the idle screen (default: the board's kiosk.idleText, else a clock)")
	backlightOff := fs.Int("backlight-off-after", 0, "turn the LCD backlight off after `N` seconds without a key (0: never; default: the board's kiosk.backlightOffAfter)")
	stream := fs.Bool("stream", true, "show an answer as the agent writes it, when the server streams (capability stream); --stream=false: whole answers only")
	fs.BoolVar(&uf.supervise, "supervise", false, "run as the supervisor of termd, which updates itself with signed releases: a new release runs on trial and replaces this binary only once it has connected and completed its first heartbeat, else the previous one runs again (see termd.service)")
	fs.DurationVar(&uf.gate, "update-gate", update.DefaultGate, "with --supervise: how long a new release has to connect and complete its first heartbeat (the health gate)")
	fs.StringVar(&uf.releaseKey, "release-key", "", "PEM `file` of the public release key that signs termd releases (default: release.pub in the state dir; without one termd does not update itself)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return cfg, uf, true, nil // the usage is printed
	} else if err != nil {
		return cfg, uf, false, err
	}
	if fs.NArg() > 0 {
		return cfg, uf, false, fmt.Errorf("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	if *showVersion {
		fmt.Fprint(os.Stdout, versionText()) // stdout, as termserver and termrig print theirs
		return cfg, uf, true, nil
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(*level)); err != nil {
		return cfg, uf, false, fmt.Errorf("--log-level %q: want debug, info, warn or error", *level)
	}
	cfg.Board, cfg.Tags, cfg.Version, cfg.NoStream = *board, tags, termdVersion(), !*stream
	// Flags given win over the board's defaults: --board's over
	// --board-file (both given is an error), the kiosk flags over the
	// board's kiosk block.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	uf.keyGiven = given["release-key"]
	if uf.gate <= 0 {
		return cfg, uf, false, fmt.Errorf("--update-gate %s: must be positive", uf.gate)
	}
	if cfg.BoardFile != "" && !given["board"] {
		cfg.Board = ""
	}
	if given["idle-seconds"] {
		cfg.IdleSeconds = idleSeconds
	}
	if given["idle-text"] {
		cfg.IdleText = idleText
	}
	if given["backlight-off-after"] {
		cfg.BacklightOffAfter = backlightOff
	}
	return cfg, uf, false, nil
}
