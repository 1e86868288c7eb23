package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"termlink/internal/testwait"
)

// checkConfig runs the real binary's --check-config on path.
func checkConfig(t *testing.T, path string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--check-config", path)
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

func examples(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("examples/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	return files
}

// Every example config passes --check-config (issue 23 row 4).
func TestExamplesPassCheckConfig(t *testing.T) {
	t.Parallel()
	for _, f := range examples(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := checkConfig(t, f)
			if code != 0 || !strings.HasPrefix(stdout, f+": ok (") {
				t.Errorf("%s: exit %d\nstdout %s\nstderr %s", f, code, stdout, stderr)
			}
		})
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
	root, _ := filepath.Abs("../..")
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
