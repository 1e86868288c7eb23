package device_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/device"
	"termlink/device/input"
	"termlink/internal/syncbuf"
	"termlink/internal/testpki"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/servertest"
)

// offlineCase is a device the server (a real termserver on 127.0.0.1:0)
// keeps offline, and what it must say why.
type offlineCase struct {
	name  string
	cfg   func(t *testing.T) link.ClientConfig
	short string // on the status line
	full  string // in the log, and on the page the send key opens unless page is set
	page  string // on the page, for a reason whose full text has the server's body
}

func offlineCases() []offlineCase {
	return []offlineCase{
		{name: "bad CA", short: "unknown CA", full: "unknown authority",
			cfg: func(t *testing.T) link.ClientConfig {
				dir := t.TempDir()
				ca := testpki.NewCA(t, dir, "lab")
				srv := ca.Server(t, "server")
				s := servertest.Start(t, func(c *config.Config) {
					c.TLS = config.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
				})
				other := testpki.NewCA(t, dir, "other")
				return link.ClientConfig{URL: s.URL, CAFile: other.File, PeerID: "kiosk-1"}
			}},
		{name: "wrong channel", short: "no channel", full: "server answered HTTP 404 Not Found", page: "server: 404 not found (no channel)",
			cfg: func(t *testing.T) link.ClientConfig {
				s := servertest.Start(t, nil)
				return link.ClientConfig{URL: strings.Replace(s.URL, "terminal-dev", "lobby", 1), PeerID: "kiosk-1"}
			}},
		{name: "wrong token", short: "token refused", full: "HTTP 401",
			cfg: func(t *testing.T) link.ClientConfig {
				s := servertest.Start(t, func(c *config.Config) {
					ch := c.Channels["terminal-dev"]
					ch.Config.Tokens = config.Tokens{ByPeer: map[string]string{"kiosk-1": "the-right-token"}}
					c.Channels["terminal-dev"] = ch
				})
				return link.ClientConfig{URL: s.URL, Token: "a-wrong-token", PeerID: "kiosk-1"}
			}},
		{name: "refused certificate", short: "peer mismatch", full: "certificate is for peer kiosk-1, connect says kiosk-9",
			cfg: func(t *testing.T) link.ClientConfig {
				dir := t.TempDir()
				ca := testpki.NewCA(t, dir, "lab")
				devCA := testpki.NewCA(t, dir, "devices")
				kiosk := devCA.Client(t, "kiosk-1", "kiosk-1", "termlink:peer/kiosk-1")
				srv := ca.Server(t, "server")
				s := servertest.Start(t, func(c *config.Config) {
					c.TLS = config.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
					ch := c.Channels["terminal-dev"]
					ch.Config.ClientCA = devCA.File
					c.Channels["terminal-dev"] = ch
				})
				return link.ClientConfig{URL: s.URL, CAFile: ca.File, CertFile: kiosk.CertFile, KeyFile: kiosk.KeyFile, PeerID: "kiosk-9"}
			}},
	}
}

// A device kept offline says why on its 16x2 LCD (the real HD44780 driver
// on the emulated bus): the short reason on the bottom line beside the
// countdown; '#' with nothing typed opens the full reason, the next key
// closes it and types nothing. The reason is logged at INFO once, with
// the next try, however often the device retries; a refusal the server
// sends is not added to the conversation at every retry.
func TestOfflineReasonOnLCD(t *testing.T) {
	t.Parallel()
	for _, tc := range offlineCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, client, logs := startGatedLCD(t, tc.cfg(t), "", 0)

			glass := r.waitGlass(t, tc.short)
			if !strings.HasPrefix(glass[1], tc.short) {
				t.Errorf("bottom line %q, want it to start with %q", glass[1], tc.short)
			}
			// Many retries, one line in the log.
			testwait.Until(t, "five attempts", func() bool { return client.Status().Attempt >= 5 })
			if n := strings.Count(logs.String(), "msg=offline"); n != 1 {
				t.Errorf("%d offline lines in the log after %d attempts, want 1:\n%s", n, client.Status().Attempt, logs.String())
			}
			if !strings.Contains(logs.String(), "level=INFO msg=offline reason=") || !strings.Contains(logs.String(), tc.full) ||
				!strings.Contains(logs.String(), "next_try=") {
				t.Errorf("the log does not give the reason and the next try:\n%s", logs.String())
			}
			if g := r.glass(); strings.TrimSpace(g[0]) != "" {
				t.Errorf("the conversation shows %q: the reason belongs on the status line", g[0])
			}

			r.press("#")                // nothing typed: the page with the full reason
			r.waitGlass(t, "Offline: ") // 16x2: the first page, then the next (every second here)
			page := tc.page
			if page == "" {
				page = tc.full
			}
			words := strings.Fields(page)
			// Every page of it, and never the server's body.
			var pages []string
			testwait.UntilOK(t, "the reason's last word on the glass", func() error {
				g := strings.Join(r.glass(), " ")
				pages = append(pages, g)
				if !strings.Contains(g, words[len(words)-1]) {
					return fmt.Errorf("the glass shows %q", g)
				}
				return nil
			})
			if all := strings.Join(pages, " "); strings.Contains(all, "{") || strings.Contains(all, "error") || strings.Contains(all, "answered") {
				t.Errorf("the server's answer reached the glass as it came: %q", pages)
			}
			r.press("2") // closes the page, types nothing
			r.waitGlass(t, tc.short)
			// The next key types: its letter, alone, proves the one
			// before typed nothing ("ad_" if it had).
			r.press("3 ") // the pause commits its letter
			testwait.UntilOK(t, "the next key's letter", func() error {
				if g := r.glass(); !strings.HasPrefix(g[1], "d_") && !strings.HasPrefix(g[1], "ad_") {
					return fmt.Errorf("the bottom line is %q", g[1])
				}
				return nil
			})
			if g := r.glass(); !strings.HasPrefix(g[1], "d_") {
				t.Fatalf("the key that closed the page typed: %q", g)
			}
		})
	}
}

// startGatedLCD runs the daemon as termd does on a keypad board: the real
// HD44780 driver on an emulated 16x2 LCD (a long notice's pages turn
// every second), keypad events through the KeyGate into multi-tap
// entry; the hello, if any, stays helloFor seconds (0: the default);
// the daemon stops when the test ends.
func startGatedLCD(t *testing.T, cfg link.ClientConfig, hello string, helloFor int) (*rig, *link.Client, *syncbuf.Buffer) {
	t.Helper()
	cfg.DeviceName, cfg.StateDir = "test", t.TempDir()
	cfg.RetryInitial, cfg.RetryMax = 50*time.Millisecond, 200*time.Millisecond
	client, err := link.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bus, lcd := emulatedLCD(t, 2, 16)
	logs := &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	keys, gated := make(chan input.Event), make(chan input.Event)
	actions, inputs := make(chan input.Action), make(chan device.Input)
	gate := device.NewKeyGate()
	typing := newTypedClock(input.NewMultiTap(input.MultiTapOpts{Keys: input.Keys4x4(), Timeout: 150 * time.Millisecond}))
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); device.GateKeys(ctx, gate, keys, gated) }()
	go func() { defer wg.Done(); _ = input.Drive(ctx, gated, typing, actions) }()
	go func() { defer wg.Done(); device.FromActions(ctx, actions, inputs) }()
	view := &drawnView{View: &device.LCDView{Screen: lcd, NoticePage: time.Second}}
	r := &rig{bus: bus, keys: keys, typing: typing, drawn: view}
	d := &device.Daemon{Client: client, View: framedView{View: view, mu: &r.frame}, Inputs: inputs, Gate: gate, Hello: hello, HelloFor: helloFor,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
		wg.Wait()
	})
	return r, client, logs
}

// drawnView counts the draws that completed, and keeps the link state
// the last one drew.
type drawnView struct {
	device.View
	mu    sync.Mutex
	draws int
	link  link.State
}

func (v *drawnView) Render(ctx context.Context, m *device.Model, now time.Time) error {
	err := v.View.Render(ctx, m, now)
	v.mu.Lock()
	v.draws++
	v.link = m.Link
	v.mu.Unlock()
	return err
}

// Mirror passes the LCD's mirror on.
func (v *drawnView) Mirror() link.Screen { return v.View.(device.Mirror).Mirror() }

// drewOnline reports whether a completed draw drew the link up.
func (v *drawnView) drewOnline() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.link == link.StateConnected
}

// Daemon.Hello ("Enrolled as ...") stays over the screen while the device
// is online until a key closes it; that key types nothing; it stays a line
// of the conversation.
func TestHelloStaysUntilAKey(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, nil)
	// The greeting's own time is long: only a key may close it here.
	r, _, _ := startGatedLCD(t, link.ClientConfig{URL: s.URL, PeerID: "k1"}, "Enrolled as k1", 3600)
	r.waitGlass(t, "Enrolled as")
	// A draw with the link up has happened: the greeting is still there.
	testwait.Until(t, "a draw with the link up", r.drawn.drewOnline)
	if g := strings.Join(r.glass(), "|"); !strings.Contains(g, "Enrolled as") {
		t.Fatalf("online, the greeting is gone at once: %q", g)
	}
	r.press("2")
	g := r.waitGlass(t, "ok")
	if !strings.Contains(g[0], "-Enrolled as") || strings.Contains(g[1], "a") {
		t.Fatalf("after the key: %q, want the greeting in the conversation and nothing typed", g)
	}
}

// Without a key the greeting goes after Daemon.HelloFor seconds (one
// here; HelloSeconds by default).
func TestHelloGoesByItself(t *testing.T) {
	t.Parallel()
	const helloFor = 1
	s := servertest.Start(t, nil)
	// Taken before the daemon starts, so at or before its hello timer:
	// a floor that a busy machine (noticing the glass late) cannot break.
	start := time.Now()
	r, _, _ := startGatedLCD(t, link.ClientConfig{URL: s.URL, PeerID: "k1"}, "Enrolled as k1", helloFor)
	if g := r.waitGlass(t, "Enrolled as"); strings.Contains(strings.Join(g, "\n"), "ok") {
		t.Fatalf("the greeting went with the hello: %q", g)
	}
	r.waitGlass(t, "ok")
	if d := time.Since(start); d < helloFor*time.Second {
		t.Fatalf("the greeting went after %v, want about %ds", d, helloFor)
	}
}
