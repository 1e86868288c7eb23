package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"termlink/internal/testpki"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/childtest"
)

// termd on the sim board with --ca-file, --cert and --key reaches a
// termserver that serves wss:// with mutual TLS on its channel, as the
// peer its certificate names, and a message typed is answered.
func TestTermdMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "lab")
	devCA := testpki.NewCA(t, dir, "devices")
	kiosk := devCA.Client(t, "kiosk-1", "kiosk-1", "termlink:peer/kiosk-1")
	srv := ca.Server(t, "server")
	s := servertest.Start(t, func(cfg *config.Config) {
		cfg.TLS = config.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
		ch := cfg.Channels["terminal-dev"]
		ch.Config.ClientCA = devCA.File
		cfg.Channels["terminal-dev"] = ch
	})
	state := filepath.Join(t.TempDir(), "state")
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s --server %s --board sim --state-dir %s --peer-id kiosk-1 --ca-file %s --cert %s --key %s",
		termdRun, s.URL, state, ca.File, kiosk.CertFile, kiosk.KeyFile))
	waitScreen("online")
	tm("send-keys", "-l", "hello over mtls")
	tm("send-keys", "Enter")
	waitScreen("You said: hello over mtls")
}

// termd refuses a client key that group or others may read, and --cert
// without --key, before it dials.
func TestTermdKeyFileErrors(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "devices")
	leaky := ca.Client(t, "leaky", "kiosk-1")
	if err := os.Chmod(leaky.KeyFile, 0o640); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--cert", leaky.CertFile, "--key", leaky.KeyFile}, "--key: " + leaky.KeyFile + " is accessible by group or others (mode 0640)"},
		{[]string{"--cert", leaky.CertFile}, "--cert and --key go together"},
	} {
		args := append([]string{"--server", "wss://127.0.0.1:1", "--board", "sim", "--state-dir", t.TempDir()}, tt.args...)
		out, err := childtest.Command(termd, args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), tt.want) {
			t.Errorf("termd %v: %v\n%s\nwant exit 1 and %q", tt.args, err, out, tt.want)
		}
	}
}
