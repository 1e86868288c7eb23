package acp

import (
	"os"
	"strings"
	"testing"
	"time"

	"termlink/server/config"
)

// NPMAgentEnv names the installed @zed-industries/claude-code-acp (its
// node_modules/.bin/claude-code-acp) for TestRealNPMAgent; .ci/run may set
// it after `npm install` into a temp dir.
const NPMAgentEnv = "TERMLINK_CLAUDE_CODE_ACP"

// A real ACP agent from npm, without credentials: the handshake
// (initialize, protocol 1) succeeds, and the failure that follows is an
// error reply whose first line says what to do, not a hang. It proves the
// SDK and the runner interoperate with a real agent's initialize and that
// its error surfaces clearly; it does not prove a prompt works (that
// needs an API key).
func TestRealNPMAgent(t *testing.T) {
	bin := os.Getenv(NPMAgentEnv)
	if bin == "" {
		t.Skipf("%s is not set (npm install @zed-industries/claude-code-acp and point it at node_modules/.bin/claude-code-acp)", NPMAgentEnv)
	}
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("HOME", t.TempDir()) // no stored login
	r := newRunner(t, nil, func(c *config.ACPAgent, o *Options) {
		c.Command, c.Args = bin, []string{}
		o.StartTimeout = 60 * time.Second
	})
	res := run(t, r, &recorder{Workspace: t.TempDir()}, "s", "hello")
	t.Logf("reply: %+v", res)
	if res.FinishReason != "error" {
		t.Fatalf("without credentials the agent answered %+v", res)
	}
	line := firstLine(res.Text)
	if strings.Contains(res.Text, "initialize") {
		t.Fatalf("the handshake failed: %q", res.Text)
	}
	if !strings.HasPrefix(line, "Sign the agent in") && !strings.HasPrefix(line, "The agent answered session/") {
		t.Fatalf("first line %q does not say what to do", line)
	}
}
