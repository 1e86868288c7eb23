package main

import (
	"bufio"
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

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/server/servertest"
	"termlink/testrig/childtest"
	"termlink/testrig/needtool"
)

// startBoardTermd runs termd on the board profile in the JSON profile
// against a real termserver; its stderr (the log) is kept in log. wait
// waits until it exited and returns its error.
func startBoardTermd(t *testing.T, profile string) (cmd *exec.Cmd, log *syncbuf.Buffer, wait func() error) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "board.json")
	if err := os.WriteFile(file, []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := servertest.Start(t, nil).Addr
	cmd = childtest.Command(termd, "--server", addr, "--board-file", file, "--state-dir", filepath.Join(dir, "state"), "--peer-id", "last-screen")
	log = &syncbuf.Buffer{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var once sync.Once
	var err error
	wait = func() error {
		once.Do(func() { err = <-done })
		return err
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = wait()
		if t.Failed() {
			t.Logf("termd's log:\n%s", log.String())
		}
	})
	return cmd, log, wait
}

// stop sends SIGTERM to termd and waits for it to exit with status 0.
func stopTermd(t *testing.T, cmd *exec.Cmd, wait func() error) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatalf("termd after SIGTERM: %v", err)
	}
}

// After SIGTERM the last screen ("offline: stopped") is drawn before the
// display is closed, on every kind of board termd can run on without
// hardware: a serial console (a PTY pair) and LCDd (a peer on a loopback
// socket that answers as LCDd does and keeps what termd draws). Before,
// the serial port was closed with the signal's context (the log said
// "console: write failed ... file already closed") and the LCDd
// connection too, so the screen kept saying online.
func TestTermdLastScreenAfterSIGTERM(t *testing.T) {
	t.Parallel()
	t.Run("serial console", func(t *testing.T) {
		t.Parallel()
		needtool.Path(t, "socat", "a PTY pair for the serial port; apt-get install socat")
		dir := t.TempDir()
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		socat := exec.Command("socat", "pty,raw,echo=0,link="+a, "pty,raw,echo=0,link="+b)
		if err := socat.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { socat.Process.Kill(); socat.Wait() }()
		testwait.UntilOK(t, "socat's PTYs", func() error { _, err := os.Stat(b); return err })
		peer, err := os.OpenFile(a, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		screen := &syncbuf.Buffer{}
		go func() {
			buf := make([]byte, 4096)
			for {
				n, err := peer.Read(buf)
				screen.Write(buf[:n])
				if err != nil {
					return
				}
			}
		}()
		cmd, log, wait := startBoardTermd(t, fmt.Sprintf(`{"name": "test-serial", "display": {"kind": "console"},
			"console": {"cols": 80, "rows": 20}, "serial": {"port": %q, "baud": 115200}}`, b))
		testwait.Until(t, "online on the serial console", func() bool { return strings.Contains(screen.String(), "online") })
		stopTermd(t, cmd, wait)
		if !strings.Contains(screen.String(), "offline: stopped") {
			t.Fatalf("the serial console's last screen does not say offline: stopped; it got %q", tail(screen.String(), 400))
		}
		if l := log.String(); strings.Contains(l, "write failed") || strings.Contains(l, "drawing the screen") {
			t.Fatalf("termd failed to draw its last screen:\n%s", l)
		}
	})
	t.Run("LCDd", func(t *testing.T) {
		t.Parallel()
		lcdd := startFakeLCDd(t)
		cmd, log, wait := startBoardTermd(t, fmt.Sprintf(`{"name": "test-lcdd", "display": {"kind": "lcdproc", "address": %q}}`, lcdd.addr))
		testwait.UntilOK(t, "online on LCDd", func() error {
			if r := lcdd.row(4); !strings.HasSuffix(r, "ok") {
				return fmt.Errorf("the bottom row is %q", r)
			}
			return nil
		})
		stopTermd(t, cmd, wait)
		if r := lcdd.row(4); !strings.HasPrefix(r, "offline: stopped") {
			t.Fatalf("LCDd's last bottom row is %q, not offline: stopped", r)
		}
		if l := log.String(); strings.Contains(l, "drawing the screen") {
			t.Fatalf("termd failed to draw its last screen:\n%s", l)
		}
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// fakeLCDd answers as LCDd does (hello, success) on a loopback socket and
// keeps the rows of termd's screen as set last.
type fakeLCDd struct {
	addr string
	mu   sync.Mutex
	rows map[int]string
}

func startFakeLCDd(t *testing.T) *fakeLCDd {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLCDd{addr: l.Addr().String(), rows: map[int]string{}}
	var wg sync.WaitGroup
	var cmu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			cmu.Lock()
			conns = append(conns, c)
			cmu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					line := sc.Text()
					answer := "success\n"
					switch {
					case line == "hello":
						answer = "connect LCDproc 0.5.9 protocol 0.3 lcd wid 20 hgt 4 cellwid 5 cellhgt 8\n"
					case line == "noop":
						answer = "noop complete\n"
					case strings.HasPrefix(line, "widget_set termd r"):
						var row, x, y int
						if n, _ := fmt.Sscanf(line, "widget_set termd r%d %d %d", &row, &x, &y); n == 3 {
							_, text, _ := strings.Cut(line, fmt.Sprintf(" %d %d ", x, y))
							f.mu.Lock()
							f.rows[row] = strings.TrimSuffix(strings.TrimPrefix(text, `"`), `"`)
							f.mu.Unlock()
						}
					}
					if _, err := c.Write([]byte(answer)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return f
}

// row is row r (1-based) of termd's screen as set last, trimmed.
func (f *fakeLCDd) row(r int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.TrimSpace(f.rows[r])
}

// termd on the sim-lcd board against a real termserver, in tmux: the
// emulated 20x4 glass (the real HD44780 driver on the emulator) is drawn
// in the terminal, the keyboard is its keypad (2 then # sends "a"), the
// log goes to termd.log, not over the glass, and after SIGTERM the glass
// says offline: stopped (the last screen of the HD44780 boards).
func TestTermdSimLCDBoard(t *testing.T) {
	t.Parallel()
	addr := servertest.Start(t, nil).Addr
	state := filepath.Join(t.TempDir(), "state")
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s --server %s --board sim-lcd --state-dir %s", termdRun, addr, state))
	s := waitScreen("ok│")
	if !strings.Contains(s, "20x4 LCD (HD44780 emulator)") || strings.Contains(s, "level=") {
		t.Fatalf("the screen:\n%s", s)
	}
	tm("send-keys", "2")
	waitScreen("│a ")
	tm("send-keys", "#")
	waitScreen("You said: a")
	out, err := exec.Command("pgrep", "-f", "^"+regexp.QuoteMeta(termdRun)+" .*--state-dir "+regexp.QuoteMeta(state)+"$").Output()
	if err != nil {
		t.Fatalf("termd not running: %v", err)
	}
	var pid int
	fmt.Sscan(strings.TrimSpace(string(out)), &pid)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s = waitScreen("EXIT=0")
	if !strings.Contains(s, "offline: stopped") || strings.Contains(s, "level=") {
		t.Fatalf("after SIGTERM the glass does not say offline: stopped:\n%s", s)
	}
	if log, err := os.ReadFile(filepath.Join(state, "termd.log")); err != nil || !strings.Contains(string(log), `msg="termd starting"`) {
		t.Fatalf("termd.log: %v\n%s", err, log)
	}
}
