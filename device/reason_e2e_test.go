package device_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/device"
	"termlink/device/input"
	"termlink/internal/syncbuf"
	"termlink/internal/testpki"
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
	full  string // on the page the send key opens
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
	for _, tc := range offlineCases() {
		t.Run(tc.name, func(t *testing.T) {
			r, client, logs := startGatedLCD(t, tc.cfg(t), "")
			bus := r.bus

			glass := r.waitGlass(t, tc.short)
			if !strings.HasPrefix(glass[1], tc.short) {
				t.Errorf("bottom line %q, want it to start with %q", glass[1], tc.short)
			}
			// Many retries, one line in the log.
			deadline := time.Now().Add(20 * time.Second)
			for client.Status().Attempt < 5 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if a := client.Status().Attempt; a < 5 {
				t.Fatalf("only %d attempts", a)
			}
			if n := strings.Count(logs.String(), "msg=offline"); n != 1 {
				t.Errorf("%d offline lines in the log after %d attempts, want 1:\n%s", n, client.Status().Attempt, logs.String())
			}
			if !strings.Contains(logs.String(), "level=INFO msg=offline reason=") || !strings.Contains(logs.String(), tc.full) ||
				!strings.Contains(logs.String(), "next_try=") {
				t.Errorf("the log does not give the reason and the next try:\n%s", logs.String())
			}
			if g := bus.Text(); strings.TrimSpace(g[0]) != "" {
				t.Errorf("the conversation shows %q: the reason belongs on the status line", g[0])
			}

			r.press("#")                // nothing typed: the page with the full reason
			r.waitGlass(t, "Offline: ") // 16x2: the first page, then the next every 3s
			words := strings.Fields(tc.full)
			r.waitGlassFor(t, words[len(words)-1], 3*device.NoticePage+5*time.Second)
			r.press("2") // closes the page, types nothing
			r.waitGlass(t, tc.short)
			time.Sleep(300 * time.Millisecond) // past the multi-tap timeout
			if g := bus.Text(); strings.Contains(g[1], "a_") {
				t.Fatalf("the key that closed the page typed: %q", g)
			}
		})
	}
}

// waitGlassFor waits up to timeout until the glass shows want somewhere.
func (r *rig) waitGlassFor(t *testing.T, want string, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if text := r.bus.Text(); strings.Contains(strings.Join(text, "\n"), want) {
			return text
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the LCD never showed %q; it shows:\n%s", want, strings.Join(r.bus.Text(), "\n"))
	return nil
}

// startGatedLCD runs the daemon as termd does on a keypad board: the real
// HD44780 driver on an emulated 16x2 LCD, keypad events through the
// KeyGate into multi-tap entry; the daemon stops when the test ends.
func startGatedLCD(t *testing.T, cfg link.ClientConfig, hello string) (*rig, *link.Client, *syncbuf.Buffer) {
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
	mt := input.NewMultiTap(input.MultiTapOpts{Keys: input.Keys4x4(), Timeout: 150 * time.Millisecond})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); device.GateKeys(ctx, gate, keys, gated) }()
	go func() { defer wg.Done(); _ = input.Drive(ctx, gated, mt, actions) }()
	go func() { defer wg.Done(); device.FromActions(ctx, actions, inputs) }()
	d := &device.Daemon{Client: client, View: &device.LCDView{Screen: lcd}, Inputs: inputs, Gate: gate, Hello: hello,
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
	return &rig{bus: bus, keys: keys}, client, logs
}

// Daemon.Hello ("Enrolled as ...") stays over the screen while the device
// is online until a key closes it; that key types nothing; it stays a line
// of the conversation.
func TestHelloStaysUntilAKey(t *testing.T) {
	s := servertest.Start(t, nil)
	r, client, _ := startGatedLCD(t, link.ClientConfig{URL: s.URL, PeerID: "k1"}, "Enrolled as k1")
	r.waitGlass(t, "Enrolled as")
	for client.Status().State != link.StateConnected {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if g := strings.Join(r.bus.Text(), "|"); !strings.Contains(g, "Enrolled as") {
		t.Fatalf("online, the greeting is gone at once: %q", g)
	}
	r.press("2")
	g := r.waitGlass(t, "ok")
	if !strings.Contains(g[0], "-Enrolled as") || strings.Contains(g[1], "a") {
		t.Fatalf("after the key: %q, want the greeting in the conversation and nothing typed", g)
	}
}

// Without a key the greeting goes after HelloSeconds.
func TestHelloGoesByItself(t *testing.T) {
	s := servertest.Start(t, nil)
	// Taken before the daemon starts, so at or before its hello timer:
	// a floor that a busy machine (noticing the glass late) cannot break.
	start := time.Now()
	r, _, _ := startGatedLCD(t, link.ClientConfig{URL: s.URL, PeerID: "k1"}, "Enrolled as k1")
	if g := r.waitGlass(t, "Enrolled as"); strings.Contains(strings.Join(g, "\n"), "ok") {
		t.Fatalf("the greeting went with the hello: %q", g)
	}
	r.waitGlassFor(t, "ok", device.HelloSeconds*time.Second+10*time.Second)
	if d := time.Since(start); d < device.HelloSeconds*time.Second {
		t.Fatalf("the greeting went after %v, want about %ds", d, device.HelloSeconds)
	}
}
