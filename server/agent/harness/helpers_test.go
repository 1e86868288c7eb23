package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/procs"
	"termlink/server/config"
	"termlink/testrig/needtool"

	"termlink/internal/testwait"
)

// script is a scripted agent: a shell script that saves each request it
// gets to req-<step>.txt and answers with resp-<step>.txt (or
// resp-default.txt) from its directory.
type script struct {
	t   *testing.T
	dir string
	cmd string // the agent command
}

const agentScript = `d=%s
cat > "$d/req-$TERMLINK_STEP.txt"
printf '%%s' "$TERMLINK_SESSION" > "$d/session.txt"
f="$d/resp-$TERMLINK_STEP.txt"
[ -f "$f" ] || f="$d/resp-default.txt"
cat "$f"
`

func newScript(t *testing.T) *script {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.sh")
	if err := os.WriteFile(path, fmt.Appendf(nil, agentScript, shellQuote(dir)), 0o755); err != nil {
		t.Fatal(err)
	}
	return &script{t: t, dir: dir, cmd: "sh " + shellQuote(path)}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// reply sets the raw response of a step (0: every step without its own).
func (s *script) reply(step int, text string) {
	s.t.Helper()
	name := "resp-default.txt"
	if step > 0 {
		name = fmt.Sprintf("resp-%d.txt", step)
	}
	if err := os.WriteFile(filepath.Join(s.dir, name), []byte(text), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// request returns what the agent got at step, "" if it did not run.
func (s *script) request(step int) string {
	b, err := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("req-%d.txt", step)))
	if err != nil {
		return ""
	}
	return string(b)
}

// steps counts the requests the agent got.
func (s *script) steps() int {
	m, _ := filepath.Glob(filepath.Join(s.dir, "req-*.txt"))
	return len(m)
}

// reset forgets the requests and responses, for the next task.
func (s *script) reset() {
	for _, pat := range []string{"req-*.txt", "resp-*.txt"} {
		m, _ := filepath.Glob(filepath.Join(s.dir, pat))
		for _, f := range m {
			os.Remove(f)
		}
	}
}

var quiet = slog.New(slog.DiscardHandler)

type cmd struct {
	Keystrokes string  `json:"keystrokes"`
	Duration   float64 `json:"duration"`
}

// jsonReply is a well-formed JSON response.
func jsonReply(analysis string, complete bool, cmds ...cmd) string {
	if cmds == nil {
		cmds = []cmd{}
	}
	b, err := json.Marshal(map[string]any{"analysis": analysis, "plan": "the plan", "commands": cmds, "task_complete": complete})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// xmlReply is a well-formed XML response.
func xmlReply(analysis string, complete bool, cmds ...cmd) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<response>\n<analysis>\n%s\n</analysis>\n<plan>\nthe plan\n</plan>\n<commands>\n", analysis)
	for _, c := range cmds {
		fmt.Fprintf(&b, "<command>\n<keystrokes>%s</keystrokes>\n<duration>%g</duration>\n</command>\n", c.Keystrokes, c.Duration)
	}
	fmt.Fprintf(&b, "</commands>\n<task_complete>%v</task_complete>\n</response>\n", complete)
	return b.String()
}

func requireTmux(t *testing.T) {
	t.Helper()
	needtool.Path(t, "tmux", "the harness's tmux target; apt-get install tmux")
}

// newRunner returns a Runner for the scripted agent, closed at the end of
// the test. change edits the config before New.
func newRunner(t *testing.T, target, command string, opt Options, change func(*config.HarnessAgent)) *Runner {
	t.Helper()
	if target == TargetTmux {
		requireTmux(t)
	}
	cfg := config.HarnessAgent{Command: command, Target: target, MaxSteps: 10, MaxDuration: 60, ObservationBytes: 10000, StepTimeout: 20}
	if change != nil {
		change(&cfg)
	}
	if opt.Workspace == "" {
		opt.Workspace = t.TempDir()
	}
	if opt.Logger == nil {
		opt.Logger = quiet
	}
	if opt.Cols == 0 {
		opt.Cols, opt.Rows = 80, 24
	}
	r, err := New("test", cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

// progressLog collects progress lines.
type progressLog struct {
	mu    sync.Mutex
	lines []string
}

func (p *progressLog) add(s string) {
	p.mu.Lock()
	p.lines = append(p.lines, s)
	p.mu.Unlock()
}

func (p *progressLog) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

func runTask(t *testing.T, r *Runner, session, task string) (agent.Result, *progressLog) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := &progressLog{}
	res := r.Run(ctx, agent.Request{SessionKey: session, Text: task, Workspace: r.opt.Workspace}, p.add)
	return res, p
}

// runGuard bounds a run whose command waits MaxDuration (60 s) when the
// behaviour under test must cut that wait short: a hang guard, far from
// both the second such a run takes and the minute it takes without it.
const runGuard = 30 * time.Second

// runWithin runs req and fails the test if Run has not returned within
// runGuard.
func runWithin(t *testing.T, r *Runner, ctx context.Context, req agent.Request, progress agent.Progress) agent.Result {
	t.Helper()
	done := make(chan agent.Result, 1)
	go func() { done <- r.Run(ctx, req, progress) }()
	select {
	case res := <-done:
		return res
	case <-time.After(runGuard):
		t.Fatalf("Run(%q) did not return within %v", req.Text, runGuard)
		return agent.Result{}
	}
}

// screenOf returns the terminal state part of a request.
func screenOf(req string) string {
	_, s, _ := strings.Cut(req, "Current terminal state:\n")
	if i := strings.Index(s, "\n\nAre you sure"); i >= 0 {
		s = s[:i]
	}
	return s
}

// countLines counts the lines of s equal to line.
func countLines(s, line string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == line {
			n++
		}
	}
	return n
}

// processGone reports whether pid has exited (or is a zombie).
func processGone(pid int) bool { return !procs.Running(pid) }

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testwait.Until(t, "a pid in "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}
