package device_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"termlink/boards"
	"termlink/device"
	"termlink/display/lcdproc"
	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/servertest"
	"termlink/testrig/lcdd"
)

// The whole device on the lcdproc profile against the real LCDd (curses
// driver in tmux) and a real termserver: termd's conversation appears on
// LCDd's screen, keys typed on LCDd's keyboard go through the same
// multi-tap entry as the keypad and the message reaches the server (whose
// echo agent answers), and LCDd restarting is a lost link: termd
// reconnects and draws the conversation again.
func TestLCDprocEndToEnd(t *testing.T) {
	lcdd.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testwait.Deadline)
	defer cancel()
	lcd, err := lcdd.Start(ctx, t.TempDir(), lcdd.Options{Rows: 4, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer lcd.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("LCDd's log:\n%s", lcd.Log())
		}
	}()

	p, err := boards.Load("lcdproc")
	if err != nil {
		t.Fatal(err)
	}
	p.Display.Address = boards.Address{Host: lcd.Addr}
	// LCDd's keys drive the multi-tap on the wall clock: a letter commits
	// after multitap_timeout with no key. Long here, so that a step's
	// keys, sent through LCDd, are never split by a busy machine or qemu
	// (stress run 25: "44" then "4" committed apart, "hi_" never shown).
	// The test waits for each commit it types, so a longer one costs
	// only time.
	p.Keypad = &boards.Keypad{Kind: boards.Keypad4x4, MultitapTimeout: boards.Duration(3 * time.Second)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hw, err := device.OpenBoard(ctx, p, log)
	if err != nil {
		t.Fatal(err)
	}
	defer hw.Close()
	client, err := link.NewClient(link.ClientConfig{URL: servertest.Start(t, nil).URL, PeerID: "lcdproc-1", DeviceName: "test",
		StateDir: t.TempDir(), RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	hwDone, dDone := make(chan error, 1), make(chan error, 1)
	go func() { hwDone <- hw.Run(rctx) }()
	d := &device.Daemon{Client: client, View: hw.View, Inputs: hw.Inputs, Logger: log}
	go func() { dDone <- d.Run(rctx) }()
	defer func() {
		stop()
		for _, c := range []chan error{dDone, hwDone} {
			select {
			case err := <-c:
				if err != nil {
					t.Errorf("stopping: %v", err)
				}
			case <-time.After(testwait.Deadline):
				t.Error("did not stop")
			}
		}
	}()

	shows := func(what string) []string {
		t.Helper()
		rows, err := lcd.WaitScreen(ctx, what, func(rows []string) bool { return lcdd.Contains(rows, what) })
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	// Online: the status field's "ok" at the end of the bottom row.
	if _, err := lcd.WaitScreen(ctx, "online", func(rows []string) bool { return strings.HasSuffix(rows[3], " ok") }); err != nil {
		t.Fatal(err)
	}

	// Multi-tap on LCDd's keys: 4 4 (h), the pause that commits it (the
	// cursor shows after it), 4 4 4 (i), Enter sends.
	for _, step := range []struct{ keys, shown string }{{"44", "h_"}, {"444", "hi_"}} {
		if err := lcd.Type(ctx, step.keys); err != nil {
			t.Fatal(err)
		}
		shows(step.shown)
	}
	if err := lcd.Press(ctx, "Enter"); err != nil {
		t.Fatal(err)
	}
	rows := shows("You said: hi")
	if !lcdd.Contains(rows, ">hi") {
		t.Fatalf("the sent message is not shown as delivered:\n%s", strings.Join(rows, "\n"))
	}

	// LCDd restarts: the screen comes back with the conversation.
	if err := lcd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	shows("You said: hi")
}

// termd asks LCDd for its size when it opens the board, so that its first
// frames fit a display of another size than the profile's 20x4.
func TestLCDprocSizeAtStart(t *testing.T) {
	lcdd.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	lcd, err := lcdd.Start(ctx, t.TempDir(), lcdd.Options{Rows: 2, Cols: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer lcd.Stop()
	p, err := boards.Load("lcdproc")
	if err != nil {
		t.Fatal(err)
	}
	p.Display.Address = boards.Address{Host: lcd.Addr}
	hw, err := device.OpenBoard(ctx, p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer hw.Close()
	if r, c := hw.View.(*device.LCDView).Screen.Size(); r != 2 || c != 16 {
		t.Fatalf("size at start %dx%d, want LCDd's 2x16", r, c)
	}
}

// A connection to LCDd that is still coming (termd starts before LCDd
// has taken it) is no warning: the frames are kept for it, and each draw
// until then is logged at DEBUG only (the lcdproc client warns about the
// connection itself when it fails).
func TestLCDprocNotConnectedYetIsNoWarning(t *testing.T) {
	t.Parallel()
	ps := newPushServer(t)
	dev := lcdproc.New(lcdproc.Opts{Address: "127.0.0.1:1"}) // never run: never connected
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client, err := link.NewClient(link.ClientConfig{URL: ps.url(), PeerID: "lcdproc-2", StateDir: t.TempDir(), Logger: discard,
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &device.Daemon{Client: client, View: &device.LCDView{Screen: dev}, Inputs: make(chan device.Input), Logger: log}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	ps.waitFor(t, "the device", func() bool { return ps.conn != nil })
	testwait.Until(t, "three draws tried", func() bool { return strings.Count(logs.String(), `msg="drawing the screen"`) >= 3 })
	if strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("a connection to LCDd still coming was warned about:\n%s", logs.String())
	}
}
