package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
)

// checkConfig runs the real binary's --check-config on path.
func checkConfig(t *testing.T, path string) (stdout, stderr string, code int) {
	t.Helper()
	return checkConfigEnv(t, path, nil)
}

// checkConfigEnv runs --check-config with env added to the test's
// environment (a later entry wins).
func checkConfigEnv(t *testing.T, path string, env []string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--check-config", path)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("--check-config %s: %v", path, err)
	}
	return o.String(), e.String(), code
}

// tryConfig is the example that runs from a clone as it is.
const tryConfig = "examples/try/termserver.json"

// examples are the example configs: the production ones and try/'s.
func examples(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("examples/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	more, err := filepath.Glob("examples/*/*.json")
	if err != nil || len(more) == 0 {
		t.Fatalf("no examples in examples/*/ (try/): %v", err)
	}
	return append(files, more...)
}

// productionPrograms are the agent programs the production examples run
// that a test machine does not have: stubs of them stand in on PATH, as
// the real ones would on the server the example is for.
var productionPrograms = []string{"gemini", "nuum", "python3"}

// stubPath is a PATH of stub executables named progs, before the test's.
func stubPath(t *testing.T, progs ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range progs {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return "PATH=" + dir + string(filepath.ListSeparator) + os.Getenv("PATH")
}

// Every example config passes --check-config (issue 23 row 4): the
// production ones where their agents' programs are installed, the try
// example as it is in a clone, with nothing installed.
func TestExamplesPassCheckConfig(t *testing.T) {
	t.Parallel()
	path := stubPath(t, productionPrograms...)
	for _, f := range examples(t) {
		t.Run(strings.TrimPrefix(f, "examples/"), func(t *testing.T) {
			t.Parallel()
			var env []string
			if f != tryConfig {
				env = []string{path}
			}
			stdout, stderr, code := checkConfigEnv(t, f, env)
			if code != 0 || !strings.HasPrefix(stdout, f+": ok (") {
				t.Errorf("%s: exit %d\nstdout %s\nstderr %s", f, code, stdout, stderr)
			}
		})
	}
}

// Every example config loads with the real config loader, and the try
// example is what it says: loopback only, a workspace in the clone (under
// examples/try/), its channel's agent a program shipped beside it.
func TestExamplesLoad(t *testing.T) {
	t.Parallel()
	for _, f := range examples(t) {
		cfg, err := config.Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(cfg.Channels) == 0 || len(cfg.Agents) == 0 {
			t.Errorf("%s: %d channels, %d agents", f, len(cfg.Channels), len(cfg.Agents))
		}
	}
	cfg, err := config.Load(tryConfig)
	if err != nil {
		t.Fatal(err)
	}
	if host, _, err := net.SplitHostPort(cfg.Listen); err != nil || host != "127.0.0.1" {
		t.Errorf("try listens on %q, want 127.0.0.1:PORT", cfg.Listen)
	}
	dir, _ := filepath.Abs("examples/try")
	if !strings.HasPrefix(cfg.Workspace, dir+string(filepath.Separator)) {
		t.Errorf("try's workspace %s is not under %s", cfg.Workspace, dir)
	}
	a := cfg.Agents[cfg.Channels["terminal-dev"].Agent]
	if a.Terminal == nil || a.Terminal.Protocol != "rich" || !a.Terminal.Enabled {
		t.Fatalf("try's channel agent is not an enabled rich terminal agent: %+v", a)
	}
	if problems := checkAgentPrograms(tryConfig, cfg, ""); len(problems) > 0 {
		t.Errorf("try's agent programs, with no PATH at all: %v", problems)
	}
}

// The try example runs from a clone as it is: termserver started with it
// answers a device through the shipped shell agent, streamed word by
// word to a device that lists "stream". (A copy of examples/try, so the
// workspace it makes is the test's.)
func TestTryExampleStreams(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"termserver.json", "stream-echo.sh"} {
		b, err := os.ReadFile(filepath.Join("examples/try", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := start(t, filepath.Join(dir, "termserver.json"))
	d := connect(t, p, "try-1", link.CapText, link.CapStream)
	d.send(&link.Message{MessageID: "m-1", Text: `hello "there"`})
	if _, ok := d.read().(*link.Ack); !ok {
		t.Fatal("no ack")
	}
	var streamed strings.Builder
	deltas := 0
	for {
		switch f := d.read().(type) {
		case *link.Delta:
			deltas++
			streamed.WriteString(f.Text)
			continue
		case *link.Message:
			const want = `You said: hello "there"`
			if f.Text != want || f.FinishReason != "stop" {
				t.Fatalf("reply %q (%s), want %q (stop)", f.Text, f.FinishReason, want)
			}
			if deltas < 2 || !strings.HasPrefix(want, streamed.String()) || streamed.Len() == 0 {
				t.Fatalf("streamed %q in %d deltas before the reply, want the reply's start in several", streamed.String(), deltas)
			}
			return
		default:
			t.Fatalf("unexpected frame %T %+v", f, f)
		}
	}
}

// --check-config lists every problem with its key path and exits 1.
func TestCheckConfigReportsEveryProblem(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.json")
	cfg := `{"channels": {"kiosk": {"kind": "terminal", "mode": "websocket", "accountId": "local",
	  "agent": "helpr", "enrollment": true, "config": {"heartbeatSeconds": "often"}}}}`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := checkConfig(t, path)
	if code != 1 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, want 1 and nothing", code, stdout)
	}
	for _, want := range []string{
		path + `: config: channels.kiosk.agent: unknown agent "helpr" (defined: echo)` + "\n",
		path + ": config: channels.kiosk.config.heartbeatSeconds: must be",
		path + ": config: channels.kiosk.enrollment: unknown key (known: enabled, kind, mode, accountId, displayName, agent, config); it belongs in channels.kiosk.config.enrollment\n",
		"termserver: " + path + ": 3 problems\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if _, stderr, code := checkConfig(t, filepath.Join(t.TempDir(), "missing.json")); code != 1 || !strings.Contains(stderr, "missing.json: config: cannot read") {
		t.Errorf("missing file: exit %d, %s", code, stderr)
	}
}

// squeeze drops all white space, so a snippet indented in a list item
// matches the file.
func squeeze(s string) string {
	return strings.Join(strings.Fields(s), "")
}

var jsonBlockRE = regexp.MustCompile("(?ms)^ *```json\n(.*?)^ *```")

// Every JSON block of the README is an example file or a part of one
// (a block of several alternatives, one per line, line by line), so the
// README's configs are the ones --check-config passes.
func TestReadmeConfigsAreExamples(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range examples(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, squeeze(string(b)))
	}
	found := func(snippet string) bool {
		for _, f := range files {
			if strings.Contains(f, squeeze(snippet)) {
				return true
			}
		}
		return false
	}
	blocks := jsonBlockRE.FindAllSubmatch(readme, -1)
	if len(blocks) < 7 {
		t.Fatalf("found %d JSON blocks in README.md; the pattern is stale", len(blocks))
	}
	configs := 0
	for _, m := range blocks {
		block := string(m[1])
		if !strings.Contains(block, `"`) {
			continue
		}
		// Wire frames and API bodies are JSON too; configs name a config key.
		if !regexp.MustCompile(`"(listen|workspace|channels|agents|tokens|cluster|admin|tls)"\s*:`).MatchString(block) {
			continue
		}
		configs++
		if found(block) {
			continue
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
			lines = append(lines, strings.TrimSpace(l))
		}
		for _, l := range lines {
			if !found(l) {
				t.Errorf("README.md config block is in no file of cmd/termserver/examples/ (line %q):\n%s", l, block)
				break
			}
		}
	}
	if configs < 7 {
		t.Errorf("checked %d config blocks of README.md, want at least 7", configs)
	}
}

// The README's quick try of the Go example agent (a config written by a
// heredoc) passes --check-config too.
func TestReadmeHeredocConfig(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)cat > /tmp/termserver.json <<JSON\n(.*?)\n *JSON\n`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md: the heredoc config (cat > /tmp/termserver.json <<JSON) is gone; update this test")
	}
	// $PWD is the clone, where the recipe built bin/echoagent: a stub
	// stands in for it (--check-config checks the program exists).
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "echoagent"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(string(m[1]), "$PWD", root)
	var v any
	if err := json.Unmarshal([]byte(cfg), &v); err != nil {
		t.Fatalf("heredoc config is not JSON: %v\n%s", err, cfg)
	}
	path := filepath.Join(t.TempDir(), "termserver.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := checkConfig(t, path); code != 0 {
		t.Errorf("heredoc config: exit %d\n%s%s", code, stdout, stderr)
	}
}
