package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --check-config finds the program of each agent's command as the
// runners will (PATH, the agent's env PATH, an absolute path, a path
// relative to the directory the agent runs in) and names each one that
// cannot run, exit 1; with every program there it says ok (issue 40
// row 11: it said ok for an agent command that did not exist).
func TestCheckConfigAgentPrograms(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	file := func(path string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	file(filepath.Join(dir, "good.sh"), 0o755)
	file(filepath.Join(ws, "bin", "good"), 0o755)
	file(filepath.Join(ws, "bin", "plain"), 0o644)
	file(filepath.Join(ws, "sub", "tool"), 0o755)
	file(filepath.Join(dir, "envbin", "myprog"), 0o755)
	if err := os.MkdirAll(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	term := func(command string) string {
		return fmt.Sprintf(`{"terminal": {"enabled": true, "command": %q}}`, command)
	}
	good := map[string]string{
		"f-good-abs":    term(filepath.Join(dir, "good.sh") + " {message}"),
		"g-good-path":   term("sh -c 'echo hi'"),
		"h-good-rel":    `{"nuum": {"command": "bin/good --stdio"}}`,
		"i-shell":       term("cd /nonexistent && ./x"),
		"j-harness-rel": `{"harness": {"command": "./agent"}}`,
		"k-env-path":    fmt.Sprintf(`{"terminal": {"enabled": true, "command": "myprog {message}", "env": {"PATH": %q}}}`, filepath.Join(dir, "envbin")),
		"m-acp-cwd":     `{"acp": {"command": "./tool --acp", "cwd": "sub"}}`,
		"n-echo":        `{"builtin": "echo"}`,
	}
	bad := map[string]string{
		"a-abs-missing":      term("/nonexistent/agent {message}"),
		"b-path-missing":     `{"nuum": {"command": "no-such-agent-xyz --stdio"}}`,
		"c-relative-missing": `{"acp": {"command": "bin/missing", "args": ["--acp"]}}`,
		"d-not-exec":         term("bin/plain"),
		"e-dir":              term(filepath.Join(dir, "adir")),
		"l-assign":           term("FOO=1 /nonexistent/two {message} | tr a-z A-Z"),
	}
	write := func(name string, agents ...map[string]string) string {
		t.Helper()
		var entries []string
		for _, m := range agents {
			for k, v := range m {
				entries = append(entries, fmt.Sprintf("%q: %s", k, v))
			}
		}
		cfg := fmt.Sprintf(`{"workspace": %q,
		  "channels": {"terminal-dev": {"kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "f-good-abs"}},
		  "agents": {%s}}`, ws, strings.Join(entries, ",\n"))
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	path := write("bad.json", good, bad)
	stdout, stderr, code := checkConfig(t, path)
	if code != 1 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, want 1 and nothing; stderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		path + ": config: agents.a-abs-missing.terminal.command: program /nonexistent/agent does not exist\n",
		path + `: config: agents.b-path-missing.nuum.command: program "no-such-agent-xyz" is not found on PATH (`,
		path + `: config: agents.c-relative-missing.acp.command: program "bin/missing" (relative to the agent's directory ` + ws + "): " + filepath.Join(ws, "bin", "missing") + " does not exist\n",
		path + `: config: agents.d-not-exec.terminal.command: program "bin/plain" (relative to the agent's directory ` + ws + "): " + filepath.Join(ws, "bin", "plain") + " is not executable (chmod +x)\n",
		path + ": config: agents.e-dir.terminal.command: program " + filepath.Join(dir, "adir") + " is a directory\n",
		path + ": config: agents.l-assign.terminal.command: program /nonexistent/two does not exist\n",
		"termserver: " + path + ": 6 problems\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	for name := range good {
		if strings.Contains(stderr, "agents."+name+".") {
			t.Errorf("a good agent is named: %s\n%s", name, stderr)
		}
	}

	path = write("good.json", good)
	if stdout, stderr, code := checkConfig(t, path); code != 0 || !strings.HasPrefix(stdout, path+": ok (channels: 1, ") {
		t.Errorf("every program there: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

// programOf finds the program of a command as the runners run it, or
// says it cannot be told without the shell.
func TestProgramOf(t *testing.T) {
	for cmd, want := range map[string]string{
		"python3 /opt/agent.py":               "python3",
		"./agent {message}":                   "./agent",
		"echo {message} | tr a-z A-Z":         "", // echo is sh's own
		"VAR=x LANG=C /usr/bin/agent | cat":   "/usr/bin/agent",
		"cd dir && ./agent":                   "",
		"$HOME/bin/agent --x":                 "",
		`"/opt/my agent" --x`:                 "",
		"exec /bin/agent":                     "",
		"/bin/agent 'quoted {message}' > out": "/bin/agent",
	} {
		if got := programOf(cmd); got != want {
			t.Errorf("programOf(%q) = %q, want %q", cmd, got, want)
		}
	}
}
