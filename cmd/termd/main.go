// Command termd is the terminal device daemon: it drives the board's
// display and keypad (or serial console) and holds one persistent session
// to a termserver channel.
//
//	termd --server URL [--board NAME | --board-file FILE] [--peer-id ID]
//	      [--state-dir DIR] [--token-file FILE | --enroll] [--ca-file FILE] [--cert FILE --key FILE] [--device-name NAME]
//	      [--tag KEY=VALUE]... [--idle-seconds N] [--idle-text TEXT] [--backlight-off-after N]
//
// Without a token (no --token-file, none kept in the state dir) and with
// --enroll, termd shows a pairing code on its display for an operator to
// approve and keeps the token it gets in state-dir/token (0600; enroll.go).
//
// As a kiosk termd shows the notices the server pushes (they take over
// the screen for their display_seconds; an alert blinks the backlight; a
// key dismisses them), and with --idle-seconds an unattended screen shows
// the latest notice, --idle-text or a clock; --backlight-off-after turns
// the backlight off. The key that wakes the screen types nothing.
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
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"termlink/boards"
	"termlink/device"
	"termlink/device/sdnotify"
	"termlink/link"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "termd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("termd", flag.ContinueOnError)
	fs.Usage = func() { printUsage(fs) }
	server := fs.String("server", "", "channel `URL`: ws://host:8080/api/channels/terminal-dev/ws (or http://host:8080), several comma-separated (the edges of a cluster: the next is dialled when one fails), or \"auto\": find it on the LAN (mDNS)")
	serverName := fs.String("server-name", "", "with --server auto: use the server advertised as `name` (default: the first that answers)")
	serverFallback := fs.String("server-fallback", "", "with --server auto: channel `URL` used when no server answers (default: the last one found)")
	channel := fs.String("channel", "terminal-dev", "channel `id` when --server has no path")
	board := fs.String("board", "sim", "board profile `name`: "+strings.Join(boards.Names(), ", "))
	boardFile := fs.String("board-file", "", "custom board profile JSON `file` (instead of --board)")
	peerID := fs.String("peer-id", "", "this device's stable `id` (default: generated once, kept in the state dir)")
	stateDir := fs.String("state-dir", defaultStateDir(), "`dir` for the peer id and the outbox")
	tokenFile := fs.String("token-file", "", "`file` holding the channel token (sent as Authorization: Bearer); mode 0600 (default: state-dir/token, kept by --enroll)")
	enrollFlag := fs.Bool("enroll", false, "with no token: get one by a pairing code shown on the display, which an operator approves (the channel needs \"enrollment\": true)")
	caFile := fs.String("ca-file", "", "PEM `file` of CAs to trust for wss://")
	certFile := fs.String("cert", "", "PEM `file` of this device's client certificate, for a channel with mutual TLS (with --key)")
	keyFile := fs.String("key", "", "PEM `file` of the client certificate's private key (mode 0600: refused when group or others may read it)")
	deviceName := fs.String("device-name", "", "name shown by the server (default: the host name)")
	logFile := fs.String("log-file", "", "log to `file` (default: stderr, or state-dir/termd.log when the display is this terminal)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	tags := tagFlag{}
	fs.Var(tags, "tag", "operator tag `key=value` sent to the server's device registry (repeatable), e.g. --tag site=lobby")
	idleSeconds := fs.Int("idle-seconds", 0, "after `N` seconds without a key show the latest notice, --idle-text or a clock (0: never; default: the board's kiosk.idleSeconds)")
	idleText := fs.String("idle-text", "", "`text` of the idle screen (default: the board's kiosk.idleText, else a clock)")
	backlightOff := fs.Int("backlight-off-after", 0, "turn the LCD backlight off after `N` seconds without a key (0: never; default: the board's kiosk.backlightOffAfter)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	if *showVersion {
		fmt.Fprint(fs.Output(), versionText())
		return nil
	}
	if *idleSeconds < 0 || *backlightOff < 0 {
		return errors.New("--idle-seconds and --backlight-off-after must not be negative")
	}
	auto, fallback := *server == serverAuto, *serverFallback
	// Several URLs (the edges of a termserver cluster): the first is
	// dialled first, the others when a dial fails.
	first, rest, _ := strings.Cut(*server, ",")
	var edges []string
	for _, e := range strings.Split(rest, ",") {
		if e = strings.TrimSpace(e); e != "" && !auto {
			u, err := channelURL(e, *channel)
			if err != nil {
				return fmt.Errorf("--server %q: %w", e, err)
			}
			edges = append(edges, u)
		}
	}
	wsURL, err := channelURL(strings.TrimSpace(first), *channel)
	if auto && fallback != "" {
		if fallback, err = channelURL(fallback, *channel); err != nil {
			err = fmt.Errorf("--server-fallback: %w", err)
		}
	} else if auto {
		err = nil
	}
	if err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", *level)
	}
	boardName := *board // --board's default gives way to --board-file; both given is an error
	if *boardFile != "" {
		boardName = ""
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "board" {
				boardName = *board
			}
		})
	}
	profile, err := boards.Select(boardName, *boardFile)
	if err != nil {
		return err
	}
	// A state dir that does not work is shown on the display, not fatal.
	stateErr := os.MkdirAll(*stateDir, 0o700)
	id, unkept, err := loadPeerID(*stateDir, *peerID)
	if err != nil {
		return err
	}
	token, err := loadToken(*tokenFile, *stateDir) // enroll.go
	if err != nil {
		return err
	}
	if (*certFile == "") != (*keyFile == "") {
		return errors.New("--cert and --key go together: give both")
	}
	if *keyFile != "" {
		if err := link.CheckPrivateFile(*keyFile); err != nil {
			return fmt.Errorf("--key: %w", err)
		}
	}
	name := *deviceName
	if name == "" {
		name, _ = os.Hostname()
	}

	// The display may be this terminal: then the log goes to a file.
	var logOut io.Writer = os.Stderr
	if *logFile == "" && profile.Display.Kind == boards.Console && profile.Serial == nil {
		*logFile = filepath.Join(*stateDir, "termd.log")
	}
	var logErr error
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			// Keep going: the display is worth more than the log.
			logErr = fmt.Errorf("--log-file: %w", err)
			if profile.Display.Kind == boards.Console && profile.Serial == nil {
				logOut = io.Discard // stderr is the display
			}
		} else {
			defer f.Close()
			logOut = f
		}
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: lv}))
	for _, err := range []error{stateErr, logErr} {
		if err != nil {
			log.Error("state dir", "dir", *stateDir, "err", err)
		}
	}
	if unkept != nil {
		log.Error("peer id not kept in the state dir; derived from the machine id and the state dir meanwhile", "peer_id", id, "err", unkept)
	}

	hw, err := device.OpenBoard(ctx, profile, log)
	if err != nil {
		return err
	}
	defer hw.Close()
	hctx, stopHW := context.WithCancel(ctx)
	hwDone := make(chan error, 1)
	go func() { hwDone <- hw.Run(hctx) }()
	if auto {
		if wsURL, err = resolveAuto(ctx, hw.View, log, *serverName, *channel, fallback, *stateDir); err != nil {
			stopHW()
			<-hwDone
			return err
		}
	}
	hello := "" // the first screen's greeting
	if token == "" && *enrollFlag {
		var approved string
		token, approved, err = enrollDevice(ctx, wsURL, *caFile, *stateDir, id, name, hw.View, log) // enroll.go
		if err == nil && approved != id {
			log.Info("the operator approved another peer id; using it", "peer_id", approved, "was", id)
			if id = approved; *peerID == "" {
				err = writePeerID(filepath.Join(*stateDir, "peer_id"), id)
			}
		}
		if err != nil {
			stopHW()
			<-hwDone
			return err
		}
		hello = "Enrolled as " + id
	}
	client, err := link.NewClient(link.ClientConfig{URL: wsURL, Fallbacks: edges, PeerID: id, DeviceName: name, Token: token,
		CAFile: *caFile, CertFile: *certFile, KeyFile: *keyFile, StateDir: *stateDir, Logger: log,
		Capabilities: append(link.DefaultCapabilities(), link.CapNotice, link.CapScreen),
		Board:        profile.Name, Version: termdVersion(), Tags: tags})
	if err != nil {
		stopHW()
		<-hwDone
		return err
	}
	notifier := sdnotify.FromEnv()
	// The board's kiosk block gives defaults; flags given win.
	if k := profile.Kiosk; k != nil {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["idle-seconds"] {
			*idleSeconds = k.IdleSeconds
		}
		if !set["idle-text"] {
			*idleText = k.IdleText
		}
		if !set["backlight-off-after"] {
			*backlightOff = k.BacklightOffAfter
		}
	}
	d := &device.Daemon{Client: client, View: hw.View, Inputs: hw.Inputs, Logger: log, Gate: hw.Gate, Hello: hello,
		Kiosk: device.Kiosk{IdleAfter: time.Duration(*idleSeconds) * time.Second, IdleText: *idleText,
			BacklightOffAfter: time.Duration(*backlightOff) * time.Second},
		Watchdog: sdnotify.WatchdogInterval(),
		Notify: func(state string) {
			if err := notifier.Notify(state); err != nil {
				log.Warn("systemd notify", "err", err)
			}
		}}
	log.Info("termd starting", "version", termdVersion(), "server", wsURL, "board", profile.Name, "peer_id", id, "state_dir", *stateDir, "tags", tags.String())

	keepDone := make(chan struct{})
	go func() {
		defer close(keepDone)
		if unkept != nil {
			keepPeerIDLater(hctx, *stateDir, id, log)
		}
	}()
	err = d.Run(ctx)
	stopHW()
	<-keepDone
	if herr := <-hwDone; herr != nil {
		log.Warn("board", "err", herr)
	}
	log.Info("termd stopped")
	if errors.Is(err, device.ErrQuit) {
		return nil
	}
	return err
}

func defaultStateDir() string {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" { // systemd StateDirectory=
		return strings.Split(d, ":")[0]
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".local", "state", "termd")
	}
	return "termd-state"
}

var peerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)

// loadPeerID returns the flag's id, or the one kept in dir (whatever made
// it: an earlier termd derived it from /etc/machine-id; it stays), or a
// new random one that is then kept, so two termd with different state
// dirs never share an id. When dir cannot be read or written, the id is
// derived from the machine id and dir's absolute path (stable across
// restarts, different per state dir) and unkept says why it is not in
// dir.
func loadPeerID(dir, flagID string) (id string, unkept, err error) {
	if flagID != "" {
		if !peerRE.MatchString(flagID) {
			return "", nil, fmt.Errorf("--peer-id %q: use 1-128 of A-Z a-z 0-9 . _ @ + - (starting with a letter or digit)", flagID)
		}
		return flagID, nil, nil
	}
	path := filepath.Join(dir, "peer_id")
	b, rerr := os.ReadFile(path)
	if rerr == nil {
		id := strings.TrimSpace(string(b))
		if !peerRE.MatchString(id) {
			return "", nil, fmt.Errorf("%s holds %q, which is not a valid peer id: fix or delete the file", path, id)
		}
		return id, nil, nil
	}
	if !errors.Is(rerr, os.ErrNotExist) {
		id, err := fallbackPeerID(dir)
		if err != nil {
			return "", nil, err
		}
		return id, fmt.Errorf("reading the peer id: %w", rerr), nil
	}
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", nil, fmt.Errorf("generating a peer id: %w", err)
	}
	id = "termd-" + hex.EncodeToString(r[:])
	if werr := writePeerID(path, id); werr != nil {
		// Not kept: an id that is the same at the next start instead.
		if id, err = fallbackPeerID(dir); err != nil {
			return "", nil, err
		}
		return id, werr, nil
	}
	return id, nil, nil
}

// fallbackPeerID is the id of a state dir that cannot keep one: derived
// from /etc/machine-id and the state dir's absolute path, so it stays the
// same across restarts and differs between state dirs; random (for this
// run only) on a machine without a machine id.
func fallbackPeerID(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	b, err := os.ReadFile("/etc/machine-id")
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		var r [6]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", fmt.Errorf("generating a peer id: %w", err)
		}
		return "termd-" + hex.EncodeToString(r[:]), nil
	}
	sum := sha256.Sum256([]byte("termd peer id\n" + strings.TrimSpace(string(b)) + "\n" + abs))
	return "termd-" + hex.EncodeToString(sum[:6]), nil
}

// writePeerID keeps id in path (write, fsync, rename).
func writePeerID(path, id string) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("keeping the peer id: %w", err)
	}
	_, werr := f.WriteString(id + "\n")
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keeping the peer id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keeping the peer id: %w", err)
	}
	return nil
}

// keepPeerIDLater writes the peer id into dir once that works, unless a
// peer id appeared there meanwhile, until ctx ends.
func keepPeerIDLater(ctx context.Context, dir, id string, log *slog.Logger) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	path := filepath.Join(dir, "peer_id")
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if _, err := os.Stat(path); err == nil {
			return // kept by someone else; ours stays in use until restart
		}
		if os.MkdirAll(dir, 0o700) == nil && writePeerID(path, id) == nil {
			log.Info("peer id kept in the state dir", "peer_id", id)
			return
		}
	}
}

// channelURL accepts ws(s)://.../ws as is and fills in the channel path
// for http(s)://host:port or host:port.
func channelURL(raw, channel string) (string, error) {
	if raw == "" {
		return "", errors.New("--server is required, e.g. --server ws://192.168.1.10:8080/api/channels/terminal-dev/ws")
	}
	if !strings.Contains(raw, "://") {
		raw = "ws://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("--server %q is not a URL like ws://host:8080/api/channels/%s/ws", raw, channel)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("--server %q: scheme must be ws, wss, http or https", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/api/channels/" + channel + "/ws"
	}
	return u.String(), nil
}
