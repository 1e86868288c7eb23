//go:build linux

package console

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"termlink/testrig/needtool"
	"testing"
	"time"
)

// socatPair is a virtual null-modem cable: two PTYs joined by socat, with
// stable symlinks. Killing socat makes both ends disappear, like a USB
// serial adapter being unplugged.
type socatPair struct {
	t    *testing.T
	a, b string // symlinks to the two PTYs
	cmd  *exec.Cmd
}

func newSocatPair(t *testing.T) *socatPair {
	t.Helper()
	needtool.Path(t, "socat", "a PTY pair for the serial console; apt-get install socat")
	dir := t.TempDir()
	p := &socatPair{t: t, a: filepath.Join(dir, "a"), b: filepath.Join(dir, "b")}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *socatPair) start() {
	p.t.Helper()
	p.cmd = exec.Command("socat", "-d", "-d",
		"pty,raw,echo=0,link="+p.a, "pty,raw,echo=0,link="+p.b)
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start socat: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, errA := os.Stat(p.a)
		_, errB := os.Stat(p.b)
		if errA == nil && errB == nil {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("socat did not create %s and %s", p.a, p.b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop kills socat and makes sure the device paths are gone.
func (p *socatPair) stop() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
	os.Remove(p.a)
	os.Remove(p.b)
}

// peer opens side a, the terminal emulator's end of the cable.
func (p *socatPair) peer() *os.File {
	p.t.Helper()
	f, err := os.OpenFile(p.a, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		p.t.Fatalf("open %s: %v", p.a, err)
	}
	p.t.Cleanup(func() { f.Close() })
	return f
}

func readFull(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	type deadliner interface{ SetReadDeadline(time.Time) error }
	if d, ok := r.(deadliner); ok {
		d.SetReadDeadline(time.Now().Add(5 * time.Second))
		defer d.SetReadDeadline(time.Time{})
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatalf("read %d bytes: %v (got %q)", n, err, buf)
	}
	return buf
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fastSerial() SerialOpts {
	return SerialOpts{
		Baud: 115200, ReadPoll: 20 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}
}

func TestSerialReopensAfterUnplug(t *testing.T) {
	cable := newSocatPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := OpenSerialOpts(ctx, cable.b, fastSerial())
	if err != nil {
		t.Fatalf("OpenSerial: %v", err)
	}
	defer s.Close()
	if !s.Connected() || s.Path() != cable.b {
		t.Fatalf("Connected() = %v, Path() = %q", s.Connected(), s.Path())
	}

	peer := cable.peer()
	peer.Write([]byte("ping"))
	if got := readFull(t, s, 4); string(got) != "ping" {
		t.Fatalf("read %q", got)
	}
	if _, err := s.Write([]byte("pong")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if got := readFull(t, peer, 4); string(got) != "pong" {
		t.Fatalf("peer read %q", got)
	}

	// Unplug: a blocked Read notices, the port is closed and polled for.
	readErr := make(chan error, 1)
	readData := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 16)
		n, err := s.Read(buf)
		readData <- buf[:n]
		readErr <- err
	}()
	cable.stop()
	waitUntil(t, "the port to be seen gone", func() bool { return !s.Connected() })
	if s.Err() == nil {
		t.Error("Err() = nil while disconnected")
	}
	if _, err := s.Write([]byte("lost")); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Write while unplugged = %v, want ErrDisconnected", err)
	}

	// Plug back in: the waiting Read gets the new data.
	cable.start()
	select {
	case <-s.Reopened():
	case <-time.After(5 * time.Second):
		t.Fatal("not reopened")
	}
	if !s.Connected() || s.Err() != nil {
		t.Fatalf("Connected() = %v, Err() = %v after reopen", s.Connected(), s.Err())
	}
	peer2 := cable.peer()
	peer2.Write([]byte("again"))
	select {
	case got := <-readData:
		if err := <-readErr; err != nil || !bytes.HasPrefix([]byte("again"), got) || len(got) == 0 {
			t.Fatalf("Read across the unplug = %q, %v", got, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Read waiting across the unplug never returned")
	}
	if _, err := s.Write([]byte("back")); err != nil {
		t.Fatalf("Write after reopen: %v", err)
	}
	if got := readFull(t, peer2, 4); string(got) != "back" {
		t.Fatalf("peer read %q", got)
	}
}

func TestSerialDeadlinesAndClose(t *testing.T) {
	cable := newSocatPair(t)
	s, err := OpenSerialOpts(context.Background(), cable.b, fastSerial())
	if err != nil {
		t.Fatalf("OpenSerial: %v", err)
	}
	// Read deadline while connected and no data.
	s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("deadline took %v", d)
	}
	// Read deadline while disconnected.
	cable.stop()
	waitUntil(t, "disconnect", func() bool { return !s.Connected() })
	s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read while unplugged = %v, want deadline exceeded", err)
	}
	// A deadline set from another goroutine wakes a waiting Read.
	s.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(30 * time.Millisecond)
	s.SetReadDeadline(time.Now())
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("woken Read = %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("SetReadDeadline did not wake the Read")
	}
	// Close ends a waiting Read.
	s.SetReadDeadline(time.Time{})
	go func() {
		_, err := s.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(30 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("Read after Close = %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not end the Read")
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Write after Close = %v", err)
	}
	s.Close()
}

func TestSerialContextCloses(t *testing.T) {
	cable := newSocatPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := OpenSerialOpts(ctx, cable.b, fastSerial())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitUntil(t, "close on cancel", func() bool {
		_, err := s.Write([]byte("x"))
		return errors.Is(err, os.ErrClosed)
	})
	s.Close()
}

func TestOpenSerialErrors(t *testing.T) {
	ctx := context.Background()
	_, err := OpenSerial(ctx, filepath.Join(t.TempDir(), "ttyUSB9"), 115200)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing port: %v, want fs.ErrNotExist", err)
	}
	if _, err := OpenSerial(ctx, "/dev/null", 0); err == nil {
		t.Error("baud 0 accepted")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	if _, err := OpenSerial(ctx, f, 9600); err == nil {
		t.Error("a regular file opened as a serial port")
	}
}

// The whole stack: a Console on a Serial on a PTY cable, with the cable
// unplugged and plugged back in.
func TestConsoleOverSerialReconnect(t *testing.T) {
	cable := newSocatPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := OpenSerialOpts(ctx, cable.b, fastSerial())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const W, H = 40, 10
	v := newVT(W, H)
	peer := cable.peer()
	go v.pump(peer)
	c := New(s, Opts{Width: W, Height: H, Logger: slog.New(slog.DiscardHandler)})
	defer c.Close()
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()

	c.SetStatus("connected")
	v.waitFor(t, "status", func() bool { return v.row(H-1) == "connected" })
	peer.Write([]byte("hi\r"))
	select {
	case ev := <-c.Events():
		if ev.Kind != Submit || ev.Text != "hi" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no submit")
	}

	cable.stop()
	waitUntil(t, "disconnect", func() bool { return !s.Connected() })
	c.SetStatus("still here") // drawn while unplugged: must not block
	c.AddMessage(RoleAssistant, "queued while unplugged")

	cable.start()
	v2 := newVT(W, H) // a fresh terminal on the new cable
	peer2 := cable.peer()
	go v2.pump(peer2)
	v2.waitFor(t, "the redraw after reconnect", func() bool {
		return v2.row(H-1) == "still here" && v2.row(H-2) == "queued while unplugged"
	})
	peer2.Write([]byte("again\r"))
	select {
	case ev := <-c.Events():
		if ev.Kind != Submit || ev.Text != "again" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no submit after reconnect")
	}
	cancel()
	select {
	case <-runErr:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop")
	}
	if err := c.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
}
