package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestNotifyReachesTheSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	n := FromEnv()
	if !n.Enabled() {
		t.Fatal("not enabled with NOTIFY_SOCKET set")
	}
	for _, msg := range []string{"READY=1", "STATUS=online", "WATCHDOG=1"} {
		if err := n.Notify(msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		_ = ln.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, err := ln.Read(buf)
		if err != nil || string(buf[:k]) != msg {
			t.Fatalf("socket got %q (%v), want %q", buf[:k], err, msg)
		}
	}
}

func TestWithoutSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "")
	n := FromEnv()
	if n.Enabled() || n.Notify("READY=1") != nil || WatchdogInterval() != 0 {
		t.Fatal("without NOTIFY_SOCKET notify must be a silent no-op")
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone.sock"))
	if err := FromEnv().Notify("READY=1"); err == nil {
		t.Fatal("no error for a socket that does not exist")
	}
}

func TestWatchdogInterval(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	if got := WatchdogInterval(); got != 15*time.Second {
		t.Fatalf("interval %s, want 15s", got)
	}
	t.Setenv("WATCHDOG_PID", "1")
	if got := WatchdogInterval(); got != 0 {
		t.Fatalf("watchdog meant for another pid: %s", got)
	}
}
