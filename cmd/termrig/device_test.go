package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/servertest"
)

// termrig device settings against a real termserver with admin tokens
// and a device (link.Client listing "settings", acking what it gets):
// a tag's document and a peer's set, the device's view, the documents
// listed, a delete; a viewer may show but not set; bad values and bad
// usage are refused saying why.
func TestDeviceSettings(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const opSecret, viewSecret = "operator-secret-token-0123456789", "viewer-secret-token-0123456789"
	op, _ := config.NewAdminToken(opSecret, config.RoleOperator, "ops")
	view, _ := config.NewAdminToken(viewSecret, config.RoleViewer, "vera")
	dir := t.TempDir()
	srv := servertest.Start(t, func(c *config.Config) {
		c.Admin.Tokens = []config.AdminToken{op, view}
	})
	server := "http://" + srv.Addr
	opFile, viewFile := filepath.Join(dir, "op"), filepath.Join(dir, "view")
	_ = os.WriteFile(opFile, []byte(opSecret+"\n"), 0o600)
	_ = os.WriteFile(viewFile, []byte(viewSecret+"\n"), 0o600)

	client, err := link.NewClient(link.ClientConfig{URL: srv.URL, PeerID: "kiosk-1", StateDir: filepath.Join(dir, "dev"),
		Tags: map[string]string{"site": "lobby"}, Capabilities: append(link.DefaultCapabilities(), link.CapSettings),
		RetryInitial: 50 * time.Millisecond, RetryMax: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.Run(dctx) }()
	go func() {
		for f := range client.Fleet() {
			if s, ok := f.(*link.Settings); ok {
				_ = client.Report(&link.SettingsAck{Version: s.Version})
			}
		}
	}()
	defer func() { stop(); <-done }()
	testwait.Until(t, "the device connected", func() bool { return client.Status().State == link.StateConnected })

	st, out, errs := termrig(ctx, "device", "settings", "--server", server, "--admin-token-file", opFile, "--tag", "site=lobby", "--idle-text", "Welcome", "--idle-seconds", "30")
	if st != 0 || !strings.Contains(out, "set the settings of tag site=lobby on terminal-dev: version 1, pushed to 1 online device(s)") {
		t.Fatalf("set tag: exit %d\n%s%s", st, out, errs)
	}
	st, out, errs = termrig(ctx, "device", "settings", "--server", server, "--admin-token-file", opFile, "--peer", "kiosk-1", "--log-level", "debug", "--set-tag", "site=lobby", "--set-tag", "floor=2")
	if st != 0 || !strings.Contains(out, "version 2") {
		t.Fatalf("set peer: exit %d\n%s%s", st, out, errs)
	}
	// The device acks: --show says it is current, with its new tags.
	testwait.UntilOK(t, "--show to say the device applied version 2 with its new tags", func() error {
		st, out, errs = termrig(ctx, "device", "settings", "--server", server, "--admin-token-file", viewFile, "--peer", "kiosk-1", "--show")
		if st == 0 && strings.Contains(out, "applied 2: current") && strings.Contains(out, "floor=2,site=lobby") {
			return nil
		}
		return fmt.Errorf("exit %d\n%s%s", st, out, errs)
	})
	for _, want := range []string{"peer      kiosk-1 (online)", "from      tag site=lobby, peer", `idle_text  "Welcome"`, "idle_seconds  30", `log_level  "debug"`} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	st, out, errs = termrig(ctx, "device", "settings", "--server", server, "--admin-token-file", viewFile, "--show")
	if st != 0 || !strings.Contains(out, "settings version 2, 2 of 1000 documents") || !strings.Contains(out, "tag site=lobby") || !strings.Contains(out, `idle_text="Welcome"`) {
		t.Fatalf("show all: exit %d\n%s%s", st, out, errs)
	}
	// A viewer may not set; bad values come back naming the field.
	if st, _, errs = termrig(ctx, "device", "settings", "--server", server, "--admin-token-file", viewFile, "--peer", "kiosk-1", "--log-level", "info"); st != 1 || !strings.Contains(errs, "HTTP 403") {
		t.Fatalf("set as a viewer: exit %d %s", st, errs)
	}
	if st, _, errs = termrig(ctx, "device", "settings", "--server", server, "--admin-token-file", opFile, "--peer", "kiosk-1", "--log-level", "loud"); st != 1 || !strings.Contains(errs, "HTTP 400 log_level: must be debug, info, warn or error") {
		t.Fatalf("a bad log level: exit %d %s", st, errs)
	}
	if st, _, errs = termrig(ctx, "device", "settings", "--server", server, "--admin-token-file", opFile, "--tag", "site=lobby", "--set-tag", "a=b"); st != 1 || !strings.Contains(errs, "HTTP 400 tags: only a peer's document") {
		t.Fatalf("tags on a tag's document: exit %d %s", st, errs)
	}
	st, out, errs = termrig(ctx, "device", "settings", "--server", server, "--admin-token-file", opFile, "--tag", "site=lobby", "--delete")
	if st != 0 || !strings.Contains(out, "deleted the settings of tag site=lobby on terminal-dev: version 3") {
		t.Fatalf("delete: exit %d\n%s%s", st, out, errs)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"settings", "--server", server, "--peer", "p", "--tag", "a=b", "--log-level", "info"}, "exclude each other"},
		{[]string{"settings", "--server", server, "--peer", "p"}, "no settings given"},
		{[]string{"settings", "--server", server, "--log-level", "info"}, "which document?"},
		{[]string{"settings", "--server", server, "--tag", "ab", "--log-level", "info"}, `--tag "ab": want key=value`},
		{[]string{"settings", "--server", server, "--peer", "p", "--delete", "--log-level", "info"}, "--delete removes the whole document"},
		{[]string{"settings", "--server", server, "--peer", "p", "--idle-seconds", "-1"}, "want a whole number of seconds"},
		{[]string{"settings", "--server", server, "--peer", "p", "--show", "--idle-text", "x"}, "--show changes nothing"},
		{[]string{"reboot"}, `unknown device command "reboot": settings, logs or selftest`},
		{[]string{"logs"}, "--peer is required"}, // deviceDiag's (diag.go)
		{nil, "which device command?"},
	} {
		if st, _, errs := termrig(ctx, append([]string{"device"}, tc.args...)...); st != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("device %q: exit %d %s, want 2 with %q", tc.args, st, errs, tc.want)
		}
	}
}
