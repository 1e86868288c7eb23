//go:build linux

package console

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// runEmulator starts a terminal program (picocom, minicom) in a PTY of
// cols x rows on side a of the cable; the test sees its screen in a vt and
// types through it.
func runEmulator(t *testing.T, cols, rows int, name string, args ...string) (*vt, *os.File) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed", name)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "TERM=vt100", "LANG=C.UTF-8", "HOME="+t.TempDir())
	master, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	v := newVT(cols, rows)
	v.respond = func(b []byte) { go master.Write(b) }
	go v.pump(master)
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		master.Close()
	})
	return v, master
}

// waitResize waits for the Resize that answers the size query, pressing
// Ctrl-L (redraw) when the emulator was not listening yet.
func waitResize(t *testing.T, c *Console, v *vt, keys *os.File) Event {
	t.Helper()
	for range 5 {
		select {
		case ev := <-c.Events():
			if ev.Kind != Resize {
				t.Fatalf("event %+v, want Resize", ev)
			}
			return ev
		case <-time.After(time.Second):
			keys.Write([]byte("\x0c"))
		}
	}
	t.Fatalf("no answer to the size query; screen:\n%s", v.screen())
	return Event{}
}

// The Console behind picocom: picocom passes the bytes through, so the
// screen is the Console's, the size query is answered by the outer
// terminal, and keys arrive as typed.
func TestConsoleUnderPicocom(t *testing.T) {
	cable := newSocatPair(t)
	v, keys := runEmulator(t, 60, 16, "picocom", "-q", "-b", "115200", cable.a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := OpenSerialOpts(ctx, cable.b, fastSerial())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := New(s, Opts{ProbeTimeout: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer c.Close()
	go c.Run(ctx)

	// If picocom opened the port after the first size query (and flushed
	// it), a key press makes the Console ask again, as a user would.
	ev := waitResize(t, c, v, keys)
	if ev.Width != 60 || ev.Height != 16 {
		t.Fatalf("event %+v, want Resize 60x16 (the size query through picocom)", ev)
	}
	c.SetStatus("connected")
	c.AddMessage(RoleAssistant, "hello from the console, wrapped to fit the sixty columns of this picocom window")
	v.waitFor(t, "status line", func() bool { return v.row(15) == "connected" })
	v.waitFor(t, "message", func() bool {
		return v.row(13) == "hello from the console, wrapped to fit the sixty columns of" && v.row(14) == "this picocom window"
	})
	keys.Write([]byte("h\xc3\xa9llo wrld\x1b[D\x1b[D\x1b[Do\r"))
	select {
	case ev := <-c.Events():
		if ev.Kind != Submit || ev.Text != "héllo world" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no submit through picocom; screen:\n%s", v.screen())
	}
}

// The Console behind minicom, which emulates a VT102 itself and redraws
// through curses on its own terminal (with its status line at the bottom).
func TestConsoleUnderMinicom(t *testing.T) {
	cable := newSocatPair(t)
	v, keys := runEmulator(t, 60, 16, "minicom", "-o", "-c", "off", "-b", "115200", "-D", cable.a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := OpenSerialOpts(ctx, cable.b, fastSerial())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := New(s, Opts{ProbeTimeout: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer c.Close()
	go c.Run(ctx)

	ev := waitResize(t, c, v, keys)
	w, h := ev.Width, ev.Height
	if w != 60 || h < 14 || h > 16 {
		t.Fatalf("minicom answered %dx%d for a 60x16 window", w, h)
	}
	c.SetStatus("connected")
	c.AddMessage(RoleUser, "question")
	c.AddMessage(RoleAssistant, "answer")
	v.waitFor(t, "status and messages", func() bool {
		return v.find("connected") != 0 && v.find("> question") != 0 && v.find("answer") != 0 &&
			v.find("> question") < v.find("answer") && v.find("answer") < v.find("connected")
	})
	keys.Write([]byte("typed\r"))
	select {
	case ev := <-c.Events():
		if ev.Kind != Submit || ev.Text != "typed" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no submit through minicom; screen:\n%s", v.screen())
	}
	if r := v.find("connected"); !strings.HasPrefix(v.row(r), "connected") {
		t.Errorf("status row %q", v.row(r))
	}
}
