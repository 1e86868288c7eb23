// Package termd is the terminal device daemon put together: from a Config
// (what cmd/termd's flags say) it opens the board, finds the server
// (--server auto: on the LAN), gets a token by pairing code when asked,
// keeps the peer id in the state dir (device/state), connects a
// link.Client and runs the device.Daemon on the board until ctx ends or
// the user quits, telling systemd (Type=notify) READY, WATCHDOG and
// STOPPING, and (Config.Healthy) the update supervisor that its first
// heartbeat was answered (package device/update).
//
// A state dir that cannot be written (disk full, read-only, a file in the
// way) does not stop it: the display shows the problem, messages are kept
// in memory, and the peer id is kept once the state dir works again.
package termd

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"termlink/boards"
	"termlink/device"
	"termlink/device/activity"
	"termlink/device/health"
	"termlink/device/logring"
	"termlink/device/sdnotify"
	"termlink/device/state"
	"termlink/device/update"
	"termlink/link"
	"termlink/release"
)

// ServerAuto is the Server value that finds the server on the LAN.
const ServerAuto = "auto"

// Config is what termd runs with. The error messages name the flags of
// cmd/termd (--server, --peer-id...), which set the fields of the same
// names.
type Config struct {
	// Server is the channel URL (link.ChannelURL completes it), several
	// comma-separated (the edges of a cluster: the first is dialled
	// first, the others when a dial fails), or ServerAuto.
	Server string
	// ServerName and ServerFallback are for ServerAuto: the advertised
	// name to use ("" the first that answers) and the channel URL when
	// none answers ("" the last one found).
	ServerName, ServerFallback string
	Channel                    string // the channel id when Server has no path
	Board, BoardFile           string // for boards.Select
	PeerID                     string // "" generated once, kept in StateDir
	StateDir                   string // the peer id, the token, the outbox
	TokenFile                  string // "" the token kept in StateDir (if any)
	Enroll                     bool   // no token: get one by pairing code
	CAFile, CertFile, KeyFile  string
	DeviceName                 string // "" the host name
	LogFile                    string // "" stderr, or StateDir/termd.log when the display is this terminal
	LogLevel                   slog.Level
	Tags                       map[string]string
	// IdleSeconds, IdleText and BacklightOffAfter override the board's
	// kiosk block when not nil.
	IdleSeconds, BacklightOffAfter *int
	IdleText                       *string
	Version                        string
	// NoStream leaves the capability stream out of connect: answers
	// show whole, not as the agent writes them (termd streams by
	// default; --stream=false).
	NoStream bool
	// Healthy, when set, is called once, after the first heartbeat the
	// server answers: the health gate of an update (package
	// device/update's Worker.Healthy).
	Healthy func()
	// ReleaseKey is the pinned key of signed releases (nil: none); for
	// the update frames (package device/update).
	ReleaseKey ed25519.PublicKey
	// Worker is the update supervisor's end (update.FromEnv; nil: termd
	// does not run under it and does not update itself).
	Worker *update.Worker
	// Boot is what this start found of the last run (health.Start, by
	// cmd/termd); nil: termd does not report its health (health.go).
	Boot *health.Boot
}

// Run runs termd until ctx ends (nil) or the user quits (nil), or
// returns why it cannot start.
func Run(ctx context.Context, cfg Config) error {
	s, err := prepare(cfg)
	if err != nil {
		return err
	}
	defer s.closeLog()
	return s.run(ctx)
}

// setup is what Run found before opening the board.
type setup struct {
	cfg             Config
	edges           []string // the other edges of a cluster
	wsURL, fallback string   // fallback: for ServerAuto
	profile         *boards.Profile
	id, token, name string
	unkept          error // why the peer id is not kept in the state dir
	onTrial         bool  // this binary is a release on trial (update.go)
	log             *slog.Logger
	level           *slog.LevelVar // the log's level (pushed settings set it)
	settings        *pushed        // pushed settings (settings.go)
	closeLog        func()
	ring            *logring.Ring     // the log's end, for diag requests (diag.go)
	hw              *device.Hardware  // the board, once open (diag.go)
	busy            *activity.Tracker // the device's use, once the client exists (busy.go)
}

// prepare checks cfg and finds what termd needs before the board opens:
// the server URLs, the board profile, the peer id, the token, the log.
func prepare(cfg Config) (*setup, error) {
	if (cfg.IdleSeconds != nil && *cfg.IdleSeconds < 0) || (cfg.BacklightOffAfter != nil && *cfg.BacklightOffAfter < 0) {
		return nil, errors.New("--idle-seconds and --backlight-off-after must not be negative")
	}
	s := &setup{cfg: cfg}
	var err error
	if s.edges, s.wsURL, s.fallback, err = serverURLs(cfg); err != nil {
		return nil, err
	}
	if s.profile, err = boards.Select(cfg.Board, cfg.BoardFile); err != nil {
		return nil, err
	}
	// A state dir that does not work is shown on the display, not fatal.
	stateErr := os.MkdirAll(cfg.StateDir, 0o700)
	if s.id, s.unkept, err = peerID(cfg); err != nil {
		return nil, err
	}
	if s.token, err = loadToken(cfg.TokenFile, cfg.StateDir); err != nil { // enroll.go
		return nil, err
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("--cert and --key go together: give both")
	}
	if cfg.KeyFile != "" {
		if err := link.CheckPrivateFile(cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
	}
	if s.name = cfg.DeviceName; s.name == "" {
		s.name, _ = os.Hostname()
	}
	s.ring = logring.New(0)
	s.log, s.level, s.closeLog = openLog(cfg, s.profile, stateErr, s.ring)
	s.loadSettings() // before the first connect (settings.go)
	if s.unkept != nil {
		s.log.Error("peer id not kept in the state dir; derived from the machine id and the state dir meanwhile", "peer_id", s.id, "err", s.unkept)
	}
	return s, nil
}

// run opens the board and runs the daemon on it.
func (s *setup) run(ctx context.Context) error {
	cfg, log := s.cfg, s.log
	hw, err := device.OpenBoard(ctx, s.profile, log)
	if err != nil {
		return err
	}
	defer hw.Close()
	s.hw = hw
	// The board's drivers outlive ctx: the daemon draws its last screen
	// ("offline: stopped") after ctx ended, and an LCDd connection or a
	// serial port must still be there for it. They stop after that.
	bctx, stopBoard := context.WithCancel(context.WithoutCancel(ctx))
	hctx, stopHW := context.WithCancel(ctx)
	hwDone := make(chan error, 1)
	go func() { hwDone <- hw.Run(bctx) }()
	fail := func(err error) error {
		stopHW()
		stopBoard()
		<-hwDone
		return err
	}
	wsURL, id := s.wsURL, s.id
	if cfg.Server == ServerAuto {
		if wsURL, err = resolveAuto(ctx, hw.View, log, cfg.ServerName, cfg.Channel, s.fallback, cfg.StateDir); err != nil {
			return fail(err)
		}
	}
	token, hello := s.token, "" // hello: the first screen's greeting
	if token == "" && cfg.Enroll {
		var approved string
		token, approved, err = enrollDevice(ctx, wsURL, cfg.CAFile, cfg.StateDir, id, s.name, hw.View, log) // enroll.go
		if err == nil && approved != id {
			log.Info("the operator approved another peer id; using it", "peer_id", approved, "was", id)
			if id = approved; cfg.PeerID == "" {
				err = state.KeepPeerID(cfg.StateDir, id)
			}
		}
		if err != nil {
			return fail(err)
		}
		hello = "Enrolled as " + id
	}
	fh := &fleetHandlers{} // fleet.go; the handlers are set once the client and the daemon exist
	client, err := link.NewClient(link.ClientConfig{URL: wsURL, Fallbacks: s.edges, PeerID: id, DeviceName: s.name, Token: token,
		CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, StateDir: cfg.StateDir, Logger: log,
		Capabilities: capabilities(hw.CanAnswer, append(s.fleetCaps(), s.healthCaps()...)), Stream: !cfg.NoStream,
		Board: s.profile.Name, Version: cfg.Version, Tags: s.settings.tags(), SettingsVersion: s.settings.version(), Platform: release.CurrentPlatform(),
		BinarySHA256: binarySHA256(cfg.StateDir, log)})
	if err != nil {
		return fail(err)
	}
	notifier := sdnotify.FromEnv()
	inputs, busyDone := s.startBusy(hctx, client, hw.Inputs) // busy.go
	d := &device.Daemon{Client: client, View: hw.View, Inputs: inputs, Logger: log, Gate: hw.Gate, Hello: hello,
		Kiosk: s.settings.kiosk(), Watchdog: sdnotify.WatchdogInterval(),
		QuestionOpen: s.busy.SetQuestionOpen, // a question on the glass: in use (busy.go)
		Notify: func(state string) {
			if err := notifier.Notify(state); err != nil {
				log.Warn("systemd notify", "err", err)
			}
		}}
	log.Info("termd starting", "version", cfg.Version, "server", wsURL, "board", s.profile.Name, "peer_id", id, "state_dir", cfg.StateDir, "tags", tagsText(s.settings.tags()), "settings_version", s.settings.version())

	keepDone := make(chan struct{})
	go func() {
		defer close(keepDone)
		if s.unkept != nil {
			state.KeepPeerIDLater(hctx, cfg.StateDir, id, log)
		}
	}()
	s.setFleetHandlers(fh, client, d, wsURL, token)
	fleetDone := make(chan struct{})
	go func() {
		defer close(fleetDone)
		runFleet(hctx, client, fh)
	}()
	reportDone := make(chan struct{})
	go func() {
		defer close(reportDone)
		if cfg.Boot != nil {
			runHealth(hctx, client, s.healthSources(), *cfg.Boot, log) // health.go
		}
	}()
	healthDone := make(chan struct{})
	go func() {
		defer close(healthDone)
		if cfg.Healthy != nil {
			afterFirstHeartbeat(hctx, client, cfg.Healthy)
			if s.onTrial && hctx.Err() == nil {
				afterHealthy(hctx, client, cfg.Worker.StateDir, cfg.Version, log) // update.go
			}
		}
	}()
	err = d.Run(ctx)
	stopHW()
	stopBoard()
	<-keepDone
	<-healthDone
	<-reportDone
	<-fleetDone
	<-busyDone
	if herr := <-hwDone; herr != nil {
		log.Warn("board", "err", herr)
	}
	log.Info("termd stopped")
	if errors.Is(err, device.ErrQuit) {
		return nil
	}
	return err
}

// afterFirstHeartbeat calls healthy once the server has answered a
// heartbeat (a pong), unless ctx ends first.
func afterFirstHeartbeat(ctx context.Context, client *link.Client, healthy func()) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for client.Stats().Pongs == 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	healthy()
}

// serverURLs completes cfg.Server: the first channel URL, the others (the
// edges of a cluster), and with ServerAuto the fallback's.
func serverURLs(cfg Config) (edges []string, first, fallback string, err error) {
	if strings.TrimSpace(cfg.Server) == "" {
		return nil, "", "", errors.New("--server is required, e.g. --server ws://192.168.1.10:8080/api/channels/terminal-dev/ws")
	}
	if cfg.Server == ServerAuto {
		if cfg.ServerFallback != "" {
			if fallback, err = link.ChannelURL(cfg.ServerFallback, cfg.Channel); err != nil {
				return nil, "", "", fmt.Errorf("--server-fallback: %w", err)
			}
		}
		return nil, "", fallback, nil
	}
	head, rest, _ := strings.Cut(cfg.Server, ",")
	for _, e := range strings.Split(rest, ",") {
		if e = strings.TrimSpace(e); e != "" {
			u, err := link.ChannelURL(e, cfg.Channel)
			if err != nil {
				return nil, "", "", fmt.Errorf("--server %q: %w", e, err)
			}
			edges = append(edges, u)
		}
	}
	if first, err = link.ChannelURL(head, cfg.Channel); err != nil {
		return nil, "", "", fmt.Errorf("--server: %w", err)
	}
	return edges, first, "", nil
}

// peerID is cfg.PeerID when given, else the state dir's (state.PeerID).
func peerID(cfg Config) (id string, unkept, err error) {
	if cfg.PeerID != "" {
		if err := state.CheckPeerID(cfg.PeerID); err != nil {
			return "", nil, fmt.Errorf("--peer-id %q: %w", cfg.PeerID, err)
		}
		return cfg.PeerID, nil, nil
	}
	return state.PeerID(cfg.StateDir)
}

// logFile is where the log goes: cfg.LogFile, else StateDir/termd.log
// when the display is this terminal, else "" (stderr); onConsole: stderr
// is the display, so nothing may be written there.
func logFile(cfg Config, profile *boards.Profile) (file string, onConsole bool) {
	onConsole = profile.Display.Kind == boards.Console && profile.Serial == nil || profile.Display.Kind == boards.HD44780Emu
	file = cfg.LogFile
	if file == "" && onConsole {
		file = filepath.Join(cfg.StateDir, "termd.log")
	}
	return file, onConsole
}

// openLog opens the log: cfg.LogFile, else stderr, except when the display
// is this terminal (then StateDir/termd.log). A log file that cannot be
// opened does not stop termd (the display is worth more than the log);
// it and stateErr are logged. Every line also goes to ring (the end of
// the log a diag request asks for), which starts with the end of the log
// file: the lines the update supervisor and the processes before this one
// wrote there (after a rollback, why the release failed). Its level
// starts at cfg.LogLevel.
func openLog(cfg Config, profile *boards.Profile, stateErr error, ring io.Writer) (*slog.Logger, *slog.LevelVar, func()) {
	var out io.Writer = os.Stderr
	closeLog := func() {}
	file, onConsole := logFile(cfg, profile)
	var logErr error
	if file != "" {
		f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_RDWR, 0o600)
		if err != nil {
			logErr = fmt.Errorf("--log-file: %w", err)
			if onConsole {
				out = io.Discard // stderr is the display
			}
		} else {
			seedRing(ring, f)
			out, closeLog = f, func() { f.Close() }
		}
	}
	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel)
	log := slog.New(slog.NewTextHandler(io.MultiWriter(ring, out), &slog.HandlerOptions{Level: level}))
	for _, err := range []error{stateErr, logErr} {
		if err != nil {
			log.Error("state dir", "dir", cfg.StateDir, "err", err)
		}
	}
	return log, level, closeLog
}

// seedRing writes the end of the log file f into ring (as much as the
// ring holds, from a line's start). A file that cannot be read (a FIFO,
// /dev/stderr) seeds nothing.
func seedRing(ring io.Writer, f *os.File) {
	size := int64(logring.DefaultSize)
	if r, ok := ring.(interface{ Size() int }); ok {
		size = int64(r.Size())
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		return
	}
	from := max(st.Size()-size, 0)
	buf := make([]byte, st.Size()-from)
	n, err := f.ReadAt(buf, from)
	if err != nil && !errors.Is(err, io.EOF) {
		return
	}
	buf = buf[:n]
	if from > 0 { // a line cut at its start: from the next one
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return
		}
		buf = buf[i+1:]
	}
	_, _ = ring.Write(buf)
}

// SupervisorLog is the update supervisor's log (termd --supervise): the
// same file as the worker's (cfg.LogFile, else StateDir/termd.log when
// the board's display is this terminal, else stderr), so that its lines
// never land on the screen and the worker's log ring has them (openLog
// seeds it with the file's end). Its lines carry supervisor=true. Only a
// --log-file that cannot be opened is an error.
func SupervisorLog(cfg Config) (*slog.Logger, func(), error) {
	var out io.Writer = os.Stderr
	closeLog := func() {}
	file, onConsole := cfg.LogFile, false
	if profile, err := boards.Select(cfg.Board, cfg.BoardFile); err == nil { // a bad board: the worker says so
		file, onConsole = logFile(cfg, profile)
	}
	if file != "" {
		if cfg.LogFile == "" {
			_ = os.MkdirAll(cfg.StateDir, 0o700)
		}
		f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		switch {
		case err == nil:
			out, closeLog = f, func() { f.Close() }
		case cfg.LogFile != "":
			return nil, nil, fmt.Errorf("--log-file: %w", err)
		case onConsole:
			out = io.Discard // stderr is the display; the worker reports the state dir
		}
	}
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: cfg.LogLevel})).With("supervisor", true), closeLog, nil
}

// kiosk is the board's kiosk block with cfg's overrides.
func kiosk(cfg Config, profile *boards.Profile) device.Kiosk {
	var idle, backlight int
	var text string
	if k := profile.Kiosk; k != nil {
		idle, text, backlight = k.IdleSeconds, k.IdleText, k.BacklightOffAfter
	}
	if cfg.IdleSeconds != nil {
		idle = *cfg.IdleSeconds
	}
	if cfg.IdleText != nil {
		text = *cfg.IdleText
	}
	if cfg.BacklightOffAfter != nil {
		backlight = *cfg.BacklightOffAfter
	}
	return device.Kiosk{IdleAfter: time.Duration(idle) * time.Second, IdleText: text,
		BacklightOffAfter: time.Duration(backlight) * time.Second}
}

// tagsText is tags as key=value,... in key order, for the log.
func tagsText(tags map[string]string) string {
	keys := slices.Sorted(maps.Keys(tags))
	for i, k := range keys {
		keys[i] = k + "=" + tags[k]
	}
	return strings.Join(keys, ",")
}

// capabilities are what termd lists in connect: the defaults, notices
// and the screen mirror, "choice" when the board has an input to answer
// a question with (a display without one keeps the server's fallback
// policy for its agents' questions), and the fleet operations.
func capabilities(canAnswer bool, fleet []string) []string {
	caps := append(link.DefaultCapabilities(), link.CapNotice, link.CapScreen)
	if canAnswer {
		caps = append(caps, link.CapChoice)
	}
	return append(caps, fleet...)
}
