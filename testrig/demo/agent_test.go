package demo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAgentCommand(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "agents"), 0o755)
	os.WriteFile(filepath.Join(dir, "agents", "mine.py"), []byte("print()"), 0o644)
	os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	tests := []struct {
		command string
		err     string // "" = accepted
	}{
		{"sh agents/mine.py", ""},
		{"./run.sh --fast", ""},
		{"sh -c 'echo hi'", ""},           // shell syntax: left to the shell
		{"MODEL=x sh agents/mine.py", ""}, // an assignment first: left to the shell
		{"sh agents/typo.py", "--agent: agents/typo.py: no such file (relative paths are taken from " + dir + ")"},
		{"./missing", "--agent: ./missing: no such file"},
		{"agents/mine.py", "--agent: agents/mine.py: not executable (chmod +x it, or name its interpreter first)"},
		{"no-such-program-here x", "--agent: no-such-program-here: not found on $PATH"},
		{"   ", "--agent: empty command"},
	}
	for _, tt := range tests {
		got, err := agentCommand(dir, tt.command)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%q: %v", tt.command, err)
		case tt.err == "" && got != "cd '"+dir+"' || exit\n"+tt.command:
			t.Errorf("%q: command %q", tt.command, got)
		case tt.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.err)):
			t.Errorf("%q: error %v, want %q", tt.command, err, tt.err)
		}
	}
}
