package acp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"termlink/server/agent"
	"termlink/server/config"
)

// Agents built by TestMain: the scripted agent (testrig/agents/acpagent)
// and the SDK's own example agent, an independent implementation.
var agentBin, sdkAgentBin string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "acptest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	agentBin = filepath.Join(dir, "acpagent")
	sdkAgentBin = filepath.Join(dir, "sdkagent")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	for bin, pkg := range map[string]string{agentBin: "termlink/testrig/agents/acpagent", sdkAgentBin: "github.com/coder/acp-go-sdk/example/agent"} {
		if out, err := exec.Command(goTool, "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	return m.Run()
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testOptions(tb testing.TB) Options {
	return Options{
		Logger:            slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		IdleTimeout:       time.Minute,
		StartTimeout:      5 * time.Second,
		AskTimeout:        5 * time.Second,
		InterruptWait:     2 * time.Second,
		WriteTimeout:      2 * time.Second,
		StopGrace:         500 * time.Millisecond,
		RestartBackoffMin: 50 * time.Millisecond,
		RestartBackoffMax: 400 * time.Millisecond,
	}
}

func newRunner(tb testing.TB, args []string, edit func(*config.ACPAgent, *Options)) *Runner {
	tb.Helper()
	cfg := config.ACPAgent{Command: agentBin, Args: args, MaxProcesses: 4}
	if len(args) == 0 {
		cfg.Args = []string{"--protocol", "1"}
	}
	opt := testOptions(tb)
	if edit != nil {
		edit(&cfg, &opt)
	}
	r, err := New("test", cfg, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// recorder is a session as the router presents it.
type recorder struct {
	mu       sync.Mutex
	meta     map[string]any
	events   []string
	progress []string
	onProg   func(string)
	caps     []string
	ws       string
}

func (rc *recorder) req(key, text string) agent.Request {
	return agent.Request{
		ChannelID: "terminal-dev", SessionKey: key, MessageID: fmt.Sprintf("m-%d", time.Now().UnixNano()), Text: text,
		Workspace: rc.ws, Capabilities: rc.caps,
		UpdateMeta: func(ctx context.Context, update func(map[string]any)) error {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			if rc.meta == nil {
				rc.meta = map[string]any{}
			}
			update(rc.meta)
			return nil
		},
		Event: func(name, detail string) {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			rc.events = append(rc.events, name+" "+detail)
		},
	}
}

func (rc *recorder) progressFunc(text string) {
	rc.mu.Lock()
	rc.progress = append(rc.progress, text)
	on := rc.onProg
	rc.mu.Unlock()
	if on != nil {
		on(text)
	}
}

func (rc *recorder) snapshot() (progress, events []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.progress), slices.Clone(rc.events)
}

func run(tb testing.TB, r *Runner, rc *recorder, key, text string) agent.Result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return r.Run(ctx, rc.req(key, text), rc.progressFunc)
}

// runAsync starts a run; the channel gets its result.
func runAsync(ctx context.Context, r *Runner, rc *recorder, key, text string) <-chan agent.Result {
	ch := make(chan agent.Result, 1)
	go func() { ch <- r.Run(ctx, rc.req(key, text), rc.progressFunc) }()
	return ch
}

func await(tb testing.TB, ch <-chan agent.Result, within time.Duration) agent.Result {
	tb.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(within):
		tb.Fatalf("no result within %s", within)
		return agent.Result{}
	}
}

// waitProgress waits for a progress line containing s.
func waitProgress(tb testing.TB, rc *recorder, s string) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		prog, _ := rc.snapshot()
		for _, p := range prog {
			if strings.Contains(p, s) {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	prog, _ := rc.snapshot()
	tb.Fatalf("no progress containing %q; got %q", s, prog)
}

func agentPID(tb testing.TB, r *Runner, key string) int {
	tb.Helper()
	res := run(tb, r, &recorder{}, key, "/pid")
	var pid int
	if _, err := fmt.Sscanf(res.Text, "pid %d", &pid); err != nil {
		tb.Fatalf("/pid answered %+v", res)
	}
	return pid
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2] != 'Z'
	}
	return true
}

func waitGone(tb testing.TB, pid int, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			tb.Fatalf("process %d still alive after %s", pid, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
