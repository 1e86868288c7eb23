package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/internal/testwait"
	"termlink/server/servertest"
)

// The termd binary on the sim board, pushed settings end to end (the
// console draws no idle screen: the emulated LCD's test in device/termd
// shows them on the glass): the settings kept in its state dir are
// applied at start and its first connect says their version; a tag's
// document set on the server is applied live (the log level too) and
// kept; termd restarted with no server to reach applies them before it
// connects.
func TestTermdPushedSettings(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, nil)
	state := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "settings.json"), []byte(`{"version": 7, "idle_text": "Kept from before", "idle_seconds": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := func(server string) string {
		return fmt.Sprintf("%s --server %s --board sim --state-dir %s --peer-id kiosk-s --tag site=lobby --idle-text 'own text'", termdRun, server, state)
	}
	tm, waitScreen := termdInTmux(t, cmd(srv.Addr))
	waitScreen("online")
	logFile := filepath.Join(state, "termd.log")
	waitLog(t, logFile, "settings kept in the state dir applied", "version=7")
	base := "http://" + srv.Addr + "/api/channels/terminal-dev"
	waitFor(t, base+"/peers/kiosk-s/settings", `"applied_version": 7`)

	req, _ := http.NewRequest("PUT", base+"/settings/tags/site/lobby", strings.NewReader(`{"idle_text": "Pushed live", "idle_seconds": 1, "log_level": "debug"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: HTTP %d", resp.StatusCode)
	}
	waitLog(t, logFile, "pushed settings applied", "version=1")
	waitFor(t, base+"/peers/kiosk-s/settings", `"current": true`)
	if b, err := os.ReadFile(filepath.Join(state, "settings.json")); err != nil || !strings.Contains(string(b), "Pushed live") {
		t.Fatalf("settings.json: %s %v", b, err)
	}
	tm("send-keys", "C-d")
	waitScreen("EXIT=0")

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close()
	if err := os.Truncate(logFile, 0); err != nil {
		t.Fatal(err)
	}
	tm2, waitScreen2 := termdInTmux(t, cmd(addr))
	waitLog(t, logFile, "settings kept in the state dir applied", "version=1")
	// The pushed log level (debug) holds from the start: the link's
	// debug lines are there.
	waitLog(t, logFile, "level=DEBUG")
	tm2("send-keys", "C-d")
	waitScreen2("EXIT=0")
}

// waitFor waits until GET url answers a body containing want.
func waitFor(t *testing.T, url, want string) {
	t.Helper()
	testwait.UntilOK(t, fmt.Sprintf("GET %s to say %s", url, want), func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			return fmt.Errorf("it says:\n%s", b)
		}
		return nil
	})
}

// waitLog waits until the log file has a line with every one of want.
func waitLog(t *testing.T, file string, want ...string) {
	t.Helper()
	testwait.UntilOK(t, fmt.Sprintf("a line with %q in %s", want, file), func() error {
		b, _ := os.ReadFile(file)
		for _, line := range strings.Split(string(b), "\n") {
			all := true
			for _, w := range want {
				all = all && strings.Contains(line, w)
			}
			if all {
				return nil
			}
		}
		return fmt.Errorf("it holds:\n%s", b)
	})
}
