package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/tmuxtest"
)

// deviceDiag runs `termrig device ARGS` as the device command hands it
// over, on buffers.
func runDeviceDiag(ctx context.Context, args ...string) (out, errOut string, err error) {
	var o, e bytes.Buffer
	err = (&app{stdout: &o, stderr: &e}).deviceDiag(ctx, args)
	return o.String(), e.String(), err
}

// termrig device logs and selftest against a real termd binary (the sim
// board: a console in tmux) connected to a real termserver with admin
// tokens: the log holds termd's own "termd starting" line, the self-test
// passes (exit 0) and prints its table; a viewer's token, a peer that is
// not connected and bad flags are refused with what to do.
func TestDeviceDiagEndToEnd(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: builds termd and runs it in tmux against a real termserver (make test runs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "termd")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "-ldflags", "-X main.version=2.0-diag", "termlink/cmd/termd").CombinedOutput(); err != nil {
		t.Fatalf("building termd: %v\n%s", err, out)
	}
	const opSecret, viewSecret = "operator-secret-token-0123456789", "viewer-secret-token-0123456789"
	op, _ := config.NewAdminToken(opSecret, config.RoleOperator, "ops")
	view, _ := config.NewAdminToken(viewSecret, config.RoleViewer, "vera")
	srv := servertest.Start(t, func(c *config.Config) { c.Admin.Tokens = []config.AdminToken{op, view} })
	opFile, viewFile := filepath.Join(dir, "op"), filepath.Join(dir, "viewer")
	_ = os.WriteFile(opFile, []byte(opSecret+"\n"), 0o600)
	_ = os.WriteFile(viewFile, []byte(viewSecret+"\n"), 0o600)
	server := "http://" + srv.Addr

	w := tmuxtest.Start(t, 80, 20, fmt.Sprintf("%s --server %s --board sim --state-dir %s --peer-id lobby-1", bin, srv.Addr, filepath.Join(dir, "state")))
	w.WaitFor("online", testwait.Deadline)

	out, _, err := runDeviceDiag(ctx, "logs", "--server", server, "--peer", "lobby-1", "--admin-token-file", opFile, "--bytes", "8000")
	if err != nil || !strings.Contains(out, `msg="termd starting" version=2.0-diag`) || len(out) > 8000 {
		t.Fatalf("logs: %v\n%s", err, out)
	}
	out, _, err = runDeviceDiag(ctx, "selftest", "--server", server, "--peer", "lobby-1", "--admin-token-file", opFile)
	if err != nil || !strings.Contains(out, "state-dir     PASS") || !strings.Contains(out, "link          PASS    connected") ||
		!strings.Contains(out, "selftest: PASS (3 checks; 2 not applicable)") || !strings.Contains(out, "(lobby-1 answered in ") {
		t.Fatalf("selftest: %v\n%s", err, out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "--server", server, "--peer", "lobby-1", "--admin-token-file", viewFile}, "HTTP 403"},
		{[]string{"logs", "--server", server, "--peer", "lobby-1"}, "pass --admin-token-file"},
		{[]string{"selftest", "--server", server, "--peer", "nobody", "--admin-token-file", opFile}, `HTTP 404 no peer "nobody" on channel terminal-dev`},
	} {
		if _, _, err := runDeviceDiag(ctx, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}

	w.Keys("C-d") // termd quits
	w.WaitFor("EXIT=0", testwait.Deadline)
	testwait.UntilOK(t, "the logs of a device gone refused as not connected", func() error {
		_, _, err = runDeviceDiag(ctx, "logs", "--server", server, "--peer", "lobby-1", "--admin-token-file", opFile)
		if err != nil && strings.Contains(err.Error(), "HTTP 409 peer lobby-1 is not connected") {
			return nil
		}
		return fmt.Errorf("logs: %v", err)
	})
}

// Usage errors say what is wrong and exit 2; a failed self-test exits 1.
func TestDeviceDiagUsage(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "which device command? logs or selftest"},
		{[]string{"reboot"}, `unknown device command "reboot"`},
		{[]string{"logs", "--server", "http://127.0.0.1:1"}, "--peer is required"},
		{[]string{"logs", "--peer", "p"}, "--server is required"},
		{[]string{"logs", "--server", "ftp://x", "--peer", "p"}, "want http://HOST:PORT"},
		{[]string{"logs", "--server", "http://127.0.0.1:1", "--peer", "p", "--bytes", "70000"}, "--bytes must be from 1 to 65536, got 70000"},
		{[]string{"selftest", "--server", "http://127.0.0.1:1", "--peer", "p", "extra"}, "extra"},
	} {
		_, _, err := runDeviceDiag(ctx, c.args...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
	if out, _, err := runDeviceDiag(ctx, "-h"); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out, "logs --server URL --peer P [--bytes N]") {
		t.Errorf("-h: %v %q", err, out)
	}
	// A report that failed: printed, exit status 1.
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/channels/lab/peers/p%2F1/selftest" && r.URL.EscapedPath() != "/api/channels/lab/peers/p%2F1/selftest" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.EscapedPath(), http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok": false, "text": "clock  FAIL  the clock reads 1970\nselftest: FAIL (4 passed, 1 failed)\n", "took": "12ms"}`))
	}))
	defer fake.Close()
	out, _, err := runDeviceDiag(ctx, "selftest", "--server", fake.URL, "--peer", "p/1", "--channel", "lab")
	if !errors.Is(err, exitFailed) || !strings.Contains(out, "selftest: FAIL (4 passed, 1 failed)\n(p/1 answered in 12ms)\n") {
		t.Errorf("failed self-test: %v\n%s", err, out)
	}
	// deviceDiag, as the device command calls it.
	if err := deviceDiag([]string{"logs"}); err == nil || !strings.Contains(err.Error(), "--peer is required") {
		t.Errorf("deviceDiag: %v", err)
	}
}
