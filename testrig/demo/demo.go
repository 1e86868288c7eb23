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
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
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
	"termlink/server/config"
	"termlink/testrig/lcdemu"
)

// Options configure a demo run.
type Options struct {
	// Agent is a command for a Terminal Protocol v1 rich agent; empty runs
	// the built-in echo agent.
	Agent string
	// Console shows the VT100 console device instead of the LCD.
	Console bool
	// Keypad makes the keyboard a 4x4 keypad (0-9 * # A-D, multi-tap).
	Keypad bool
	// Workspace holds session logs, the device's outbox and demo.log;
	// empty: a temporary directory removed at the end.
	Workspace string
	// Rows and Cols of the LCD (default 4 x 20).
	Rows, Cols int
}

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
	if opt.Agent != "" {
		cfg.Agents["demo"] = config.Agent{Terminal: &config.TerminalAgent{Enabled: true, Command: opt.Agent,
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

	client, err := link.NewClient(link.ClientConfig{URL: url, PeerID: "demo-device", DeviceName: "termrig demo",
		StateDir: filepath.Join(ws, "device"), Logger: log, RetryInitial: 200 * time.Millisecond, RetryMax: 5 * time.Second})
	if err != nil {
		return err
	}
	inputs := make(chan device.Input)
	d := &device.Daemon{Client: client, Inputs: inputs, Logger: log}

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
		p := &painter{out: tty, bus: bus, url: url, agent: agentName, keypad: opt.Keypad}
		wg.Add(2)
		go func() { defer wg.Done(); p.run(ctx) }()
		go func() { defer wg.Done(); readKeys(ctx, cancel, tty, opt.Keypad, inputs) }()
		err = d.Run(ctx)
		cancel()
		p.finish()
	}
	if errors.Is(err, device.ErrQuit) || errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// painter draws the emulated glass as a box whenever it changes.
type painter struct {
	out    io.Writer
	bus    *lcdemu.Bus
	url    string
	agent  string
	keypad bool

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

func (p *painter) draw() {
	lines := p.bus.Text()
	p.mu.Lock()
	defer p.mu.Unlock()
	key := strings.Join(lines, "\n")
	if key == p.last {
		return
	}
	p.last = key
	width := 0
	if len(lines) > 0 {
		width = len([]rune(lines[0]))
	}
	var b strings.Builder
	b.WriteString("\x1b[H")
	fmt.Fprintf(&b, " termlink demo: %dx%d LCD (HD44780 on a PCF8574 at 0x27, emulated)\x1b[K\r\n\r\n", width, len(lines))
	b.WriteString(" ┌" + strings.Repeat("─", width) + "┐\x1b[K\r\n")
	for _, l := range lines {
		b.WriteString(" │" + l + "│\x1b[K\r\n")
	}
	b.WriteString(" └" + strings.Repeat("─", width) + "┘\x1b[K\r\n\r\n")
	if p.keypad {
		b.WriteString(" Keypad: 2-9 multi-tap letters, 0 space, 1 punctuation, * case, # send,\x1b[K\r\n")
		b.WriteString(" D delete, A/B page. Esc cancels a run, Ctrl-C quits.\x1b[K\r\n")
	} else {
		b.WriteString(" Type a message, Enter sends. Up/Down page. Esc cancels a run. Ctrl-C quits.\x1b[K\r\n")
		b.WriteString(" Status (right of the last row): ok online, .. connecting, NN retry countdown;\x1b[K\r\n")
	}
	b.WriteString(" ':' waiting for the answer, '+' unread answer below.\x1b[K\r\n")
	fmt.Fprintf(&b, "\r\n server %s\x1b[K\r\n agent  %s\x1b[K\r\n", p.url, p.agent)
	_, _ = io.WriteString(p.out, b.String())
}

// finish draws the last glass and gives the terminal its cursor back.
func (p *painter) finish() {
	p.draw()
	_, _ = io.WriteString(p.out, "\x1b[?25h\r\n")
}

// readKeys turns the keyboard into device inputs.
func readKeys(ctx context.Context, quit context.CancelFunc, in io.Reader, keypad bool, out chan<- device.Input) {
	var (
		dec     console.Decoder
		keys    []console.Key
		compose []rune
		kpEv    chan input.Event
	)
	send := func(in device.Input) bool {
		select {
		case out <- in:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if keypad {
		kpEv = make(chan input.Event)
		actions := make(chan input.Action)
		mt := input.NewMultiTap(input.MultiTapOpts{Keys: input.Keys4x4()})
		go func() { _ = input.Drive(ctx, kpEv, mt, actions) }()
		go device.FromActions(ctx, actions, out)
	}
	chunks := make(chan []byte)
	if dl, ok := in.(interface{ SetReadDeadline(time.Time) error }); ok {
		stop := context.AfterFunc(ctx, func() { _ = dl.SetReadDeadline(time.Now()) })
		defer stop()
	}
	go func() { // the blocking read: ends at EOF, or at ctx's end on a TTY (read deadline)
		buf := make([]byte, 256)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				b := append([]byte(nil), buf[:n]...)
				select {
				case chunks <- b:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var chunk []byte
		select {
		case chunk = <-chunks:
		case <-ctx.Done():
			return
		}
		keys = dec.Decode(keys[:0], chunk)
		for _, k := range keys {
			switch k.Kind {
			case console.KeyInterrupt, console.KeyEOF:
				quit()
				return
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
								return
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
	}
}
