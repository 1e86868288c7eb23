package demo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The demo driven like a person in a real terminal: tmux runs
// `termrig demo`, send-keys types, capture-pane reads the drawn LCD box.

func buildTermrig(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "termrig")
	if out, err := exec.Command("go", "build", "-o", bin, "termlink/cmd/termrig").CombinedOutput(); err != nil {
		t.Fatalf("building termrig: %v\n%s", err, out)
	}
	return bin
}

type tmux struct {
	t      *testing.T
	socket string
}

func startTmux(t *testing.T, command string) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (CI installs it): the demo test drives a real terminal through it")
	}
	tm := &tmux{t: t, socket: filepath.Join(t.TempDir(), "tmux.sock")}
	tm.run("new-session", "-d", "-x", "100", "-y", "30", command+"; echo EXIT=$?; sleep 60")
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.socket, "kill-server").Run() })
	return tm
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.socket}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (tm *tmux) screen() string { return tm.run("capture-pane", "-p") }

// waitFor waits until the screen contains every want.
func (tm *tmux) waitFor(want ...string) string {
	tm.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := tm.screen()
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(s, w)
		}
		if ok {
			return s
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the terminal never showed %q; it shows:\n%s", want, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDemoLCD(t *testing.T) {
	bin := buildTermrig(t)
	ws := t.TempDir()
	tm := startTmux(t, bin+" demo --workspace "+ws)
	tm.waitFor("┌────────────────────┐", "ok│")
	tm.run("send-keys", "-l", "hello from tmux")
	tm.waitFor("hello from tmux_")
	tm.run("send-keys", "Enter")
	s := tm.waitFor("│>hello from tmux", "│You said: hello from│", "│tmux")
	if !strings.Contains(s, "ok│") {
		t.Fatalf("link state missing:\n%s", s)
	}
	// The conversation is in the server's session log.
	log, err := os.ReadFile(filepath.Join(ws, "server", "sessions", "terminal-dev:local:demo-device.jsonl"))
	if err != nil || !strings.Contains(string(log), `"content":"You said: hello from tmux"`) {
		t.Fatalf("session log: %v\n%s", err, log)
	}
	// Page back and forth.
	tm.run("send-keys", "-l", "one two three four five six seven eight nine ten eleven")
	tm.run("send-keys", "Enter")
	tm.waitFor("│eleven")
	tm.run("send-keys", "Up")
	tm.waitFor("│five six seven eight")
	tm.run("send-keys", "Down")
	tm.waitFor("│eleven")
	// Ctrl-C: clean exit, the glass says offline.
	tm.run("send-keys", "C-c")
	tm.waitFor("offline: stopped", "EXIT=0")
}

func TestDemoKeypad(t *testing.T) {
	bin := buildTermrig(t)
	tm := startTmux(t, bin+" demo --keypad")
	tm.waitFor("ok│")
	// 44 = h, 444 = i (a pause commits the letter), # sends.
	tm.run("send-keys", "44")
	time.Sleep(1200 * time.Millisecond)
	tm.run("send-keys", "444")
	time.Sleep(1200 * time.Millisecond)
	tm.waitFor("hi_")
	tm.run("send-keys", "#")
	tm.waitFor("You said: hi")
	tm.run("send-keys", "C-c")
	tm.waitFor("EXIT=0")
}

func TestDemoConsole(t *testing.T) {
	bin := buildTermrig(t)
	tm := startTmux(t, bin+" demo --console")
	tm.waitFor("online")
	tm.run("send-keys", "-l", "hi console")
	tm.run("send-keys", "Enter")
	tm.waitFor("You said: hi console")
	tm.run("send-keys", "C-d")
	tm.waitFor("EXIT=0")
}
