// Package lcdd runs LCDproc's server, LCDd (Debian package lcdproc), for
// tests: with its curses driver in a detached tmux session, on a loopback
// port picked free, so that a test can read what LCDd shows (tmux
// capture-pane) and press keys on it (tmux send-keys; the curses driver
// reports a typed character as a key of that name, Enter as "Enter" and
// the arrow keys as "Up", "Down", "Left", "Right").
package lcdd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Options size the display LCDd emulates.
type Options struct {
	Rows, Cols int // default 4 x 20
}

// Server is a running LCDd.
type Server struct {
	Addr       string // host:port LCDd listens on
	Rows, Cols int
	Conf       string // the LCDd.conf written for it

	bin      string // LCDd
	name     string // tmux -L names start with it
	socket   string // tmux -L name of the current tmux server
	launches int
	errLog   string
	stopped  bool
}

// Lookup finds LCDd, its curses driver and tmux; the error says what is
// missing.
func Lookup() (lcdd, driverDir string, err error) {
	lcdd, err = exec.LookPath("LCDd")
	if err != nil {
		for _, p := range []string{"/usr/sbin/LCDd", "/usr/local/sbin/LCDd"} {
			if _, serr := os.Stat(p); serr == nil {
				lcdd, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return "", "", errors.New("LCDd is not installed (apt-get install lcdproc)")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		return "", "", errors.New("tmux is not installed (apt-get install tmux)")
	}
	var cands []string
	for _, pat := range []string{"/usr/lib/*/lcdproc/curses.so", "/usr/lib/lcdproc/curses.so", "/usr/local/lib/lcdproc/curses.so"} {
		m, _ := filepath.Glob(pat)
		cands = append(cands, m...)
	}
	if len(cands) == 0 {
		return "", "", errors.New("LCDd's curses driver (curses.so) is not installed")
	}
	return lcdd, filepath.Dir(cands[0]) + "/", nil
}

// Require skips the test when LCDd (or tmux) is missing —
// a failure instead when CI_REQUIRE_TOOLS=1 (CI installs it).
func Require(t testing.TB) {
	t.Helper()
	if _, _, err := Lookup(); err != nil {
		if os.Getenv("CI_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%v; CI_REQUIRE_TOOLS=1 makes that a failure", err)
		}
		t.Skipf("skipping: %v", err)
	}
}

// Start runs LCDd in a new tmux session with files in dir (a test's
// TempDir) and waits until it accepts connections.
func Start(ctx context.Context, dir string, o Options) (*Server, error) {
	bin, driverDir, err := Lookup()
	if err != nil {
		return nil, err
	}
	if o.Rows <= 0 || o.Cols <= 0 {
		o.Rows, o.Cols = 4, 20
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Rows: o.Rows, Cols: o.Cols,
		name: fmt.Sprintf("lcdd-%d-%d", os.Getpid(), port), errLog: filepath.Join(dir, "LCDd.log"),
		Conf: filepath.Join(dir, "LCDd.conf")}
	who := "nobody"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	conf := fmt.Sprintf(`[server]
DriverPath=%s
Driver=curses
Bind=127.0.0.1
Port=%d
User=%s
Foreground=yes
ReportToSyslog=no
ReportLevel=4
ServerScreen=no
Hello=" "
GoodBye=" "
WaitTime=5
[curses]
Size=%dx%d
DrawBorder=yes
UseACS=no
TopLeftX=0
TopLeftY=0
`, driverDir, port, who, o.Cols, o.Rows)
	if err := os.WriteFile(s.Conf, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("lcdd: writing LCDd.conf: %w", err)
	}
	s.bin = bin
	if err := s.launch(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// launch starts LCDd in a new tmux session (on a tmux server of its own:
// the last one may still be exiting) and waits until it listens.
func (s *Server) launch(ctx context.Context) error {
	s.launches++
	s.socket = fmt.Sprintf("%s-%d", s.name, s.launches)
	cmd := fmt.Sprintf("exec %s -c %s -f -s 0 -r 4 2>>%s", s.bin, s.Conf, s.errLog)
	if err := s.tmux(ctx, "new-session", "-d", "-s", "lcdd", "-x", fmt.Sprint(s.Cols+10), "-y", fmt.Sprint(s.Rows+6), cmd); err != nil {
		return err
	}
	return s.waitListening(ctx)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("lcdd: picking a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) tmux(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "tmux", append([]string{"-L", s.socket}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("lcdd: tmux %s: %v: %s", args[0], err, out)
	}
	return nil
}

func (s *Server) waitListening(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", s.Addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lcdd: LCDd did not listen on %s: %w; its log:\n%s", s.Addr, err, s.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Screen returns the rows the curses window shows now (inside its border).
func (s *Server) Screen(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "tmux", "-L", s.socket, "capture-pane", "-p", "-t", "lcdd").Output()
	if err != nil {
		return nil, fmt.Errorf("lcdd: capture-pane: %w", err)
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) < s.Rows+2 {
		return nil, fmt.Errorf("lcdd: the pane has %d lines:\n%s", len(lines), out)
	}
	rows := make([]string, s.Rows)
	for r := range s.Rows {
		line := []rune(lines[1+r])
		if len(line) < 1 {
			continue
		}
		rows[r] = string(line[1:min(len(line), 1+s.Cols)])
	}
	return rows, nil
}

// WaitScreen polls the screen until ok accepts it or ctx ends; the error
// shows the last screen.
func (s *Server) WaitScreen(ctx context.Context, what string, ok func(rows []string) bool) ([]string, error) {
	var last []string
	for {
		rows, err := s.Screen(ctx)
		if err == nil {
			last = rows
			if ok(rows) {
				return rows, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("lcdd: waiting for %s: %w; LCDd shows:\n%s", what, ctx.Err(), strings.Join(last, "\n"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Contains reports whether the rows hold text (within one row).
func Contains(rows []string, text string) bool {
	for _, r := range rows {
		if strings.Contains(r, text) {
			return true
		}
	}
	return false
}

// Type types text on LCDd's keyboard, one key per character.
func (s *Server) Type(ctx context.Context, text string) error {
	for _, r := range text {
		if err := s.tmux(ctx, "send-keys", "-t", "lcdd", "-l", string(r)); err != nil {
			return err
		}
	}
	return nil
}

// Press presses named keys: tmux key names such as "Enter", "Up".
func (s *Server) Press(ctx context.Context, keys ...string) error {
	return s.tmux(ctx, append([]string{"send-keys", "-t", "lcdd"}, keys...)...)
}

// Log returns what LCDd wrote to stderr.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.errLog)
	return string(b)
}

// Stop ends LCDd and its tmux session, and waits until the port is free.
func (s *Server) Stop() error {
	if s.stopped {
		return nil
	}
	s.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.tmux(ctx, "kill-server"); err != nil {
		return err
	}
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err != nil {
			return nil
		}
		c.Close()
		select {
		case <-ctx.Done():
			return fmt.Errorf("lcdd: LCDd still listens on %s after kill-server", s.Addr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Restart stops LCDd and starts it again on the same port, as a package
// upgrade or a crash and systemd's restart would.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return err
	}
	s.stopped = false
	return s.launch(ctx)
}
