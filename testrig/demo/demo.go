// Package demo is `termrig demo`: termserver with its agent and a
// simulated terminal device in this terminal, in one process.
//
// The device is termd's own code: device.Daemon with a link.Client (file
// outbox) talking to the real server over loopback. Its screen is the real
// HD44780 driver (display/hd44780) writing to the HD44780+PCF8574 emulator
// (testrig/lcdemu), and what the emulated glass shows is drawn here as a
// framed 20x4 box. The keyboard types the message (or, with Keypad, acts
// as a 4x4 keypad with multi-tap entry); with Console the device is a
// VT100 chat console instead.
//
// With Kiosk the device is a kiosk: it lists the notice and screen
// capabilities, goes idle (a clock) and dark on a schedule, and the lines
// below the box give the web console's URL and a curl command that sends
// it a notice. The whole screen fits 80x24 and never scrolls; a smaller
// terminal is told the size the demo needs.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"termlink/device"
	"termlink/device/input"
	"termlink/display/console"
	"termlink/display/hd44780"
	"termlink/link"
	"termlink/server"
	"termlink/server/agent/terminal"
	"termlink/server/config"
	"termlink/testrig/lcdemu"
)

// Options configure a demo run.
type Options struct {
	// Agent is a command for a Terminal Protocol v1 rich agent; empty runs
	// the built-in echo agent. It runs with sh -c in AgentDir, so relative
	// paths in it are taken from there.
	Agent string
	// AgentDir is the agent's working directory; empty: the current one
	// (where the user ran the demo).
	AgentDir string
	// Console shows the VT100 console device instead of the LCD.
	Console bool
	// Keypad makes the keyboard a 4x4 keypad (0-9 * # A-D, multi-tap).
	Keypad bool
	// Workspace holds session logs, the device's outbox and demo.log;
	// empty: a temporary directory removed at the end.
	Workspace string
	// Rows and Cols of the LCD (default 4 x 20).
	Rows, Cols int
	// Kiosk runs the LCD device as a kiosk (notices, idle screen,
	// backlight off) and shows the console URL and a notice command.
	Kiosk bool
	// IdleAfter and BacklightOffAfter of the kiosk (defaults with Kiosk:
	// DefaultIdleAfter, DefaultBacklightOffAfter).
	IdleAfter, BacklightOffAfter time.Duration
	// NoStream turns streaming off: the device does not list "stream"
	// and the echo agent answers whole. By default the echo agent writes
	// its answer word by word (DefaultWordGap) and the device draws it as
	// it comes.
	NoStream bool
}

// DefaultWordGap is how fast the demo's echo agent writes its answer:
// one word every DefaultWordGap, like an LLM agent typing.
const DefaultWordGap = 150 * time.Millisecond

// Kiosk defaults of the demo.
const (
	DefaultIdleAfter         = 30 * time.Second
	DefaultBacklightOffAfter = 90 * time.Second
)

// demoPeer is the simulated device's peer id.
const demoPeer = "demo-device"

// TTY is the terminal the demo runs in (console.TTY implements it).
type TTY interface {
	io.ReadWriter
	Size() (cols, rows int, err error)
}

// Run runs the demo on tty until ctx ends or the user presses Ctrl-C.
func Run(ctx context.Context, opt Options, tty TTY) error {
	if opt.Rows == 0 {
		opt.Rows, opt.Cols = 4, 20
	}
	ws := opt.Workspace
	if ws == "" {
		dir, err := os.MkdirTemp("", "termlink-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		ws = dir
	}
	if err := os.MkdirAll(ws, 0o700); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(ws, "demo.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, nil))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The server, with the built-in echo agent or the given one.
	cfg := config.Default()
	cfg.Workspace = filepath.Join(ws, "server")
	agentName := "echo (built in)"
	if !opt.NoStream {
		cfg.Agents[config.DefaultAgent].Builtin.StreamWordMs = int(DefaultWordGap / time.Millisecond)
		agentName = "echo (built in, streaming)"
	}
	if opt.Agent != "" {
		command, err := agentCommand(opt.AgentDir, opt.Agent)
		if err != nil {
			return err
		}
		cfg.Agents["demo"] = config.Agent{Terminal: &config.TerminalAgent{Enabled: true, Command: command,
			Timeout: 120, Protocol: "rich", PassMedia: true, MaxOutputBytes: 4 << 20}}
		ch := cfg.Channels["terminal-dev"]
		ch.Agent = "demo"
		cfg.Channels["terminal-dev"] = ch
		agentName = opt.Agent
	}
	srv, err := server.New(cfg, server.Options{Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	url := "ws://" + ln.Addr().String() + "/api/channels/terminal-dev/ws"
	httpBase := "http://" + ln.Addr().String()
	var wg sync.WaitGroup
	defer wg.Wait()
	sctx, stopServer := context.WithCancel(context.Background())
	defer stopServer() // after the device has closed its connection
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(sctx, ln, 5*time.Second); err != nil {
			log.Error("server", "err", err)
		}
	}()

	ccfg := link.ClientConfig{URL: url, PeerID: demoPeer, DeviceName: "termrig demo",
		StateDir: filepath.Join(ws, "device"), Logger: log, RetryInitial: 200 * time.Millisecond, RetryMax: 5 * time.Second,
		Stream: !opt.NoStream}
	var gate *device.KeyGate
	var kiosk device.Kiosk
	if opt.Kiosk {
		ccfg.Capabilities = append(link.DefaultCapabilities(), link.CapNotice, link.CapScreen)
		ccfg.Board, ccfg.Version, ccfg.Tags = "demo-lcd", "demo", map[string]string{"site": "demo"}
		gate = device.NewKeyGate()
		kiosk = device.Kiosk{IdleAfter: opt.IdleAfter, BacklightOffAfter: opt.BacklightOffAfter}
		if kiosk.IdleAfter == 0 {
			kiosk.IdleAfter = DefaultIdleAfter
		}
		if kiosk.BacklightOffAfter == 0 {
			kiosk.BacklightOffAfter = DefaultBacklightOffAfter
		}
	}
	client, err := link.NewClient(ccfg)
	if err != nil {
		return err
	}
	inputs := make(chan device.Input)
	d := &device.Daemon{Client: client, Inputs: inputs, Logger: log, Gate: gate, Kiosk: kiosk}

	if opt.Console {
		con := console.New(tty, console.Opts{Logger: log})
		d.View = &device.ConsoleView{Console: con}
		con.AddMessage(console.RoleSystem, fmt.Sprintf("termlink demo: server %s, agent %s. Type and press Enter; Ctrl-C cancels a run; Ctrl-D quits.", url, agentName))
		wg.Add(2)
		go func() { defer wg.Done(); _ = con.Run(ctx) }()
		go func() { defer wg.Done(); device.FromConsole(ctx, con.Events(), inputs) }()
		err = d.Run(ctx)
		_ = con.Flush(context.Background())
		cancel()
		_ = con.Close()
	} else {
		bus, err2 := lcdemu.New(&lcdemu.Opts{Rows: opt.Rows, Cols: opt.Cols})
		if err2 != nil {
			return err2
		}
		lcd, err2 := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: opt.Rows, Cols: opt.Cols, Logger: log})
		if err2 != nil {
			return err2
		}
		d.View = &device.LCDView{Screen: lcd}
		p := &painter{out: tty, size: tty.Size, bus: bus, url: url, agent: agentName, keypad: opt.Keypad}
		if opt.Kiosk {
			p.kiosk = kioskLines(httpBase, opt, kiosk)
		}
		wg.Add(2)
		go func() { defer wg.Done(); p.run(ctx) }()
		go func() { defer wg.Done(); readKeys(ctx, cancel, tty, opt.Keypad, gate, inputs) }()
		err = d.Run(ctx)
		cancel()
		p.finish()
	}
	if errors.Is(err, device.ErrQuit) || errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// agentCommand returns the shell command that runs the user's agent
// command in dir (default: the current directory), so that
// `--agent "python3 agents/mine.py"` finds its script where the user
// typed it, not in the demo's temporary workspace. What can be checked
// before the demo starts is, so that a typo is one short line here rather
// than a shell error paged across the small screen: the program exists
// (on $PATH, or at its path), and so does a script it is given.
func agentCommand(dir, command string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("--agent: %w", err)
		}
		dir = wd
	}
	words := strings.Fields(command)
	if len(words) == 0 {
		return "", errors.New("--agent: empty command")
	}
	for i, w := range words {
		if strings.ContainsAny(w, "'\"\\$`=;&|<>(){}*?~") {
			break // shell syntax: leave it to the shell
		}
		if i > 0 && (strings.HasPrefix(w, "-") || !isScript(w)) {
			continue
		}
		p := w
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		switch {
		case i == 0 && !strings.Contains(w, "/"):
			if _, err := exec.LookPath(w); err != nil {
				return "", fmt.Errorf("--agent: %s: not found on $PATH", w)
			}
		case !exists(p):
			return "", fmt.Errorf("--agent: %s: no such file (relative paths are taken from %s)", w, dir)
		case i == 0 && !executable(p):
			return "", fmt.Errorf("--agent: %s: not executable (chmod +x it, or name its interpreter first)", w)
		}
	}
	return "cd " + terminal.ShellQuote(dir) + " || exit\n" + command, nil
}

// isScript reports whether an argument names a script file by its
// extension.
func isScript(w string) bool {
	switch filepath.Ext(w) {
	case ".py", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".sh", ".php", ".lua", ".jar":
		return true
	}
	return false
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// kioskLines tell the user of the kiosk demo where the web console is,
// how to send the device a notice, and what the kiosk does. Each fits 79
// columns (the notices URL, the longest, has a line of its own).
func kioskLines(base string, opt Options, k device.Kiosk) []string {
	return []string{
		"Kiosk: a notice takes over the LCD, a key dismisses it; idle after " + k.IdleAfter.String() + ",",
		"dark after " + k.BacklightOffAfter.String() + ". Web console: " + base + "/",
		"Send a notice:",
		`  curl -X POST -H 'Content-Type: application/json' \`,
		`    -d '{"text":"Lobby closes at 6","display_seconds":10}' \`,
		"    " + base + "/api/channels/terminal-dev/peers/" + demoPeer + "/notices",
	}
}

// painter draws the emulated glass as a box whenever it changes, and the
// lines around it. The whole screen fits 80x24 (kiosk lines included);
// it never scrolls: in a smaller terminal the first line says so and the
// rest is cut to fit, the box first.
type painter struct {
	out    io.Writer
	size   func() (cols, rows int, err error) // the terminal's; nil: unknown
	bus    *lcdemu.Bus
	url    string
	agent  string
	keypad bool
	kiosk  []string // extra lines of the kiosk demo

	mu   sync.Mutex
	last string
}

func (p *painter) run(ctx context.Context) {
	_, _ = io.WriteString(p.out, "\x1b[?25l\x1b[H\x1b[2J") // hide the cursor, clear
	t := time.NewTicker(40 * time.Millisecond)
	defer t.Stop()
	for {
		p.draw()
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// screenLines are the lines the demo shows, without escapes; the LCD's
// rows are lines glass to glass+rows-1.
func (p *painter) screenLines(lines []string, light bool) (out []string, glass int) {
	width := 0
	if len(lines) > 0 {
		width = len([]rune(lines[0]))
	}
	state := "on"
	if !light {
		state = "off"
	}
	out = append(out, fmt.Sprintf(" termlink demo: %dx%d LCD (HD44780, PCF8574 at 0x27, emulated); backlight %s", width, len(lines), state))
	out = append(out, " ┌"+strings.Repeat("─", width)+"┐")
	glass = len(out)
	for _, l := range lines {
		out = append(out, " │"+l+"│")
	}
	out = append(out, " └"+strings.Repeat("─", width)+"┘")
	for _, l := range legend(p.keypad) {
		out = append(out, " "+l)
	}
	out = append(out, "", clip(" server "+p.url, 79), clip(" agent  "+p.agent, 79))
	if len(p.kiosk) > 0 {
		out = append(out, "")
		for _, l := range p.kiosk {
			out = append(out, " "+l)
		}
	}
	return out, glass
}

// clip cuts s to n runes, the last an ellipsis.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// fit cuts a screen to a terminal of cols x rows (0: unknown), keeping the
// last column free so that no line wraps. When it had to cut, the first
// line says what the terminal is and what the demo needs.
func fit(screen []string, glass, cols, rows int) ([]string, int) {
	needCols, needRows := 0, len(screen)
	for _, l := range screen {
		needCols = max(needCols, len([]rune(l))+1)
	}
	if (cols <= 0 || cols >= needCols) && (rows <= 0 || rows >= needRows) {
		return screen, glass
	}
	warn := fmt.Sprintf(" The terminal is %dx%d; this demo needs %dx%d: enlarge it.", cols, rows, needCols, needRows)
	screen = append([]string{warn}, screen...)
	glass++
	if rows > 0 && len(screen) > rows {
		screen = screen[:rows]
	}
	if cols > 0 {
		for i, l := range screen {
			if r := []rune(l); len(r) > cols-1 {
				screen[i] = string(r[:max(cols-1, 0)])
			}
		}
	}
	return screen, glass
}

func (p *painter) draw() {
	lines := p.bus.Text()
	light := p.bus.State().Backlight
	cols, rows := 0, 0
	if p.size != nil {
		if c, r, err := p.size(); err == nil {
			cols, rows = c, r
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	key := fmt.Sprint(light, cols, rows, strings.Join(lines, "\n"))
	if key == p.last {
		return
	}
	p.last = key
	screen, glass := p.screenLines(lines, light)
	screen, glass = fit(screen, glass, cols, rows)
	var b strings.Builder
	b.WriteString("\x1b[H")
	for i, l := range screen {
		if i > 0 {
			b.WriteString("\r\n") // none after the last line: the screen never scrolls
		}
		if !light && i >= glass && i < glass+len(lines) {
			if j := strings.Index(l, "│"); j >= 0 { // a dark glass: dim
				l = l[:j] + "\x1b[2m" + l[j:] + "\x1b[22m"
			}
		}
		b.WriteString(l + "\x1b[K")
	}
	b.WriteString("\x1b[J") // clear what a taller screen left below
	_, _ = io.WriteString(p.out, b.String())
}

// legend explains the keys and every mark the glass shows.
func legend(keypad bool) []string {
	keys := []string{"Type a message, Enter sends. Up/Down page. Esc cancels a run. Ctrl-C quits."}
	if keypad {
		keys = []string{"Keypad: 2-9 multi-tap letters, 0 space, 1 punctuation, * case, # send,",
			"D delete, A/B page. Esc cancels a run, Ctrl-C quits."}
	}
	return append(keys,
		"Status, right of the last row: ok online, .. connecting, a number: seconds",
		"to the next try while offline, -- offline; : waiting for the answer,",
		"+ more of an answer below the page (page down to read it).",
		"Lines: >sent, ^queued (not yet taken by the server), !refused, -note.")
}

// finish draws the last glass and gives the terminal its cursor back.
func (p *painter) finish() {
	p.draw()
	_, _ = io.WriteString(p.out, "\x1b[?25h\r\n")
}

// errQuit ends the key reader when the user quits.
var errQuit = errors.New("quit")

// readKeys turns the keyboard into device inputs. console.ReadKeys
// delivers a lone Esc after a short quiet time, so it cancels at once.
// With a gate (the kiosk), a key that dismisses a notice or wakes the
// screen does nothing else.
func readKeys(ctx context.Context, quit context.CancelFunc, in io.Reader, keypad bool, gate *device.KeyGate, out chan<- device.Input) {
	var (
		compose []rune
		kpEv    chan input.Event
	)
	send := func(in device.Input) {
		select {
		case out <- in:
		case <-ctx.Done():
		}
	}
	if keypad {
		kpEv = make(chan input.Event)
		actions := make(chan input.Action)
		mt := input.NewMultiTap(input.MultiTapOpts{Keys: input.Keys4x4()})
		go func() { _ = input.Drive(ctx, kpEv, mt, actions) }()
		go device.FromActions(ctx, actions, out)
	}
	err := console.ReadKeys(ctx, in, func(keys []console.Key) error {
		for _, k := range keys {
			if k.Kind == console.KeyInterrupt || k.Kind == console.KeyEOF {
				return errQuit
			}
			if gate != nil && gate.Press() {
				continue
			}
			switch k.Kind {
			case console.KeyEscape:
				send(device.Input{Kind: device.InputCancel})
			case console.KeyUp, console.KeyPageUp:
				send(device.Input{Kind: device.InputScrollUp})
			case console.KeyDown, console.KeyPageDown:
				send(device.Input{Kind: device.InputScrollDown})
			case console.KeyRune:
				if keypad {
					r := k.Rune
					if r >= 'a' && r <= 'd' {
						r -= 'a' - 'A'
					}
					if strings.ContainsRune("0123456789*#ABCD", r) {
						now := time.Now()
						for _, kind := range []input.Kind{input.KeyDown, input.KeyUp} {
							select {
							case kpEv <- input.Event{Kind: kind, Key: r, Row: -1, Col: -1, Time: now}:
							case <-ctx.Done():
								return ctx.Err()
							}
						}
					}
					continue
				}
				compose = append(compose, k.Rune)
				send(device.Input{Kind: device.InputEdit, Text: string(compose)})
			case console.KeyBackspace:
				if !keypad && len(compose) > 0 {
					compose = compose[:len(compose)-1]
					send(device.Input{Kind: device.InputEdit, Text: string(compose)})
				}
			case console.KeyKillLine:
				if !keypad {
					compose = compose[:0]
					send(device.Input{Kind: device.InputEdit, Text: ""})
				}
			case console.KeyEnter:
				if !keypad && len(compose) > 0 {
					text := string(compose)
					compose = compose[:0]
					send(device.Input{Kind: device.InputSend, Text: text})
				}
			}
		}
		return ctx.Err()
	})
	if err != nil && ctx.Err() == nil {
		quit() // Ctrl-C, Ctrl-D, or the terminal is gone
	}
}
