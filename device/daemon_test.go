package device_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/device"
	"termlink/device/input"
	"termlink/display/hd44780"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/lcdemu"
)

type rig struct {
	bus    *lcdemu.Bus
	keys   chan input.Event
	typing *typedClock // the key presses' clock (press)
	frame  sync.Mutex  // held while a frame is drawn (framedView) and while the glass is read
	done   chan error
	cancel context.CancelFunc
	drawn  *drawnView   // startGatedLCD's
	client *link.Client // startDevice's
}

// emulatedLCD is the real HD44780 driver on an emulated LCD of rows x
// cols.
func emulatedLCD(t *testing.T, rows, cols int) (*lcdemu.Bus, *hd44780.Dev) {
	t.Helper()
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	lcd, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	return bus, lcd
}

// startDevice runs termd's daemon: the real HD44780 driver on the emulated
// 20x4 LCD, multi-tap text entry fed by keypad events, a link client with
// a file outbox in stateDir.
func startDevice(t *testing.T, url, stateDir string) *rig {
	t.Helper()
	bus, lcd := emulatedLCD(t, 4, 20)
	client, err := link.NewClient(link.ClientConfig{URL: url, PeerID: "kiosk-1", DeviceName: "test", StateDir: stateDir,
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond, StorageRetry: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{bus: bus, keys: make(chan input.Event), done: make(chan error, 1), cancel: cancel, client: client}
	actions := make(chan input.Action)
	inputs := make(chan device.Input)
	r.typing = newTypedClock(input.NewMultiTap(input.MultiTapOpts{Keys: input.Keys4x4(), Timeout: 150 * time.Millisecond}))
	go func() { _ = input.Drive(ctx, r.keys, r.typing, actions) }()
	go device.FromActions(ctx, actions, inputs)
	d := &device.Daemon{Client: client, View: framedView{View: &device.LCDView{Screen: lcd}, mu: &r.frame}, Inputs: inputs}
	go func() { r.done <- d.Run(ctx) }()
	return r
}

func (r *rig) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("daemon: %v", err)
		}
	case <-time.After(testwait.Deadline):
		t.Fatal("daemon did not stop")
	}
}

// press types keys on the emulated keypad, on the rig's own clock: each
// key 50 ms after the one before (held 30 ms); a space is a pause of 1 s,
// so the pending letter commits. A loaded machine's late goroutine cannot
// split "44" into two letters or join "4 4" into one.
func (r *rig) press(keys string) {
	for _, k := range keys {
		if k == ' ' {
			r.typing.advance(time.Second)
			continue
		}
		at := r.typing.advance(50 * time.Millisecond)
		r.keys <- input.Event{Kind: input.KeyDown, Key: k, Row: -1, Col: -1, Time: at}
		r.keys <- input.Event{Kind: input.KeyUp, Key: k, Row: -1, Col: -1, Time: at.Add(30 * time.Millisecond)}
	}
}

// framedView draws each frame holding mu, which the rig's glass takes
// too: the emulated LCD is written row by row while the driver draws, and
// a read in between saw the notice's row of one frame beside the status
// row of the one before (TestStorageProblemShownAndSurvived, stress run 15).
type framedView struct {
	device.View
	mu *sync.Mutex
}

func (v framedView) Render(ctx context.Context, m *device.Model, now time.Time) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.View.Render(ctx, m, now)
}

// Mirror passes the LCD's mirror on.
func (v framedView) Mirror() link.Screen { return v.View.(device.Mirror).Mirror() }

// glass is what the emulated LCD shows between two frames.
func (r *rig) glass() []string {
	r.frame.Lock()
	defer r.frame.Unlock()
	return r.bus.Text()
}

// typedClock runs a multi-tap entry on the test's clock instead of the
// wall clock: input.Drive's timer only polls it (every 10 ms while a letter
// is pending), and a pending letter commits when press has moved the clock
// past its timeout.
type typedClock struct {
	input.Entry
	mu  sync.Mutex
	now time.Time
}

func newTypedClock(e input.Entry) *typedClock { return &typedClock{Entry: e, now: time.Now()} }

// advance moves the clock on by d and returns the new time.
func (c *typedClock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

func (c *typedClock) Tick(time.Time) []input.Action {
	c.mu.Lock()
	now := c.now
	c.mu.Unlock()
	return c.Entry.Tick(now)
}

func (c *typedClock) Deadline() (time.Time, bool) {
	if _, ok := c.Entry.Deadline(); !ok {
		return time.Time{}, false
	}
	return time.Now().Add(10 * time.Millisecond), true
}

// waitGlass waits until the glass shows want somewhere.
func (r *rig) waitGlass(t *testing.T, want string) []string {
	t.Helper()
	var text []string
	testwait.UntilOK(t, fmt.Sprintf("the LCD to show %q", want), func() error {
		if text = r.glass(); !strings.Contains(strings.Join(text, "\n"), want) {
			return fmt.Errorf("it shows:\n%s", strings.Join(text, "\n"))
		}
		return nil
	})
	return text
}

// Keypresses on the emulated keypad reach the real server, and its reply
// appears on the emulated LCD through the real driver.
func TestKeypadToLCDEndToEnd(t *testing.T) {
	t.Parallel()
	r := startDevice(t, servertest.Start(t, nil).URL, t.TempDir())
	defer r.stop(t)

	r.waitGlass(t, "ok") // online
	r.press("44 444 ")   // h, i
	r.waitGlass(t, "hi_")
	r.press("#")
	glass := r.waitGlass(t, "You said: hi")
	if !strings.Contains(strings.Join(glass, "\n"), ">hi") {
		t.Fatalf("the sent message is not shown as delivered:\n%s", strings.Join(glass, "\n"))
	}
	if w := r.bus.Warnings(); len(w) != 0 {
		t.Fatalf("the emulated controller saw problems: %v", w)
	}
}

// A message typed while the server is down shows queued with the retry
// countdown, and is answered once the server is back.
func TestOfflineMessageQueuedThenAnswered(t *testing.T) {
	// Reserve an address, then leave it closed: the server is "down".
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stateDir := t.TempDir()
	r := startDevice(t, "ws://"+addr+"/api/channels/terminal-dev/ws", stateDir)
	defer r.stop(t)
	r.waitGlass(t, "no server") // the short reason; the countdown is in the status field
	r.press("2 ")               // "a"
	r.press("#")
	r.waitGlass(t, "^a") // queued

	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	s, err := server.New(cfg, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("could not re-listen on %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln2, 5*time.Second) }()
	defer func() { cancel(); <-served }()
	r.waitGlass(t, "You said: a")
	r.waitGlass(t, ">a")
}

// A state dir the outbox cannot use (a directory where its file goes):
// the daemon starts anyway, the LCD says so, a message typed meanwhile is
// answered from memory, and once the path is fixed the LCD says storage
// works again and the outbox is durable.
func TestStorageProblemShownAndSurvived(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	inTheWay := filepath.Join(state, link.OutboxFile)
	if err := os.Mkdir(inTheWay, 0o700); err != nil {
		t.Fatal(err)
	}
	r := startDevice(t, servertest.Start(t, nil).URL, state)
	r.waitGlass(t, "disk error")
	testwait.UntilOK(t, "the '!' storage mark in the status field", func() error {
		glass := r.glass()
		if last := []rune(glass[len(glass)-1]); last[len(last)-3] != '!' {
			return fmt.Errorf("the bottom row is %q", string(last))
		}
		return nil
	})
	r.press("44 444 ") // h, i
	r.press("#")
	r.waitGlass(t, "You said: hi")

	if err := os.Remove(inTheWay); err != nil {
		t.Fatal(err)
	}
	r.waitGlass(t, "disk ok again")
	r.press("2 ") // a
	r.press("#")
	r.waitGlass(t, "You said: a")
	// The daemon confirms an answer (Client.Delivered: it leaves the
	// outbox) after drawing it; one not confirmed when termd stops is
	// shown again at the next start, by design. Stopping as soon as the
	// glass showed it left it pending once under stress-ng (the test was
	// wrong): wait for the confirmation.
	testwait.Until(t, "the client to hold no message after the answer was drawn", func() bool { return len(r.client.Pending()) == 0 })
	r.stop(t)
	if b, err := os.ReadFile(inTheWay); err != nil || !strings.Contains(string(b), `"text":"a"`) {
		t.Fatalf("the message sent after the fix is not in the outbox file: %q %v", b, err)
	}
	o, err := link.OpenFileOutbox(state, link.FileOutboxOptions{})
	if err != nil {
		t.Fatalf("the outbox is not durable again: %v", err)
	}
	defer o.Close()
	if p := o.Pending(); len(p) != 0 {
		t.Fatalf("outbox holds %v after every answer was drawn", p)
	}
}

// On a 16x2 LCD a full disk reads "disk full" with the '!' mark on the
// bottom line, and the notice above says what termd does about it.
func TestLCD16x2StorageProblem(t *testing.T) {
	t.Parallel()
	bus, lcd := emulatedLCD(t, 2, 16)
	v := &device.LCDView{Screen: lcd}
	var m device.Model
	m.Apply(link.Event{Kind: link.EventState, State: link.StateConnected})
	m.Apply(link.Event{Kind: link.EventStorage, Err: fmt.Errorf("link: outbox: storing message: write outbox.jsonl: %w", syscall.ENOSPC)})
	if err := v.Render(context.Background(), &m, time.Now()); err != nil {
		t.Fatal(err)
	}
	want := []string{"using memory    ", "disk full    !ok"}
	if got := bus.Text(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("16x2 shows %q, want %q", got, want)
	}
	m.Apply(link.Event{Kind: link.EventStorage})
	if err := v.Render(context.Background(), &m, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := bus.Text(); !strings.Contains(got[0], "disk ok again") || strings.Contains(got[1], "!") {
		t.Fatalf("after the disk is back 16x2 shows %q", got)
	}
}
