package harness

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"termlink/server/agent/procs"
)

// tmuxServer is the private tmux server of one Runner: its own socket
// (-L), no configuration file, so the user's tmux is never touched.
type tmuxServer struct {
	path   string // tmux binary
	socket string // -L name
	env    []string

	mu         sync.Mutex
	socketPath string // as tmux reports it, to remove after kill-server
}

// tmuxChunk is the most literal text sent in one send-keys, well below
// tmux's command size limit.
const tmuxChunk = 2048

func (s *tmuxServer) run(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.path, append([]string{"-L", s.socket, "-f", "/dev/null"}, args...)...)
	cmd.Env = s.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("tmux %s: %s", args[0], msg)
	}
	return out.Bytes(), nil
}

// kill stops the server and every session in it, and removes its socket
// (tmux leaves it behind).
func (s *tmuxServer) kill() {
	_, _ = s.run(context.Background(), "kill-server")
	s.mu.Lock()
	path := s.socketPath
	s.mu.Unlock()
	if path != "" {
		_ = os.Remove(path)
	}
}

// tmuxTerm is one tmux session (one window, one pane) of a tmuxServer.
type tmuxTerm struct {
	srv     *tmuxServer
	name    string
	target  string // exact-match pane target
	panePID int
}

func (s *tmuxServer) start(ctx context.Context, name, dir string, shell, env []string, cols, rows int) (*tmuxTerm, error) {
	args := []string{"new-session", "-d", "-s", name, "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), "-c", dir}
	// The shell's extra variables (its prompt) go through env(1), which
	// any tmux version runs (new-session -e needs tmux 3.2).
	args = append(args, "--")
	if len(env) > 0 {
		args = append(append(args, "env"), env...)
	}
	args = append(args, shell...)
	target := "=" + name + ":"
	// One tmux call: the new session, no status line (the pane is the
	// whole window), then the pane's process id.
	args = append(args, ";", "set-option", "-t", target, "status", "off",
		";", "display-message", "-p", "-t", target, "#{pane_pid} #{socket_path}")
	out, err := s.run(ctx, args...)
	if err != nil && strings.Contains(err.Error(), "server exited unexpectedly") {
		// The server was exiting (its last session had just been killed)
		// as this client reached it; the next call starts a new one.
		out, err = s.run(ctx, args...)
	}
	if err != nil {
		return nil, err
	}
	pidText, socketPath, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		return nil, fmt.Errorf("tmux: unexpected pane pid %q", strings.TrimSpace(string(out)))
	}
	if filepath.IsAbs(socketPath) && filepath.Base(socketPath) == s.socket {
		s.mu.Lock()
		s.socketPath = socketPath
		s.mu.Unlock()
	}
	return &tmuxTerm{srv: s, name: name, target: target, panePID: pid}, nil
}

func (t *tmuxTerm) Send(ctx context.Context, keys string) error {
	if keys == "" {
		return nil
	}
	if IsKey(keys) {
		_, err := t.srv.run(ctx, "send-keys", "-t", t.target, keys)
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), tmuxChunk)
		for n < len(keys) && !utf8.RuneStart(keys[n]) {
			n--
		}
		if _, err := t.srv.run(ctx, "send-keys", "-t", t.target, "-l", "--", tmuxArg(keys[:n])); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// tmuxArg protects an argument from tmux's command parser, which takes a
// trailing ';' as the end of the command (and "\;" as a literal ';').
func tmuxArg(s string) string {
	if strings.HasSuffix(s, ";") {
		return s[:len(s)-1] + `\;`
	}
	return s
}

func (t *tmuxTerm) Screen(ctx context.Context) (string, error) {
	out, err := t.srv.run(ctx, "capture-pane", "-p", "-t", t.target)
	if err != nil {
		return "", err
	}
	return trimScreen(string(out)), nil
}

func (t *tmuxTerm) Alive() bool {
	_, err := t.srv.run(context.Background(), "has-session", "-t", "="+t.name)
	return err == nil
}

// Close kills the tmux session, then whatever of the pane's process
// session survived the hangup.
func (t *tmuxTerm) Close() error {
	_, err := t.srv.run(context.Background(), "kill-session", "-t", "="+t.name)
	killSession(t.panePID)
	if err != nil && !t.Alive() {
		return nil // already gone
	}
	return err
}

// tmuxSocketPrefix starts the name of every private tmux server's socket:
// termlink-<pid of the server process>-<runner number>.
const tmuxSocketPrefix = "termlink-"

// reapStaleTmux kills the private tmux servers (and removes the sockets)
// of server processes that are gone: a crashed termserver cannot kill its
// tmux server, which daemonized and so outlives it. A socket whose
// process still lives is left alone, whoever that process is now.
func reapStaleTmux(path string, env []string, log *slog.Logger) {
	dir := os.Getenv("TMUX_TMPDIR")
	if dir == "" {
		dir = "/tmp"
	}
	dir = filepath.Join(dir, fmt.Sprintf("tmux-%d", os.Getuid()))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), tmuxSocketPrefix)
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || procs.Running(pid) {
			continue
		}
		s := &tmuxServer{path: path, socket: e.Name(), env: env}
		_, _ = s.run(context.Background(), "kill-server")
		_ = os.Remove(filepath.Join(dir, e.Name()))
		log.Info("harness: removed the tmux server of a server process that is gone", "socket", e.Name())
	}
}
