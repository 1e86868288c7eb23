package lcdproc_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"termlink/display"
	"termlink/display/lcdproc"
	"termlink/testrig/lcdd"
)

// startLCDd runs the real LCDd (curses driver in tmux) for one test.
func startLCDd(t *testing.T, o lcdd.Options) *lcdd.Server {
	t.Helper()
	lcdd.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := lcdd.Start(ctx, t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("LCDd's log:\n%s", s.Log())
		}
	})
	return s
}

// runDev runs a Dev on s until the test ends and waits for it to connect.
func runDev(t *testing.T, s *lcdd.Server, o lcdproc.Opts) *lcdproc.Dev {
	t.Helper()
	o.Address = s.Addr
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.MinRetry == 0 {
		o.MinRetry, o.MaxRetry = 50*time.Millisecond, 500*time.Millisecond
	}
	dev := lcdproc.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dev.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	})
	waitFor(t, "the connection to LCDd", dev.Connected)
	return dev
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func screenIs(want ...string) func([]string) bool {
	return func(rows []string) bool {
		for i, w := range want {
			if i >= len(rows) || strings.TrimRight(rows[i], " ") != strings.TrimRight(w, " ") {
				return false
			}
		}
		return true
	}
}

func ctx30(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The size comes from LCDd's answer to hello, not from the options.
func TestLCDdSizeFromHello(t *testing.T) {
	s := startLCDd(t, lcdd.Options{Rows: 2, Cols: 16})
	dev := runDev(t, s, lcdproc.Opts{Rows: 4, Cols: 20})
	if r, c := dev.Size(); r != 2 || c != 16 {
		t.Fatalf("Size = %dx%d, want LCDd's 2x16", r, c)
	}
}

// What Draw sends is what LCDd shows: quotes, backslashes and braces
// escaped, 1-based rows, and only the changed row sent again.
func TestLCDdDraw(t *testing.T) {
	s := startLCDd(t, lcdd.Options{Rows: 4, Cols: 20})
	dev := runDev(t, s, lcdproc.Opts{})
	ctx := ctx30(t)
	f := display.NewFrame(dev.Size())
	lines := []string{`say "hi" \o/ {x}`, `row two`, ``, `}{ "\" end`}
	f.SetLines(lines)
	if err := dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitScreen(ctx, "the frame", screenIs(lines...)); err != nil {
		t.Fatal(err)
	}
	before := dev.Stats()
	f.Set(1, 4, 'T') // "row Two"
	if err := dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitScreen(ctx, "the changed row", screenIs(lines[0], "row Two", "", lines[3])); err != nil {
		t.Fatal(err)
	}
	after := dev.Stats()
	if n := after.RowWrites - before.RowWrites; n != 1 {
		t.Errorf("%d rows sent for one changed cell, want 1", n)
	}
	if err := dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if n := dev.Stats().BytesOut - after.BytesOut; n != 0 {
		t.Errorf("an unchanged frame sent %d bytes", n)
	}
	for _, p := range []string{"alert", "background", "foreground"} {
		if err := dev.SetPriority(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.SetBacklight(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := dev.SetPriority(ctx, "urgent"); err == nil {
		t.Error("priority urgent accepted")
	}
	if err := dev.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if r := dev.Stats().Refused; r != 0 {
		t.Errorf("LCDd refused %d commands; its log:\n%s", r, s.Log())
	}
}

// Keys pressed on LCDd (typed into the curses window) arrive on Keys.
func TestLCDdKeys(t *testing.T) {
	s := startLCDd(t, lcdd.Options{})
	dev := runDev(t, s, lcdproc.Opts{Keys: []string{"1", "#", "Enter", "Up"}})
	ctx := ctx30(t)
	// client_add_key is answered before keys can arrive; a noop behind it
	// makes sure LCDd has the reservation.
	if err := dev.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "LCDd to show termd's screen (listen)", dev.Visible)
	if err := s.Type(ctx, "1#"); err != nil {
		t.Fatal(err)
	}
	if err := s.Press(ctx, "Enter", "Up"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 4 {
		select {
		case k := <-dev.Keys():
			got = append(got, k)
		case <-ctx.Done():
			t.Fatalf("keys %q, want 1 # Enter Up; LCDd's log:\n%s", got, s.Log())
		}
	}
	if strings.Join(got, " ") != "1 # Enter Up" {
		t.Errorf("keys %q", got)
	}
}

// LCDd restarting is a lost link: Dev reconnects and draws the frame again
// without being asked.
func TestLCDdRestart(t *testing.T) {
	s := startLCDd(t, lcdd.Options{})
	dev := runDev(t, s, lcdproc.Opts{})
	ctx := ctx30(t)
	f := display.NewFrame(dev.Size())
	f.SetLines([]string{"before the restart"})
	if err := dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitScreen(ctx, "the frame", screenIs("before the restart")); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second connection", func() bool { return dev.Stats().Connects >= 2 && dev.Connected() })
	if _, err := s.WaitScreen(ctx, "the frame redrawn", screenIs("before the restart")); err != nil {
		t.Fatal(err)
	}
	f.SetLines([]string{"after the restart"})
	if err := dev.Draw(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitScreen(ctx, "a new frame", screenIs("after the restart")); err != nil {
		t.Fatal(err)
	}
}
