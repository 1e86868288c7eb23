package acp

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/agent"
	"termlink/server/agent/stdio/stdiotest"
	"termlink/server/config"
)

// Agents built by TestMain: the scripted agent (testrig/agents/acpagent)
// and the SDK's own example agent, an independent implementation.
var agentBin, sdkAgentBin string

func TestMain(m *testing.M) {
	os.Exit(stdiotest.Main(m, map[*string]string{
		&agentBin:    "termlink/testrig/agents/acpagent",
		&sdkAgentBin: "github.com/coder/acp-go-sdk/example/agent",
	}))
}

func testOptions(tb testing.TB) Options {
	return Options{
		Logger:            stdiotest.Logger(tb),
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
type recorder = stdiotest.Recorder

func run(tb testing.TB, r *Runner, rc *recorder, key, text string) agent.Result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return r.Run(ctx, rc.Req(key, text), rc.Progress)
}

// runAsync starts a run; the channel gets its result.
func runAsync(ctx context.Context, r *Runner, rc *recorder, key, text string) <-chan agent.Result {
	ch := make(chan agent.Result, 1)
	go func() { ch <- r.Run(ctx, rc.Req(key, text), rc.Progress) }()
	return ch
}

var (
	alive    = stdiotest.Alive
	waitGone = stdiotest.WaitGone
	await    = stdiotest.Await
)

// waitProgress waits for a progress line containing s.
func waitProgress(tb testing.TB, rc *recorder, s string) {
	tb.Helper()
	testwait.UntilOK(tb, fmt.Sprintf("a progress line containing %q", s), func() error {
		prog, _ := rc.Snapshot()
		for _, p := range prog {
			if strings.Contains(p, s) {
				return nil
			}
		}
		return fmt.Errorf("progress %q", prog)
	})
}

// waitTurn waits until the session's process has a prompt in progress.
func waitTurn(tb testing.TB, r *Runner, key string) {
	tb.Helper()
	testwait.Until(tb, "a prompt of session "+key+" in progress", func() bool {
		p, ok := r.Pool.Get(key)
		if !ok {
			return false
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.turn != nil
	})
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

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
