// Package tmuxtest runs a program in a real terminal for a test: a
// detached tmux window on a tmux server of its own, that the test types
// into and reads the screen of.
package tmuxtest

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"termlink/testrig/needtool"
)

// Window is a tmux window running one shell command.
type Window struct {
	t    testing.TB
	tmux string
	sock string
}

// Start runs the shell command line cmd in a cols x rows window. After cmd
// exits the window shows EXIT=<its status> (and stays until the test
// ends: a wait never finds the tmux server gone). Without
// tmux the test is skipped (failed under CI_REQUIRE_TOOLS=1). The tmux
// server is killed when the test ends.
func Start(t testing.TB, cols, rows int, cmd string) *Window {
	t.Helper()
	w := &Window{
		t:    t,
		tmux: needtool.Path(t, "tmux", "apt-get install tmux; the test drives a program in a real terminal"),
		sock: filepath.Join(t.TempDir(), "tmux.sock"),
	}
	w.Run("new-session", "-d", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), cmd+"; echo EXIT=$?; sleep 86400")
	t.Cleanup(w.stop)
	return w
}

// stop ends the window's program and its tmux server, each bounded in
// time: the pane's process group is killed first (a program that ignores
// the hangup, e.g. under qemu-user, once held kill-server for minutes),
// then the server, and a server that still does not go is killed.
func (w *Window) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := func(format string) []int {
		out, _ := exec.CommandContext(ctx, w.tmux, "-S", w.sock, "display-message", "-p", format).Output()
		var pids []int
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	server := ids("#{pid}")
	for _, pid := range ids("#{pane_pid}") {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // the pane leads its own session and group
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if exec.CommandContext(ctx, w.tmux, "-S", w.sock, "kill-server").Run() != nil {
		for _, pid := range server {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Run runs a tmux command (send-keys, capture-pane, ...) on the window's
// server and returns its output; a failure fails the test.
func (w *Window) Run(args ...string) string {
	w.t.Helper()
	out, err := exec.Command(w.tmux, append([]string{"-S", w.sock}, args...)...).CombinedOutput()
	if err != nil {
		w.t.Fatalf("tmux %v: %v %s", args, err, out)
	}
	return string(out)
}

// Type types s, literally.
func (w *Window) Type(s string) {
	w.t.Helper()
	w.Run("send-keys", "-l", s)
}

// Keys presses keys by tmux name (Enter, C-d, Up).
func (w *Window) Keys(keys ...string) {
	w.t.Helper()
	w.Run(append([]string{"send-keys"}, keys...)...)
}

// Screen returns the text the window shows.
func (w *Window) Screen() string {
	w.t.Helper()
	return w.Run("capture-pane", "-p")
}

// WaitFor waits up to timeout until the screen shows want, and returns the
// screen; at the timeout it fails the test with the screen.
func (w *Window) WaitFor(want string, timeout time.Duration) string {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := w.Screen()
		if strings.Contains(s, want) {
			return s
		}
		if strings.Contains(s, "EXIT=") && !strings.Contains(want, "EXIT=") {
			// The program ended without showing want: say so now, with
			// its last screen (TestTermdServerAuto, stress run 26, once
			// waited a minute and then found no tmux server to ask).
			w.t.Fatalf("the program exited before the screen showed %q:\n%s", want, s)
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("the screen never showed %q in %v:\n%s", want, timeout, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
