package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
)

// These tests run the real termserver binary as a child process.

var binary string

const stampedVersion = "v0.0.0-termserver-test"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "termserver-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "termserver")
	// Stamped as make pi stamps a release (TestVersion checks it took).
	build := exec.Command("go", "build", "-race", "-ldflags", "-X main.version="+stampedVersion, "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building termserver:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type proc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	log  *logBuf
}

// logBuf collects the child's stderr; safe for concurrent use.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) add(s string) {
	l.mu.Lock()
	l.b.WriteString(s)
	l.mu.Unlock()
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var listenRE = regexp.MustCompile(`termserver listening"? addr=(\S+)`)

// start runs termserver with config file cfg (and the flags in extra)
// and waits until it listens.
func start(t *testing.T, cfg string, extra ...string) *proc {
	t.Helper()
	return startCmd(t, exec.Command(binary, append([]string{"--config", cfg, "--listen", "127.0.0.1:0"}, extra...)...))
}

// startCmd runs cmd, a termserver command line, and waits until it listens.
func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: &logBuf{}}
	addr := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.log.add(line + "\n")
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	select {
	case p.addr = <-addr:
	case <-p.done:
		t.Fatalf("termserver exited before listening:\n%s", p.log)
	case <-time.After(testwait.Deadline):
		t.Fatalf("termserver did not start:\n%s", p.log)
	}
	return p
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

type device struct {
	t  *testing.T
	ws *websocket.Conn
}

func connect(t *testing.T, p *proc, peer string, caps ...string) *device {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+p.addr+"/api/channels/terminal-dev/ws", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	d := &device{t: t, ws: ws}
	if len(caps) == 0 {
		caps = []string{link.CapText}
	}
	d.send(&link.Connect{PeerID: peer, Capabilities: caps})
	if _, ok := d.read().(*link.Connected); !ok {
		t.Fatal("no connected frame")
	}
	return d
}

func (d *device) send(f link.Frame) {
	d.t.Helper()
	if err := d.ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
		d.t.Fatal(err)
	}
}

func (d *device) read() link.Frame {
	d.t.Helper()
	_ = d.ws.SetReadDeadline(time.Now().Add(testwait.Deadline))
	_, data, err := d.ws.ReadMessage()
	if err != nil {
		d.t.Fatalf("read: %v", err)
	}
	f, err := link.Decode(data)
	if err != nil {
		d.t.Fatal(err)
	}
	return f
}

func writeConfig(t *testing.T, workspace string, delayMs int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "termserver.json")
	cfg := fmt.Sprintf(`{"workspace": %q,
	  "channels": {"terminal-dev": {"kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "slow-echo"}},
	  "agents": {"slow-echo": {"builtin": "echo", "delayMs": %d}}}`, workspace, delayMs)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Dedupe survives a restart: a message answered before the server was
// killed (-9) is answered from the session log after it, not run again; a
// message accepted but not answered before the kill is run at start-up
// and its reply reaches the device when it resends.
func TestRestartKeepsDedupe(t *testing.T) {
	t.Parallel()
	workspace := t.TempDir()
	cfg := writeConfig(t, workspace, 1500)

	p := start(t, cfg)
	d := connect(t, p, "device-001")
	d.send(&link.Message{MessageID: "m-1", Text: "before the crash"})
	if ack, ok := d.read().(*link.Ack); !ok || ack.Duplicate {
		t.Fatalf("first ack %+v", ack)
	}
	reply, ok := d.read().(*link.Message)
	if !ok || reply.Text != "You said: before the crash" {
		t.Fatalf("reply %+v", reply)
	}
	d.send(&link.Message{MessageID: "m-2", Text: "in flight"})
	if ack, ok := d.read().(*link.Ack); !ok || !ack.Accepted {
		t.Fatalf("m-2 ack %+v", ack)
	}
	p.kill(t) // m-2 is still running (1.5 s agent)

	p2 := start(t, cfg)
	if !strings.Contains(p2.log.String(), "unanswered=1") {
		t.Errorf("restart log does not report the unanswered message:\n%s", p2.log)
	}
	d2 := connect(t, p2, "device-001")
	d2.send(&link.Message{MessageID: "m-1", Text: "before the crash"})
	ack, ok := d2.read().(*link.Ack)
	if !ok || !ack.Duplicate || ack.Reply == nil || *ack.Reply != *reply {
		t.Fatalf("resent m-1 after restart: %+v, want duplicate with cached reply %+v", ack, reply)
	}
	// m-2 was re-run at start-up; resending it gets pending or the reply.
	d2.send(&link.Message{MessageID: "m-2", Text: "in flight"})
	ack, ok = d2.read().(*link.Ack)
	if !ok || !ack.Duplicate {
		t.Fatalf("resent m-2: %+v", ack)
	}
	if ack.Pending {
		// Recovered run still going: its reply is dispatched to us.
		r, ok := d2.read().(*link.Message)
		if !ok || r.MessageID != "m-2" || r.Text != "You said: in flight" {
			t.Fatalf("m-2 reply %+v", r)
		}
	} else if ack.Reply == nil || ack.Reply.Text != "You said: in flight" {
		t.Fatalf("m-2 duplicate without reply %+v", ack)
	}
	// Exactly one user and one assistant record per message in the log,
	// and for m-2 the record that its run was interrupted. The session
	// files are written behind (at the next checkpoint, within a second):
	// wait for m-2's reply to reach the file.
	var data []byte
	m2reply := regexp.MustCompile(`"role":"assistant".*"message_id":"m-2"`)
	testwait.UntilOK(t, "m-2's reply in the session log", func() error {
		var err error
		if data, err = os.ReadFile(filepath.Join(workspace, "sessions", "terminal-dev:local:device-001.jsonl")); err == nil && !m2reply.Match(data) {
			err = fmt.Errorf("it holds:\n%s", data)
		}
		return err
	})
	for _, id := range []string{"m-1", "m-2"} {
		for _, role := range []string{"user", "assistant"} {
			re := regexp.MustCompile(`"role":"` + role + `".*"message_id":"` + id + `"`)
			if n := len(re.FindAllString(string(data), -1)); n != 1 {
				t.Errorf("%s has %d %s records in the session log, want 1:\n%s", id, n, role, data)
			}
		}
	}
	if n := strings.Count(string(data), `"event":"run_interrupted"`); n != 1 {
		t.Errorf("%d run_interrupted records, want 1 (for m-2):\n%s", n, data)
	}
}

// A torn last line (power cut mid-write) is skipped with a warning; the
// server starts.
func TestTornSessionLogStillStarts(t *testing.T) {
	t.Parallel()
	workspace := t.TempDir()
	sessions := filepath.Join(workspace, "sessions")
	if err := os.MkdirAll(sessions, 0o700); err != nil {
		t.Fatal(err)
	}
	torn := `{"_type":"metadata","key":"terminal-dev:local:dev","created_at":"2026-01-01T00:00:00.000000","updated_at":"2026-01-01T00:00:00.000000","metadata":{},"last_consolidated":0}
{"role":"user","content":"hi","timestamp":"2026-01-01T00:00:00.000000","message_id":"a","run_id":"r1"}
{"role":"assistant","content":"You said: hi","timestamp":"2026-01-01T00:00:00.000000","message_id":"a","run_id":"r1","finish_reason":"stop"}
{"role":"user","content":"tor`
	if err := os.WriteFile(filepath.Join(sessions, "terminal-dev:local:dev.jsonl"), []byte(torn), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, writeConfig(t, workspace, 0))
	d := connect(t, p, "dev")
	d.send(&link.Message{MessageID: "a", Text: "hi"})
	if ack, ok := d.read().(*link.Ack); !ok || ack.Reply == nil || ack.Reply.Text != "You said: hi" {
		t.Fatalf("ack %+v", ack)
	}
	d.send(&link.Message{MessageID: "b", Text: "after"})
	d.read()
	if r, ok := d.read().(*link.Message); !ok || r.Text != "You said: after" {
		t.Fatalf("reply %+v", r)
	}
	if !strings.Contains(strings.ToLower(p.log.String()), "warn") {
		t.Errorf("no warning about the torn line:\n%s", p.log)
	}
}

// Bad configs are refused at start with the key's path in the message.
func TestConfigErrorsNameThePath(t *testing.T) {
	t.Parallel()
	tests := []struct{ config, want string }{
		{`{"channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","config":{"heartbeat_secs":3}}}}`,
			"channels.terminal-dev.config.heartbeat_secs: unknown key"},
		{`{"channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","agent":"helpr"}}}`,
			`channels.terminal-dev.agent: unknown agent "helpr"`},
		{`{"channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","account_id":"local","config":{"maxMessageChars":"many"}}}}`,
			"channels.terminal-dev.config.maxMessageChars: must be"},
		{`{"channels": {`, "invalid JSON"},
	}
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "bad.json")
		_ = os.WriteFile(path, []byte(tt.config), 0o600)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, binary, "--config", path).CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("config %s: exit %v, want 1; output:\n%s", tt.config, err, out)
		}
		if !strings.Contains(string(out), tt.want) {
			t.Errorf("config %s: output %q does not contain %q", tt.config, out, tt.want)
		}
	}
	out, err := exec.Command(binary, "--config", "/nonexistent/termserver.json").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "/nonexistent/termserver.json") {
		t.Errorf("missing config: %v %s", err, out)
	}
	out, err = exec.Command(binary, "--log-level", "loud").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `--log-level "loud"`) {
		t.Errorf("bad flag: %v %s", err, out)
	}
}

// SIGTERM shuts down cleanly and answers the devices with a going-away close.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	p := start(t, writeConfig(t, t.TempDir(), 0))
	d := connect(t, p, "dev")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, _, err := d.ws.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
		t.Fatalf("device got %v, want a going-away close", err)
	}
	<-p.done
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM:\n%s", code, p.log)
	}
	if !strings.Contains(p.log.String(), "termserver stopped") {
		t.Errorf("log:\n%s", p.log)
	}
	// The operator's log says why it stopped and whom it closed.
	for _, want := range []string{`msg="termserver stopping" signal=terminated`, `msg="closing device connections" devices=1`} {
		if !strings.Contains(p.log.String(), want) {
			t.Errorf("the log has no %q:\n%s", want, p.log)
		}
	}
}

// Issue 40 row 6: SIGHUP never kills termserver. Without TLS it used to
// (the signal's default action: no handler was installed), with no log
// line; now it says there is nothing to reload and serves on.
func TestSIGHUPWithoutTLSKeepsServing(t *testing.T) {
	t.Parallel()
	p := start(t, writeConfig(t, t.TempDir(), 0))
	p.hup(t)
	testwait.UntilOK(t, "the SIGHUP answered in the log", func() error {
		select {
		case <-p.done:
			t.Fatalf("termserver exited on SIGHUP:\n%s", p.log)
		default:
		}
		if !strings.Contains(p.log.String(), "SIGHUP: nothing to reload") {
			return fmt.Errorf("its log:\n%s", p.log)
		}
		return nil
	})
	select {
	case <-p.done:
		t.Fatalf("termserver exited on SIGHUP:\n%s", p.log)
	default:
	}
	d := connect(t, p, "after-hup")
	_ = d.ws.Close()
}

// A second termserver on the same workspace is refused, and the refusal
// names the pid of the termserver that holds it (issue 23 row 11).
func TestSecondTermserverNamesTheHolder(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), 0)
	first := start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "--config", cfg, "--listen", "127.0.0.1:0").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("second termserver: %v, want exit 1; output:\n%s", err, out)
	}
	want := fmt.Sprintf("process %d holds", first.cmd.Process.Pid)
	if !strings.Contains(string(out), want) {
		t.Fatalf("second termserver's refusal %q does not name the holder (%q)", out, want)
	}
}

// --version prints the version stamped with -X main.version, then the
// module version and toolchain, on stdout, and exits 0 (issue 23 row 11).
func TestVersion(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--version")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("--version: %v; stderr %q", err, stderr.String())
	}
	if !strings.HasPrefix(string(out), "termserver "+stampedVersion+"\n") || !strings.Contains(string(out), "\n  module  ") ||
		!strings.Contains(string(out), "\n  go      go") {
		t.Fatalf("--version printed %q", out)
	}
}
