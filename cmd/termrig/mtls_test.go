package main

import (
	"os"
	"strings"
	"testing"

	"termlink/internal/testpki"
	"termlink/server/config"
	"termlink/server/servertest"
)

// link-test against a real termserver whose channel requires mutual TLS:
// with the device's certificate (--cert, --key) it passes; without one, with
// another CA's, or for another peer_id it fails with the server's reason and
// points at the certificate flags, never at a token.
func TestLinkTestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	devCA := testpki.NewCA(t, dir, "devices")
	kiosk := devCA.Client(t, "kiosk-1", "kiosk-1", "termlink:peer/kiosk-1")
	stranger := testpki.NewCA(t, dir, "stranger").Client(t, "stranger", "kiosk-1", "termlink:peer/kiosk-1")
	srv := ca.Server(t, "server")
	s := servertest.Start(t, func(cfg *config.Config) {
		cfg.TLS = config.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
		ch := cfg.Channels["terminal-dev"]
		ch.Config.ClientCA = devCA.File
		cfg.Channels["terminal-dev"] = ch
	})
	base := []string{"link-test", "--server", s.URL, "--ca-file", ca.File, "--pings", "2", "--timeout", "20s"}
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string // in stdout (code 0, 1) or stderr (code 2)
	}{
		{"the device's certificate", []string{"--cert", kiosk.CertFile, "--key", kiosk.KeyFile, "--peer-id", "kiosk-1"}, 0,
			[]string{"PASS link-test"}},
		{"no certificate", nil, 1,
			[]string{"FAIL link-test: the server wants a client certificate (HTTP 401): pass --cert and --key", "no client certificate: this channel requires one signed by its clientCA"}},
		{"another CA's certificate", []string{"--cert", stranger.CertFile, "--key", stranger.KeyFile, "--peer-id", "kiosk-1"}, 1,
			[]string{"FAIL link-test: the server refused the client certificate " + stranger.CertFile + " (HTTP 403): unauthorized: client certificate is signed by an unknown authority", "clientCA"}},
		{"another peer_id", []string{"--cert", kiosk.CertFile, "--key", kiosk.KeyFile, "--peer-id", "kiosk-2"}, 1,
			[]string{"refused peer_id kiosk-2 for this client certificate: certificate is for peer kiosk-1, connect says kiosk-2 (pass the certificate's peer as --peer-id)"}},
		{"cert without key", []string{"--cert", kiosk.CertFile}, 2, []string{"--cert and --key go together"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runTermrig(t, append(append([]string{}, base...), tt.args...)...)
			out := stdout
			if tt.code == 2 {
				out = stderr
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tt.code == 1 && strings.Contains(strings.ToLower(out), "token") {
				t.Errorf("the verdict blames a token:\n%s", out)
			}
		})
	}

	// A key others may read is refused before dialing, as termd refuses it.
	if err := os.Chmod(kiosk.KeyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ := runTermrig(t, append(base, "--cert", kiosk.CertFile, "--key", kiosk.KeyFile, "--peer-id", "kiosk-1")...)
	if code != 1 || !strings.Contains(stdout, "--key: "+kiosk.KeyFile+" is accessible by group or others (mode 0644)") {
		t.Fatalf("readable key: exit %d\n%s", code, stdout)
	}
}
