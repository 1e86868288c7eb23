package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/session"
)

// Real termserver processes killed with SIGKILL (issue 22, rows 5 and 6):
// what a restart remembers is what the workspace holds, nothing else.

// procServer is a termserver process of a test.
type procServer struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string
	done chan struct{} // closed once the process has exited and its stderr is read

	mu     sync.Mutex
	stderr strings.Builder
}

var listeningAddr = regexp.MustCompile(`termserver listening.* addr=(\S+)`)

// startProc starts the termserver binary on config file cfg, listening on
// 127.0.0.1:0, and waits for its "listening" line.
func startProc(t *testing.T, bin, cfg string) *procServer {
	t.Helper()
	p := &procServer{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "--config", cfg, "--listen", "127.0.0.1:0", "--log-level", "info")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() { // owns stderr until the process exits
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listeningAddr.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = p.cmd.Wait()
	}()
	t.Cleanup(func() { p.kill() })
	select {
	case p.addr = <-addr:
	case <-p.done:
		t.Fatalf("termserver exited before listening:\n%s", p.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("termserver not listening after 30 s:\n%s", p.log())
	}
	return p
}

func (p *procServer) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *procServer) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Errorf("termserver did not exit after SIGKILL")
	}
}

func (p *procServer) ws() string { return "ws://" + p.addr + "/api/channels/terminal-dev/ws" }

func termserverBin(t *testing.T) string { return buildAgent(t, "termlink/cmd/termserver") }

// waitSeen polls cond every 20 ms until it holds, or fails the test after
// limit with what(), which says what was seen.
func waitSeen(t *testing.T, limit time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s: %s", limit, what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readSessionFile reads a session file as records (whole lines only).
func readSessionFile(t *testing.T, path string) []session.Record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []session.Record
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, `{"_type"`) || line == "" {
			continue
		}
		recs, err := session.DecodeRecords([]byte(line + "\n"))
		if err == nil {
			out = append(out, recs...)
		}
	}
	return out
}

// A message that only waited while the server was killed is never refused
// as interrupted: B waits behind A through two kills, starts in the third
// life and is killed there once; the fourth life runs it again and
// answers it. A (started, killed, started again, killed) is still
// answered "interrupted twice" without a third run. The agent logs every
// start to a file, so the test counts real starts, not records.
func TestRestartCountsOnlyStartedRuns(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds termserver and kills it four times")
	}
	bin := termserverBin(t)
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts.log")
	fast := filepath.Join(dir, "fast")
	script := filepath.Join(dir, "agent.sh")
	// Plain protocol: the envelope line in, the reply text out. It sleeps
	// (until killed with the server) unless the file "fast" exists.
	if err := os.WriteFile(script, []byte(`#!/bin/sh
read -r line || true
printf '%s\n' "$line" >> "`+starts+`"
if [ -e "`+fast+`" ]; then echo "ran"; exit 0; fi
sleep 120
echo late
`), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.json")
	workspace := filepath.Join(dir, "ws")
	if err := os.WriteFile(cfg, []byte(`{"workspace":`+jsonString(workspace)+`,
 "channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","agent":"slow"}},
 "agents":{"slow":{"terminal":{"enabled":true,"command":`+jsonString("/bin/sh "+script)+`,"protocol":"plain","timeout":300}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	count := func(text string) int {
		data, _ := os.ReadFile(starts)
		return strings.Count(string(data), `"text":"`+text+`"`)
	}
	counts := func() string {
		return fmt.Sprintf("agent starts: A %d, B %d, C %d", count("msg-A"), count("msg-B"), count("msg-C"))
	}
	logFile := filepath.Join(workspace, "sessions", "terminal-dev:local:dev.jsonl")

	// Life 1: A runs, B and C wait; killed.
	p := startProc(t, bin, cfg)
	c := dial(t, p.ws(), nil)
	c.connect("dev")
	for _, id := range []string{"A", "B", "C"} {
		c.send(&link.Message{MessageID: "m-" + id, Text: "msg-" + id})
		if ack := readAs[*link.Ack](c); ack.Duplicate {
			t.Fatalf("first send of %s acked as duplicate", id)
		}
	}
	waitSeen(t, 20*time.Second, func() bool { return count("msg-A") == 1 }, counts)
	p.kill()

	// Life 2: A runs again (its second start); B and C still wait; killed.
	p = startProc(t, bin, cfg)
	waitSeen(t, 20*time.Second, func() bool { return count("msg-A") == 2 }, counts)
	p.kill()

	// Life 3: A is answered "interrupted twice"; B starts for the first
	// time; killed during that run.
	p = startProc(t, bin, cfg)
	waitSeen(t, 20*time.Second, func() bool { return count("msg-B") == 1 }, counts)
	p.kill()

	// Life 4: agents answer at once. B, cut short once, runs again; C runs.
	if err := os.WriteFile(fast, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p = startProc(t, bin, cfg)
	replies := func() map[string]session.Record {
		out := map[string]session.Record{}
		for _, r := range readSessionFile(t, logFile) {
			if r.Role == "assistant" {
				out[r.MessageID] = r
			}
		}
		return out
	}
	waitSeen(t, 30*time.Second, func() bool { return len(replies()) == 3 },
		func() string { return fmt.Sprintf("%s; replies %+v\nserver log:\n%s", counts(), replies(), p.log()) })
	got := replies()
	if r := got["m-A"]; r.FinishReason != link.FinishError || !strings.Contains(r.Content, "interrupted twice") {
		t.Errorf("A (started twice, killed twice): %+v, want the interrupted-twice error", r)
	}
	for _, id := range []string{"B", "C"} {
		if r := got["m-"+id]; r.FinishReason != link.FinishStop || r.Content != "ran" {
			t.Errorf("%s: %+v, want the agent's answer %q (%s)", id, r, "ran", counts())
		}
	}
	if a, b, cc := count("msg-A"), count("msg-B"), count("msg-C"); a != 2 || b != 2 || cc != 1 {
		t.Errorf("%s, want A 2, B 2, C 1", counts())
	}
	// Each message's start is recorded once (A's with the message itself:
	// its session was idle), each re-run once.
	marks := map[string]int{}
	for _, r := range readSessionFile(t, logFile) {
		if ev, _ := r.Extra["event"].(string); ev != "" {
			marks[r.MessageID+" "+ev]++
		}
	}
	want := map[string]int{"m-A run_started": 1, "m-A run_interrupted": 1, "m-B run_started": 1,
		"m-B run_interrupted": 1, "m-C run_started": 1}
	if fmt.Sprint(marks) != fmt.Sprint(want) {
		t.Errorf("start records %v, want %v", marks, want)
	}
}

// After a kill, dedupe still knows the last DedupePerSession (1,024)
// answered ids of a session that answered more: resending each of them is
// a duplicate with its reply, none runs again.
func TestRestartDedupeKeepsAnsweredIds(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds termserver and answers 1,100 messages")
	}
	bin := termserverBin(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"workspace":`+jsonString(filepath.Join(dir, "ws"))+`,
 "channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local",
   "config":{"ratePerPeer":100000,"rateBurst":100000}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	const total, resend, window = 1100, 1024, 32
	p := startProc(t, bin, cfg)
	c := dial(t, p.ws(), nil)
	c.connect("dev")
	replies := map[string]string{}
	sent := 0
	for len(replies) < total {
		for sent < total && sent-len(replies) < window {
			c.send(&link.Message{MessageID: fmt.Sprintf("m-%d", sent), Text: fmt.Sprintf("text %d", sent)})
			sent++
		}
		switch f := c.read().(type) {
		case *link.Message:
			replies[f.MessageID] = f.Text
		case *link.Error:
			t.Fatalf("error frame while sending: %+v", f)
		}
	}
	p.kill()

	p = startProc(t, bin, cfg)
	c = dial(t, p.ws(), nil)
	c.connect("dev")
	again := 0
	for i := total - resend; i < total; i++ {
		id := fmt.Sprintf("m-%d", i)
		c.send(&link.Message{MessageID: id, Text: fmt.Sprintf("text %d", i)})
		var ack *link.Ack
		for ack == nil {
			if a, ok := c.read().(*link.Ack); ok {
				ack = a
			}
		}
		if !ack.Duplicate || ack.Reply == nil || ack.Reply.Text != replies[id] {
			again++
			if again <= 3 {
				t.Errorf("resend of %s after the kill: %+v, want duplicate with reply %q", id, ack, replies[id])
			}
		}
	}
	if again > 0 {
		t.Fatalf("%d of the last %d answered ids ran again after a kill", again, resend)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Every run's start is recorded exactly once and before its reply, whether
// it was recorded with the message (idle session), with the previous reply
// (busy session) or on its own; the agent runs each message once.
func TestStartRecordedOncePerRun(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, agent.Echo{Delay: 2 * time.Millisecond})
	c := dial(t, ts.ws, nil)
	c.connect("marks")
	const n = 40
	for i := range n {
		c.send(&link.Message{MessageID: fmt.Sprintf("m-%d", i), Text: "hi"})
	}
	replies := 0
	for replies < n {
		if _, ok := c.read().(*link.Message); ok {
			replies++
		}
	}
	// A lone message on the now idle session: recorded with the message.
	c.send(&link.Message{MessageID: "lone", Text: "hi"})
	for {
		if m, ok := c.read().(*link.Message); ok && m.MessageID == "lone" {
			break
		}
	}
	flushSessions(t, ts)
	recs := readSessionFile(t, filepath.Join(ts.cfg.Workspace, "sessions", "terminal-dev:local:marks.jsonl"))
	started := map[string]int{}
	for _, r := range recs {
		switch ev, _ := r.Extra["event"].(string); {
		case ev == "run_started":
			started[r.MessageID]++
		case ev != "":
			t.Errorf("unexpected %s record for %s", ev, r.MessageID)
		case r.Role == "assistant" && started[r.MessageID] != 1:
			t.Errorf("reply of %s with %d start records before it, want 1", r.MessageID, started[r.MessageID])
		}
	}
	if len(started) != n+1 {
		t.Errorf("%d messages with a start record, want %d", len(started), n+1)
	}
	for id, k := range started {
		if k != 1 {
			t.Errorf("%s: %d start records, want 1", id, k)
		}
	}
}
