package demo_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"termlink/internal/testwait"
)

// The demo driven like a person in a real terminal: tmux runs
// `termrig demo`, send-keys types, capture-pane reads the drawn LCD box.

// termrig is built once for the tests of this package (each test runs
// its own demo: its own tmux server, workspace and ports).
var termrig struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if termrig.dir != "" {
		os.RemoveAll(termrig.dir)
	}
	os.Exit(code)
}

func buildTermrig(t *testing.T) string {
	t.Helper()
	termrig.once.Do(func() {
		termrig.dir, termrig.err = os.MkdirTemp("", "demo-test-")
		if termrig.err == nil {
			termrig.bin, termrig.err = buildIn(termrig.dir, "termlink/cmd/termrig")
		}
	})
	if termrig.err != nil {
		t.Fatal(termrig.err)
	}
	return termrig.bin
}

// build builds pkg into dir and returns the binary's path.
func build(t *testing.T, dir, pkg string) string {
	t.Helper()
	bin, err := buildIn(dir, pkg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func buildIn(dir, pkg string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

type tmux struct {
	t      *testing.T
	socket string
}

func startTmux(t *testing.T, command string) *tmux {
	t.Helper()
	return startTmuxSize(t, 100, 30, command)
}

// startTmuxSize runs command in a cols x rows tmux window.
func startTmuxSize(t *testing.T, cols, rows int, command string) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI_REQUIRE_TOOLS") == "1" {
			t.Fatal("tmux is not installed and CI_REQUIRE_TOOLS=1")
		}
		t.Skip("tmux is not installed (CI installs it): the demo test drives a real terminal through it")
	}
	tm := &tmux{t: t, socket: filepath.Join(t.TempDir(), "tmux.sock")}
	tm.run("new-session", "-d", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), command+"; echo EXIT=$?; sleep 60")
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

// scrolled is how many lines have scrolled off the top of the window.
func (tm *tmux) scrolled() int {
	n, err := strconv.Atoi(strings.TrimSpace(tm.run("display-message", "-p", "#{history_size}")))
	if err != nil {
		tm.t.Fatal(err)
	}
	return n
}

// waitFor waits until the screen contains every want.
func (tm *tmux) waitFor(want ...string) string {
	tm.t.Helper()
	var s string
	testwait.UntilOK(tm.t, fmt.Sprintf("the terminal to show %q", want), func() error {
		s = tm.screen()
		for _, w := range want {
			if !strings.Contains(s, w) {
				return fmt.Errorf("it shows:\n%s", s)
			}
		}
		return nil
	})
	return s
}

func TestDemoLCD(t *testing.T) {
	t.Parallel()
	bin := buildTermrig(t)
	ws := t.TempDir()
	tm := startTmux(t, bin+" demo --stream=false --workspace "+ws)
	tm.waitFor("┌────────────────────┐", "ok│")
	tm.run("send-keys", "-l", "hello from tmux")
	tm.waitFor("hello from tmux_")
	tm.run("send-keys", "Enter")
	s := tm.waitFor("│>hello from tmux", "│You said: hello from│", "│tmux")
	if !strings.Contains(s, "ok│") {
		t.Fatalf("link state missing:\n%s", s)
	}
	// The conversation is in the server's session log (written behind:
	// at the server's next checkpoint, within a second).
	testwait.UntilOK(t, "the reply in the server's session log", func() error {
		log, err := os.ReadFile(filepath.Join(ws, "server", "sessions", "terminal-dev:local:demo-device.jsonl"))
		if err == nil && !strings.Contains(string(log), `"content":"You said: hello from tmux"`) {
			err = fmt.Errorf("it holds:\n%s", log)
		}
		return err
	})
	// A long answer opens at its first line, '+' saying more is below;
	// page back and forth.
	tm.run("send-keys", "-l", "one two three four five six seven eight nine ten eleven")
	tm.run("send-keys", "Enter")
	tm.waitFor("│You said: one two", "│seven eight nine ten│", "+ok│")
	tm.run("send-keys", "Down")
	tm.waitFor("│eleven", " ok│")
	tm.run("send-keys", "Up")
	tm.waitFor("│five six seven eight")
	tm.run("send-keys", "Down")
	tm.waitFor("│eleven")
	// Ctrl-C: clean exit, the glass says offline.
	tm.run("send-keys", "C-c")
	tm.waitFor("offline: stopped", "EXIT=0")
}

// The demo streams by default: the echo agent writes word by word and
// the glass shows the answer growing, its newest line in view, before the
// final reply lands in place (no jump back to the first line); Up pages
// back to its start.
func TestDemoStreams(t *testing.T) {
	t.Parallel()
	bin := buildTermrig(t)
	tm := startTmux(t, bin+" demo")
	tm.waitFor("agent  echo (built in, streaming)", "ok│")
	// 40 words at 150 ms a word: six seconds of answer being written.
	var words []string
	for i := range 40 {
		words = append(words, fmt.Sprintf("w%d", i))
	}
	tm.run("send-keys", "-l", strings.Join(words, " "))
	tm.run("send-keys", "Enter")
	// The start of the answer, with the mark that more is coming.
	tm.waitFor("│You", "█", "writing...")
	// The final reply lands where the stream was: its end in view, the
	// mark gone, no jump back to "You said".
	var s string
	testwait.UntilOK(t, "the answer finished", func() error {
		if s = tm.screen(); !strings.Contains(s, "writing...") && strings.Contains(s, " ok│") {
			return nil
		}
		return fmt.Errorf("the terminal shows:\n%s", s)
	})
	if strings.Contains(s, "█") || strings.Contains(s, "You said") || !strings.Contains(s, "w39") {
		t.Fatalf("the final answer should show its end, where the stream was:\n%s", s)
	}
	// Paging back reaches the answer's first line (before the sent
	// message above it).
	for i := 0; !strings.Contains(tm.screen(), "│You said: w0 w1"); i++ {
		if i == 15 {
			t.Fatalf("paging up never showed the answer's start:\n%s", tm.screen())
		}
		before := tm.screen()
		tm.run("send-keys", "Up")
		// One page at a time: the next Up after this one is drawn.
		testwait.Until(t, "the page before", func() bool { return tm.screen() != before })
	}
	tm.run("send-keys", "C-c")
	tm.waitFor("EXIT=0")
}

func TestDemoKeypad(t *testing.T) {
	t.Parallel()
	bin := buildTermrig(t)
	tm := startTmux(t, bin+" demo --keypad")
	tm.waitFor("ok│")
	// 44 = h, 444 = i (a pause commits the letter: the cursor shows
	// after it), # sends.
	tm.run("send-keys", "44")
	tm.waitFor("h_")
	tm.run("send-keys", "444")
	tm.waitFor("hi_")
	tm.run("send-keys", "#")
	tm.waitFor("You said: hi")
	tm.run("send-keys", "C-c")
	tm.waitFor("EXIT=0")
}

func TestDemoConsole(t *testing.T) {
	t.Parallel()
	bin := buildTermrig(t)
	tm := startTmux(t, bin+" demo --console")
	tm.waitFor("online")
	tm.run("send-keys", "-l", "hi console")
	tm.run("send-keys", "Enter")
	tm.waitFor("You said: hi console")
	tm.run("send-keys", "C-d")
	tm.waitFor("EXIT=0")
}

// Esc alone cancels a slow run: the lone ESC reaches the device after a
// short quiet time, without another key. The agent is given by a path
// relative to the directory the demo was started from.
func TestDemoEscCancels(t *testing.T) {
	t.Parallel()
	bin := buildTermrig(t)
	dir := t.TempDir()
	build(t, dir, "termlink/testrig/agents/echoagent")
	tm := startTmux(t, "cd "+dir+" && "+bin+" demo --agent './echoagent -progress'")
	tm.waitFor("ok│")
	tm.run("send-keys", "-l", "/sleep 6")
	tm.run("send-keys", "Enter")
	tm.waitFor("│>/sleep 6", "│sleeping")
	tm.run("send-keys", "Escape") // and nothing after it
	s := tm.waitFor("cancelled")
	if strings.Contains(s, "slept") {
		t.Fatalf("the run finished instead of being cancelled:\n%s", s)
	}
	tm.run("send-keys", "C-c")
	tm.waitFor("EXIT=0")
}

// `--agent "python3 testrig/agents/python/quickstart.py"` from the repo
// root, as the README says: the script is found, and its progress shows
// before its answer.
func TestDemoAgentRelativePath(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed (CI installs it)")
	}
	bin := buildTermrig(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tm := startTmux(t, "cd "+root+" && "+bin+" demo --agent 'python3 testrig/agents/python/quickstart.py'")
	tm.waitFor("ok│")
	tm.run("send-keys", "-l", "hi py")
	tm.run("send-keys", "Enter")
	tm.waitFor("│Thinking...")
	tm.waitFor("│You said: hi py")
	tm.run("send-keys", "C-c")
	tm.waitFor("EXIT=0")

	// A typo is one short line before the demo starts.
	tm = startTmux(t, "cd "+root+" && "+bin+" demo --agent 'python3 testrig/agents/python/quikstart.py'")
	tm.waitFor("termrig demo: --agent: testrig/agents/python/quikstart.py: no such file", "EXIT=1")
}

// The kiosk demo: the console URL and a curl line are shown; idle, the
// LCD box shows a clock and then goes dark, a key wakes it (typing
// nothing); a notice sent to the URL it gives takes over the LCD box.
func TestDemoKiosk(t *testing.T) {
	t.Parallel()
	bin := buildTermrig(t)
	tm := startTmux(t, bin+" demo --kiosk --idle-seconds 2 --backlight-off-after 4")
	s := tm.waitFor("Web console: http://127.0.0.1:", "curl -X POST", "/notices")
	var base string
	for _, l := range strings.Split(s, "\n") {
		if _, url, ok := strings.Cut(l, "Web console: "); ok {
			base = strings.TrimSuffix(strings.TrimSpace(url), "/")
		}
	}
	if !strings.Contains(s, base+"/api/channels/terminal-dev/peers/demo-device/notices") {
		t.Fatalf("the curl line does not post to the demo device on %s:\n%s", base, s)
	}
	clock := regexp.MustCompile(`│ +\d\d:\d\d +│`)
	testwait.UntilOK(t, "the idle screen to show a clock", func() error {
		if s = tm.screen(); !clock.MatchString(s) {
			return fmt.Errorf("it shows:\n%s", s)
		}
		return nil
	})
	tm.waitFor("backlight off")
	tm.run("send-keys", "x") // wakes only
	s = tm.waitFor("backlight on", "ok│")
	if strings.Contains(s, "x_") {
		t.Fatalf("the waking key was typed:\n%s", s)
	}
	resp, err := http.Post(base+"/api/channels/terminal-dev/peers/demo-device/notices", "application/json",
		strings.NewReader(`{"text":"Lobby closes at 6","display_seconds":2}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST notice: HTTP %d", resp.StatusCode)
	}
	tm.waitFor("│Lobby closes at 6")
	tm.run("send-keys", "C-c")
	tm.waitFor("EXIT=0")
}

// The kiosk demo in a default 80x24 terminal: the whole screen (box,
// legend, server, console URL, the notice command) fits, drawn once,
// nothing scrolls, no line wraps, even as the glass changes; the curl
// command as shown sends a notice when a shell runs it.
func TestDemoKioskFits80x24(t *testing.T) {
	t.Parallel()
	bin := buildTermrig(t)
	tm := startTmuxSize(t, 80, 24, bin+" demo --kiosk")
	s := tm.waitFor("┌────────────────────┐", "ok│", "Web console: http://127.0.0.1:", "/notices")
	check := func(s string) {
		t.Helper()
		if n := tm.scrolled(); n != 0 {
			t.Fatalf("%d lines scrolled off the top:\n%s", n, s)
		}
		for _, w := range []string{"termlink demo: 20x4 LCD", "┌────", "└────", "Web console:", "Type a message", "server ws://", "Send a notice:"} {
			if n := strings.Count(s, w); n != 1 {
				t.Fatalf("%q shows %d times, want once:\n%s", w, n, s)
			}
		}
		if strings.Contains(s, "The terminal is") {
			t.Fatalf("80x24 is called too small:\n%s", s)
		}
	}
	check(s)
	// The printed command, as a person would paste it.
	var cmd []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "curl ") || len(cmd) > 0 && len(cmd) < 3 {
			cmd = append(cmd, l)
		}
	}
	if len(cmd) != 3 || !strings.HasSuffix(cmd[2], "/api/channels/terminal-dev/peers/demo-device/notices") {
		t.Fatalf("no three-line curl command:\n%s", s)
	}
	if out, err := exec.Command("sh", "-c", strings.Join(cmd, "\n")+" --silent --show-error --fail-with-body").CombinedOutput(); err != nil {
		t.Fatalf("the printed curl: %v\n%s\n%s", err, strings.Join(cmd, "\n"), out)
	}
	check(tm.waitFor("│Lobby closes at 6"))
	tm.run("send-keys", "x") // dismisses the notice
	tm.waitFor(" ok│")
	tm.run("send-keys", "C-c")
	tm.waitFor("EXIT=0")
}

// In a terminal smaller than the demo needs, the first line says so and
// the box is still drawn at the top; nothing scrolls.
func TestDemoSmallTerminal(t *testing.T) {
	t.Parallel()
	bin := buildTermrig(t)
	tm := startTmuxSize(t, 60, 16, bin+" demo --kiosk")
	s := tm.waitFor("┌────────────────────┐", "ok│")
	if !regexp.MustCompile(`The terminal is 60x16; this demo needs \d\dx22: enlarge it`).MatchString(strings.ReplaceAll(s, "\n", "")) {
		t.Fatalf("no size notice:\n%s", s)
	}
	if n := tm.scrolled(); n != 0 {
		t.Fatalf("%d lines scrolled off the top:\n%s", n, s)
	}
	// Enlarged, the notice goes and everything shows.
	tm.run("resize-window", "-x", "80", "-y", "24")
	s = tm.waitFor("/notices")
	if strings.Contains(s, "The terminal is") {
		t.Fatalf("the size notice stayed at 80x24:\n%s", s)
	}
	tm.run("send-keys", "C-c")
	tm.waitFor("EXIT=0")
}
