package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/internal/testpki"
	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/servertest"
)

// termd on the sim board (its console on a real PTY, in tmux), kept
// offline by a real termserver: the status line says why in short, Enter
// on a blank line adds the full reason with the next try to the
// conversation, and termd.log has the reason at INFO once however often
// termd retries.
func TestTermdOfflineReasonOnConsole(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (args string)
		short string
		full  string // in the log, and on the screen unless page is set
		page  string // on the screen, for a reason whose full text has the server's body
	}{
		{"bad CA", func(t *testing.T) string {
			dir := t.TempDir()
			ca := testpki.NewCA(t, dir, "lab")
			srv := ca.Server(t, "server")
			s := servertest.Start(t, func(c *config.Config) {
				c.TLS = config.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
			})
			return fmt.Sprintf("--server %s --ca-file %s", s.URL, testpki.NewCA(t, dir, "other").File)
		}, "offline (unknown CA)", "server certificate is signed by an unknown authority", ""},
		{"wrong token", func(t *testing.T) string {
			s := servertest.Start(t, func(c *config.Config) {
				ch := c.Channels["terminal-dev"]
				ch.Config.Tokens = config.Tokens{ByPeer: map[string]string{"kiosk-1": "the-right-token"}}
				c.Channels["terminal-dev"] = ch
			})
			tok := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(tok, []byte("a-wrong-token\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("--server %s --peer-id kiosk-1 --token-file %s", s.URL, tok)
		}, "offline (token refused)", "server answered HTTP 401", "server: 401 unauthorized (token refused)"},
		{"wrong channel", func(t *testing.T) string {
			return fmt.Sprintf("--server %s --channel lobby", servertest.Start(t, nil).Addr)
		}, "offline (no channel)", "server answered HTTP 404 Not Found", "server: 404 not found (no channel)"},
		{"refused certificate", func(t *testing.T) string {
			dir := t.TempDir()
			ca := testpki.NewCA(t, dir, "lab")
			devCA := testpki.NewCA(t, dir, "devices")
			kiosk := devCA.Client(t, "kiosk-1", "kiosk-1", "termlink:peer/kiosk-1")
			srv := ca.Server(t, "server")
			s := servertest.Start(t, func(c *config.Config) {
				c.TLS = config.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
				ch := c.Channels["terminal-dev"]
				ch.Config.ClientCA = devCA.File
				c.Channels["terminal-dev"] = ch
			})
			return fmt.Sprintf("--server %s --ca-file %s --cert %s --key %s --peer-id kiosk-9", s.URL, ca.File, kiosk.CertFile, kiosk.KeyFile)
		}, "offline (peer mismatch)", "certificate is for peer kiosk-1, connect says kiosk-9", ""},
	} {
		if tc.page == "" {
			tc.page = tc.full
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			state := filepath.Join(t.TempDir(), "state")
			tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s %s --board sim --state-dir %s --log-level debug", termdRun, tc.start(t), state))
			s := waitScreen(tc.short)
			if !strings.Contains(s, "Enter: why") {
				t.Errorf("the status line does not say how to see why:\n%s", s)
			}
			if strings.Contains(s, tc.page) {
				t.Errorf("the full reason is on the screen before it was asked for:\n%s", s)
			}
			tm("send-keys", "Enter")
			s = waitFlat(t, tm, tc.page)
			if !strings.Contains(s, "next try at") {
				t.Errorf("the full reason does not say when the next try is:\n%s", s)
			}
			if strings.Contains(s, `"error"`) || strings.Contains(s, "server answered") {
				t.Errorf("the server's answer reached the screen as it came:\n%s", s)
			}
			// Three attempts (1s, then 2s apart), one INFO line.
			logFile := filepath.Join(state, "termd.log")
			var log string
			testwait.UntilOK(t, "three attempts logged", func() error {
				b, _ := os.ReadFile(logFile)
				if log = string(b); strings.Count(log, "msg=\"dial failed\"") < 3 {
					return fmt.Errorf("the log:\n%s", log)
				}
				return nil
			})
			if n := strings.Count(log, "level=INFO msg=offline"); n != 1 || !strings.Contains(log, tc.full) || !strings.Contains(log, "next_try=") {
				t.Errorf("%d INFO offline lines, want 1 with the reason and the next try:\n%s", n, log)
			}
			// The conversation has the reason once: the one asked for.
			if n := strings.Count(flat(tm("capture-pane", "-p")), tc.page); n != 1 {
				t.Errorf("the reason is %d times on the screen, want once:\n%s", n, tm("capture-pane", "-p"))
			}
			tm("send-keys", "C-d")
			waitScreen("EXIT=0")
		})
	}
}

// flat is a screen's text with its lines joined and runs of spaces
// collapsed, so a text the console wrapped reads as one.
func flat(screen string) string { return strings.Join(strings.Fields(screen), " ") }

// waitFlat waits until the screen shows want, wrapped or not.
func waitFlat(t *testing.T, tm func(args ...string) string, want string) string {
	t.Helper()
	var s string
	testwait.UntilOK(t, fmt.Sprintf("the screen to show %q", want), func() error {
		if s = tm("capture-pane", "-p"); strings.Contains(flat(s), want) {
			return nil
		}
		return fmt.Errorf("it shows:\n%s", s)
	})
	return flat(s)
}
