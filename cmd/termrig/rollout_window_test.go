package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/fleetsim"
)

// release rollout --window (issue 42): outside it nothing is sent and
// status shows the devices "waiting: window" and the rollout's window;
// a bad window is the server's 400 naming it; --zone needs --window.
func TestReleaseRolloutWindow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const opSecret = "operator-secret-token-0123456789"
	op, _ := config.NewAdminToken(opSecret, config.RoleOperator, "ops")
	srv := servertest.Start(t, func(c *config.Config) { c.Admin.Tokens = []config.AdminToken{op} })
	server := "http://" + srv.Addr
	opFile := filepath.Join(dir, "op")
	_ = os.WriteFile(opFile, []byte(opSecret+"\n"), 0o600)
	if _, err := fleetsim.Upload(ctx, server, opSecret, dir, "v2", "linux/arm/6", []byte("termd v2")); err != nil {
		t.Fatal(err)
	}
	fl, err := fleetsim.Start(ctx, fleetsim.Options{URL: srv.URL, N: 2, Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	api, err := newAPIClient(server, opFile)
	if err != nil {
		t.Fatal(err)
	}
	testwait.UntilOK(t, "the two simulated devices online", func() error {
		var l struct{ Peers []struct{ PeerID string } }
		if err := api.getJSON(ctx, server+"/api/channels/terminal-dev/peers?online=true", "listing peers", &l); err != nil {
			return err
		}
		if len(l.Peers) != 2 {
			return fmt.Errorf("%d online", len(l.Peers))
		}
		return nil
	})
	base := []string{"release", "rollout", "--server", server, "--admin-token-file", opFile, "--version", "v2", "--all"}
	if st, _, errs := termrig(ctx, append(base, "--zone", "device")...); st != 2 || !strings.Contains(errs, "--zone is for a --window") {
		t.Fatalf("--zone alone: exit %d %s", st, errs)
	}
	if st, _, errs := termrig(ctx, append(base, "--window", "25:00-03:00")...); st != 1 || !strings.Contains(errs, "HTTP 400") || !strings.Contains(errs, `window "25:00-03:00"`) {
		t.Fatalf("a bad window: exit %d %s", st, errs)
	}
	// A window of an hour starting two hours from now: closed now (it
	// cannot open before the test ends).
	now := time.Now().UTC()
	window := now.Add(2*time.Hour).Format("15:04") + "-" + now.Add(3*time.Hour).Format("15:04")
	st, out, errs := termrig(ctx, append(base, "--window", window)...)
	if st != 0 || !strings.Contains(out, "(window "+window+" utc)") || !regexp.MustCompile(`sim-001\s+waiting: window\s+v1`).MatchString(out) {
		t.Fatalf("rollout --window %s: exit %d\n%s%s", window, st, out, errs)
	}
	st, out, errs = termrig(ctx, "release", "status", "--server", server, "--admin-token-file", opFile)
	if st != 0 || !strings.Contains(out, "2 waiting") || !regexp.MustCompile(`sim-002\s+waiting: window`).MatchString(out) {
		t.Fatalf("status: exit %d\n%s%s", st, out, errs)
	}
}
