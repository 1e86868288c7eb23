package lcdproc

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// A peer on a real loopback socket that answers hello and then does what
// LCDd would not: sends garbage, and later goes silent. termd keeps the
// first connection through the garbage and drops the silent one
// (no answer to its noop within two ping intervals), then reconnects.
func TestPeerGarbageThenSilence(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conns := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	dev := New(Opts{Address: l.Addr().String(), PingInterval: 200 * time.Millisecond,
		MinRetry: 20 * time.Millisecond, MaxRetry: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dev.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run = %v", err)
		}
	}()

	accept := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		select {
		case c := <-conns:
			t.Cleanup(func() { c.Close() })
			return c, bufio.NewReader(c)
		case <-time.After(20 * time.Second):
			t.Fatal("no connection")
		}
		return nil, nil
	}
	c, r := accept()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if line, _ := r.ReadString('\n'); line != "hello\n" {
		t.Fatalf("first line %q, want hello", line)
	}
	io.WriteString(c, "success\nconnect LCDproc 0.5.9 protocol 0.3 lcd wid 16 hgt 2 cellwid 5 cellhgt 8\n")
	// The setup: client_set, screen_add, screen_set, two widgets, and the
	// two rows.
	var setup []string
	for len(setup) < 7 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", setup, err)
		}
		setup = append(setup, strings.TrimSuffix(line, "\n"))
	}
	want := []string{`client_set -name "termd"`, "screen_add termd",
		`screen_set termd -name "termd" -priority foreground -heartbeat off -backlight on`,
		"widget_add termd r1 string", "widget_add termd r2 string",
		`widget_set termd r1 1 1 ""`, `widget_set termd r2 1 2 ""`}
	if strings.Join(setup, "\n") != strings.Join(want, "\n") {
		t.Fatalf("setup:\n%s\nwant:\n%s", strings.Join(setup, "\n"), strings.Join(want, "\n"))
	}
	// Garbage, an error and a key: the connection stays, the key arrives.
	io.WriteString(c, "fnord\n\nhuh? Invalid command \"x\"\nsuccess\nkey Enter\n")
	select {
	case k := <-dev.Keys():
		if k != "Enter" {
			t.Fatalf("key %q", k)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no key")
	}
	if st := dev.Stats(); st.Refused != 1 || st.Connects != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Now silence: termd pings, nobody answers; it must give up on this
	// connection and dial again.
	if line, _ := r.ReadString('\n'); line != "noop\n" {
		t.Fatalf("want a noop ping, got %q", line)
	}
	c2, r2 := accept()
	c2.SetDeadline(time.Now().Add(20 * time.Second))
	if line, _ := r2.ReadString('\n'); line != "hello\n" {
		t.Fatalf("reconnect: first line %q", line)
	}
}
