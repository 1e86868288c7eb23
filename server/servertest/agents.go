package servertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"termlink/server/config"
)

type builtAgent struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

var built sync.Map // package path -> *builtAgent

// BuildAgent builds the agent command of package pkg (such as
// "termlink/testrig/agents/acpagent") once per test process and returns
// its path; the binary stays in a temporary directory until the machine
// cleans it.
func BuildAgent(tb testing.TB, pkg string) string {
	tb.Helper()
	v, _ := built.LoadOrStore(pkg, &builtAgent{})
	b := v.(*builtAgent)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "termlink-agent")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, filepath.Base(pkg))
		b.out, b.err = exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput()
	})
	if b.err != nil {
		tb.Fatalf("servertest: building %s: %v\n%s", pkg, b.err, b.out)
	}
	return b.path
}

// WithACP is a Start mutation: channel terminal-dev runs the ACP agent
// command bin (args none), one process per session, permissions
// rejected.
func WithACP(bin string) func(*config.Config) {
	return func(c *config.Config) {
		c.Agents["coder"] = config.Agent{ACP: &config.ACPAgent{Command: bin, Args: []string{}, Permission: config.ACPPermissionReject,
			IdleTimeout: 600, MaxProcesses: 4, StartTimeout: 30, AskTimeout: 30}}
		ch := c.Channels["terminal-dev"]
		ch.Agent = "coder"
		c.Channels["terminal-dev"] = ch
	}
}
