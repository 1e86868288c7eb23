package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/server/config"
	"termlink/server/servertest"
)

// enroll-test against a real server: a code, the approval (--approve,
// loopback operator), the token, a connection and a reply; the token is
// not printed.
func TestEnrollTestCommand(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		ch.Config.Enrollment = true
		c.Channels["terminal-dev"] = ch
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	status := run(ctx, []string{"enroll-test", "--server", "http://" + srv.Addr, "--peer-id", "rig-1", "--approve", "--timeout", "50s"}, &out, &errb)
	if status != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", status, out.String(), errb.String())
	}
	for _, want := range []string{"pairing code ", "approved through the operator API", "enrolled as peer_id rig-1", "reply: You said: hello from enroll-test", "PASS enroll-test"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "tl_") {
		t.Fatalf("the output shows the token:\n%s", out.String())
	}
	// A channel without enrollment: a clear refusal.
	off := servertest.Start(t, nil)
	out.Reset()
	errb.Reset()
	if status := run(ctx, []string{"enroll-test", "--server", "http://" + off.Addr, "--approve", "--timeout", "20s"}, &out, &errb); status != 1 ||
		!strings.Contains(errb.String(), "enrollment is off on channel") {
		t.Fatalf("exit %d, stderr %s", status, errb.String())
	}
}

// Against a server with admin tokens: --approve without a token is refused
// with a pointer at --admin-token-file; the curl command enroll-test prints
// (JSON, the token read from the file) approves the code when a shell runs
// it, and the built binary's stderr holds no log line in another format.
func TestEnrollTestAdminToken(t *testing.T) {
	t.Parallel()
	const secret = "operator-secret-token-0123456789"
	tok, err := config.NewAdminToken(secret, config.RoleOperator, "ops")
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		ch.Config.Enrollment = true
		c.Channels["terminal-dev"] = ch
		c.Admin.Tokens = []config.AdminToken{tok}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if status := run(ctx, []string{"enroll-test", "--server", "http://" + srv.Addr, "--approve", "--timeout", "20s"}, &out, &errb); status != 1 ||
		!strings.Contains(errb.String(), "HTTP 401") || !strings.Contains(errb.String(), "pass --admin-token-file") {
		t.Fatalf("no token: exit %d, stderr %s", status, errb.String())
	}

	tokenFile := filepath.Join(t.TempDir(), "admin token")
	if err := os.WriteFile(tokenFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildTermrig(t)
	cmd := exec.CommandContext(ctx, bin, "enroll-test", "--server", "http://"+srv.Addr, "--peer-id", "rig-2",
		"--admin-token-file", tokenFile, "--timeout", "60s")
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(pipe)
	var printed []string
	for sc.Scan() {
		line := sc.Text()
		printed = append(printed, line)
		if strings.HasPrefix(strings.TrimSpace(line), "curl ") {
			for _, want := range []string{`-H "Authorization: Bearer $(cat '` + tokenFile + `')"`, "-H 'Content-Type: application/json'"} {
				if !strings.Contains(line, want) {
					t.Errorf("curl line lacks %s:\n%s", want, line)
				}
			}
			if strings.Contains(line, secret) {
				t.Fatalf("the curl line shows the admin token: %s", line)
			}
			// The operator runs it as printed.
			res, err := exec.CommandContext(ctx, "sh", "-c", strings.TrimSpace(line)+" --silent --show-error --fail-with-body").CombinedOutput()
			if err != nil {
				t.Fatalf("the printed curl failed: %v\n%s\n%s", err, line, res)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("enroll-test: %v\nstdout:\n%s\nstderr:\n%s", err, strings.Join(printed, "\n"), stderr.String())
	}
	if got := strings.Join(printed, "\n"); !strings.Contains(got, "PASS enroll-test") || strings.Contains(got, "ADMIN_TOKEN_FILE") {
		t.Fatalf("stdout:\n%s", got)
	}
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if l != "" && !strings.HasPrefix(l, "time=") {
			t.Errorf("stderr line not in termrig's log format: %q", l)
		}
	}
}
