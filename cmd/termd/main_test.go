package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"termlink/internal/testwait"
	"termlink/server/servertest"
	"termlink/testrig/childtest"
	"termlink/testrig/tmuxtest"
)

// termd is the binary built for the test; termdRun is the shell command
// that runs it (under the emulator when the tests run under one).
var termd, termdRun string

// binDir holds the binaries the tests build (termd, and buildTermd's).
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "termd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir, termd = dir, filepath.Join(dir, "termd")
	// With termd's build tags, as make pi builds it (no HTTP/2).
	if out, err := exec.Command("go", "build", "-tags", termdTags, "-o", termd, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building termd: %v\n%s", err, out)
		os.Exit(1)
	}
	termdRun = termd
	if emu := childtest.Emulator(); emu != "" {
		termdRun = emu + " " + termd
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// termd on the sim board (console on its own terminal) in tmux, under a
// fake systemd: a message typed is answered on the screen; READY, STATUS
// and STOPPING reach NOTIFY_SOCKET; SIGTERM leaves "offline: stopped" and
// exit status 0; the peer id is kept in the state dir.
func TestTermdSimBoardUnderSystemd(t *testing.T) {
	t.Parallel()
	addr := servertest.Start(t, nil).Addr
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	// Every notification is kept (a slow machine, or qemu, sends many
	// WATCHDOG=1 before STOPPING=1; a bounded channel would fill and stop
	// the reader).
	var notesMu sync.Mutex
	var notes []string
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		buf := make([]byte, 512)
		for {
			n, err := ln.Read(buf)
			if err != nil {
				return
			}
			notesMu.Lock()
			notes = append(notes, string(buf[:n]))
			notesMu.Unlock()
		}
	}()
	defer func() { ln.Close(); <-readerDone }()
	// waitNote waits until systemd got want.
	waitNote := func(want string) {
		t.Helper()
		testwait.UntilOK(t, "systemd to get "+want, func() error {
			notesMu.Lock()
			all := strings.Join(notes, "|")
			notesMu.Unlock()
			if strings.Contains(all, want) {
				return nil
			}
			return fmt.Errorf("it got %s", all)
		})
	}
	state := filepath.Join(dir, "state")
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("NOTIFY_SOCKET=%s WATCHDOG_USEC=200000 WATCHDOG_PID= %s --server %s --board sim --state-dir %s",
		sock, termdRun, addr, state))
	waitScreen("online")
	tm("send-keys", "-l", "hello termd")
	tm("send-keys", "Enter")
	waitScreen("You said: hello termd")

	id, err := os.ReadFile(filepath.Join(state, "peer_id"))
	if err != nil || !strings.HasPrefix(string(id), "termd-") {
		t.Fatalf("peer id not kept: %q %v", id, err)
	}
	// The watchdog is pinged while running (every WATCHDOG_USEC/2).
	waitNote("WATCHDOG=1")
	// This test's termd: other tests run the same binary at the same time.
	out, err := exec.Command("pgrep", "-f", "^"+regexp.QuoteMeta(termdRun)+" .*--state-dir "+regexp.QuoteMeta(state)+"$").Output()
	if err != nil {
		t.Fatalf("termd not running: %v", err)
	}
	var pid int
	fmt.Sscan(strings.TrimSpace(string(out)), &pid)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s := waitScreen("EXIT=0")
	if !strings.Contains(s, "offline: stopped") {
		t.Fatalf("after SIGTERM the screen does not say offline:\n%s", s)
	}
	for _, want := range []string{"READY=1", "STATUS=online", "WATCHDOG=1", "STOPPING=1"} {
		waitNote(want)
	}
}

// termdInTmux runs cmd (termd on the sim board) in an 80x20 tmux window;
// tm runs a tmux command on it, waitScreen waits until the window shows
// want. After termd exits the window shows EXIT=<status>.
func termdInTmux(t *testing.T, cmd string) (tm func(args ...string) string, waitScreen func(want string) string) {
	t.Helper()
	w := tmuxtest.Start(t, 80, 20, cmd)
	return w.Run, func(want string) string {
		t.Helper()
		return w.WaitFor(want, testwait.Deadline)
	}
}

// A state dir that is a file (nothing can be stored): termd starts
// anyway, its screen says the disk is in trouble, and a message typed is
// answered.
func TestTermdUnusableStateDir(t *testing.T) {
	t.Parallel()
	addr := servertest.Start(t, nil).Addr
	state := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(state, []byte("a file where the state dir should be\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s --server %s --board sim --state-dir %s", termdRun, addr, state))
	waitScreen("disk error")
	waitScreen("online")
	tm("send-keys", "-l", "still here")
	tm("send-keys", "Enter")
	s := waitScreen("You said: still here")
	if !strings.Contains(s, "messages in memory") {
		t.Errorf("the status line does not say messages are kept in memory:\n%s", s)
	}
	tm("send-keys", "C-d")
	waitScreen("EXIT=0")
}

func TestFlagErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte(`{"name":"bad","display":{"kind":"hd44780-i2c","rows":4,"cols":20,"bus":"1","address":"0x50"}}`), 0o600)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--board", "sim"}, "--server is required"},
		{[]string{"--server", "ftp://x", "--board", "sim"}, "scheme must be ws, wss, http or https"},
		{[]string{"--server", "ws://127.0.0.1:1", "--board", "no-such-board"}, "no-such-board"},
		{[]string{"--server", "ws://127.0.0.1:1", "--board-file", bad}, "display.address"},
		{[]string{"--server", "ws://127.0.0.1:1", "--peer-id", "a:b", "--state-dir", t.TempDir()}, `--peer-id "a:b"`},
		{[]string{"--server", "ws://127.0.0.1:1", "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"--server", "ws://127.0.0.1:1", "--tag", "lobby"}, `"lobby": want key=value`},
		{[]string{"--server", "ws://127.0.0.1:1", "--tag", "a=1", "--tag", "a=2"}, "tag a is given twice"},
		{[]string{"--server", "ws://127.0.0.1:1", "--idle-seconds", "-1"}, "must not be negative"},
	}
	for _, tt := range tests {
		out, err := childtest.Command(termd, tt.args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("termd %v: %v, want exit 1\n%s", tt.args, err, out)
		}
		if !strings.Contains(string(out), tt.want) {
			t.Errorf("termd %v said %q, want it to mention %q", tt.args, out, tt.want)
		}
	}
}
