package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary, "--help").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "termserver is the termlink server") ||
		!strings.Contains(string(out), "Example:") || !strings.Contains(string(out), "-config file") {
		t.Fatalf("termserver --help: %v\n%s", err, out)
	}
}

// With --config and no workspace key, the workspace is beside the config
// file, and the start-up log says where.
func TestWorkspaceBesideConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "termserver.json")
	if err := os.WriteFile(cfg, []byte(`{"channels": {"terminal-dev": {"kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "echo"}},
	  "agents": {"echo": {"builtin": "echo"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, cfg)
	ws := filepath.Join(dir, "workspace")
	if !strings.Contains(p.log.String(), "workspace="+ws) {
		t.Fatalf("the start-up log does not name the workspace %s:\n%s", ws, p.log)
	}
	if _, err := os.Stat(ws); err != nil {
		t.Fatalf("workspace: %v", err)
	}
}
