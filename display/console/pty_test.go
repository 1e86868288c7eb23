//go:build linux

package console

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// ptyPair opens a PTY; the Console gets the terminal side (a TTY in raw
// mode, as OpenTTY would give), the test plays the user on the master side.
func ptyPair(t *testing.T, cols, rows int) (master, term *os.File) {
	t.Helper()
	master, term, err := pty.Open()
	if err != nil {
		t.Skipf("no PTY: %v", err)
	}
	if err := pty.Setsize(master, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		t.Fatalf("Setsize: %v", err)
	}
	t.Cleanup(func() {
		term.Close()
		master.Close()
	})
	return master, term
}

func lflag(t *testing.T, f *os.File) uint32 {
	t.Helper()
	var l uint32
	err := control(f, func(fd int) error {
		tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err == nil {
			l = uint32(tio.Lflag)
		}
		return err
	})
	if err != nil {
		t.Fatalf("TCGETS: %v", err)
	}
	return l
}

func TestConsoleOverPTY(t *testing.T) {
	master, term := ptyPair(t, 60, 20)
	if lflag(t, term)&unix.ICANON == 0 {
		t.Fatal("PTY starts in raw mode already; the test would prove nothing")
	}
	tty, err := NewTTY(term)
	if err != nil {
		t.Fatalf("NewTTY: %v", err)
	}
	if lflag(t, term)&(unix.ICANON|unix.ECHO|unix.ISIG) != 0 {
		t.Fatal("NewTTY did not make the terminal raw")
	}
	if cols, rows, err := tty.Size(); err != nil || cols != 60 || rows != 20 {
		t.Fatalf("Size() = %d, %d, %v", cols, rows, err)
	}

	v := newVT(60, 20)
	go v.pump(master)
	c := New(tty, Opts{})
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	defer cancel()

	c.SetStatus("connected")
	c.AddMessage(RoleAssistant, "welcome")
	v.waitFor(t, "status on row 19", func() bool { return v.row(19) == "connected" })
	v.waitFor(t, "message on row 18", func() bool { return v.row(18) == "welcome" })

	next := func() Event {
		t.Helper()
		select {
		case ev := <-c.Events():
			return ev
		case <-time.After(5 * time.Second):
			t.Fatalf("no event; screen:\n%s", v.screen())
		}
		return Event{}
	}
	type1 := func(s string) {
		t.Helper()
		if _, err := master.Write([]byte(s)); err != nil {
			t.Fatalf("write to PTY: %v", err)
		}
	}

	// CR reaches the console as CR (no ICRNL), Ctrl-C as a byte (no ISIG).
	type1("hellp\x7fo w\xc3")
	type1("\xb6rld\x1b[D\x1b[C\r")
	if ev := next(); ev.Kind != Submit || ev.Text != "hello wörld" {
		t.Fatalf("event %+v", ev)
	}
	type1("\x03")
	if ev := next(); ev.Kind != Interrupt {
		t.Fatalf("event %+v, want Interrupt", ev)
	}
	type1("typed")
	v.waitFor(t, "echo on the input row", func() bool { return v.row(20) == "> typed" })

	// A window resize (SIGWINCH) is picked up through TIOCGWINSZ.
	if err := pty.Setsize(master, &pty.Winsize{Cols: 50, Rows: 15}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Kind != Resize || ev.Width != 50 || ev.Height != 15 {
		t.Fatalf("event %+v, want Resize 50x15", ev)
	}

	// Cancelling Run stops its reader through the read deadline: the next
	// byte typed is left for whoever reads the terminal next.
	cancel()
	select {
	case err := <-runErr:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not stop")
	}
	type1("z")
	if err := term.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatalf("SetReadDeadline: %v", err)
	}
	buf := make([]byte, 8)
	n, err := term.Read(buf)
	if err != nil || string(buf[:n]) != "z" {
		t.Fatalf("after Run: read %q, %v (a leftover reader took it?)", buf[:n], err)
	}
	term.SetReadDeadline(time.Time{})

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := tty.Close(); err != nil {
		t.Fatalf("TTY Close: %v", err)
	}
	if lflag(t, term)&unix.ICANON == 0 {
		t.Fatal("TTY.Close did not restore the terminal mode")
	}
}

func TestMakeRawRestore(t *testing.T) {
	_, term := ptyPair(t, 80, 24)
	var st *State
	err := control(term, func(fd int) error {
		if !IsTerminal(fd) {
			t.Error("IsTerminal(pty) = false")
		}
		var err error
		st, err = MakeRaw(fd)
		return err
	})
	if err != nil {
		t.Fatalf("MakeRaw: %v", err)
	}
	if lflag(t, term)&unix.ICANON != 0 {
		t.Fatal("still canonical after MakeRaw")
	}
	if err := control(term, func(fd int) error { return Restore(fd, st) }); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if lflag(t, term)&unix.ICANON == 0 {
		t.Fatal("not canonical after Restore")
	}
	if cols, rows, err := TerminalSize(term); err != nil || cols != 80 || rows != 24 {
		t.Fatalf("TerminalSize = %d, %d, %v", cols, rows, err)
	}

	f, err := os.CreateTemp(t.TempDir(), "notatty")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := MakeRaw(int(f.Fd())); err == nil {
		t.Error("MakeRaw on a regular file succeeded")
	}
	if IsTerminal(int(f.Fd())) {
		t.Error("IsTerminal(regular file) = true")
	}
	if _, _, err := TerminalSize(f); err == nil {
		t.Error("TerminalSize on a regular file succeeded")
	}
	if _, err := NewTTY(f); err == nil {
		t.Error("NewTTY on a regular file succeeded")
	}
}
