package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"termlink/testrig/childtest"
	"testing"

	"termlink/link/discover"
	"termlink/server/config"
	"termlink/server/servertest"
)

// termd --server auto against a real termserver advertising itself over
// mDNS on this machine: it finds the server by name, says so in its log,
// saves the URL as the last known one, and talks to the server.
func TestTermdServerAuto(t *testing.T) {
	t.Parallel()
	childtest.SkipMulticastUnderEmulator(t)
	name := fmt.Sprintf("auto-%d", rand.Uint32())
	srv := servertest.Start(t, func(c *config.Config) {
		c.Discovery = config.Discovery{Enabled: true, Instance: name}
	})
	state := filepath.Join(t.TempDir(), "state")
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s --server auto --server-name %s --board sim --state-dir %s",
		termdRun, name, state))
	waitScreen("online")
	tm("send-keys", "-l", "found you")
	tm("send-keys", "Enter")
	waitScreen("You said: found you")
	tm("send-keys", "C-d")
	waitScreen("EXIT=0")

	log, err := os.ReadFile(filepath.Join(state, "termd.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`msg="termserver found" instance=` + name + ` host=`, // the server's host name
		` addr=` + srv.Addr + ` path=/api/channels/terminal-dev/ws tls=false enroll=false`,
		`msg="using the termserver found on the LAN" instance=` + name + ` url=` + srv.URL,
	} {
		if !strings.Contains(string(log), want) {
			t.Errorf("termd.log lacks %q:\n%s", want, log)
		}
	}
	saved, err := os.ReadFile(filepath.Join(state, discover.SavedURLFile))
	if err != nil || strings.TrimSpace(string(saved)) != srv.URL {
		t.Fatalf("saved URL %q, %v; want %s", saved, err, srv.URL)
	}
}

// When no server answers (none advertises the name asked for), termd
// waits out its browse and uses --server-fallback, saying so.
func TestTermdServerAutoFallback(t *testing.T) {
	t.Parallel()
	childtest.SkipMulticastUnderEmulator(t)
	srv := servertest.Start(t, nil) // discovery off
	state := filepath.Join(t.TempDir(), "state")
	name := fmt.Sprintf("nobody-%d", rand.Uint32())
	tm, waitScreen := termdInTmux(t, fmt.Sprintf("%s --server auto --server-name %s --server-fallback %s --board sim --state-dir %s",
		termdRun, name, srv.Addr, state))
	waitScreen("online")
	tm("send-keys", "C-d")
	waitScreen("EXIT=0")
	log, err := os.ReadFile(filepath.Join(state, "termd.log"))
	if err != nil {
		t.Fatal(err)
	}
	// The why is "no termserver answered", or, when another test's server
	// advertises on the machine meanwhile (TestTermdServerAuto runs in
	// parallel), "no termserver answered named ... (1 other answered)".
	want := regexp.MustCompile(`msg="no termserver found on the LAN; falling back" why="no termserver answered( named \\"` +
		regexp.QuoteMeta(name) + `\\" \(\d+ others? answered\))?" source=fallback url=` + regexp.QuoteMeta(srv.URL))
	if !want.Match(log) {
		t.Fatalf("termd.log lacks %s:\n%s", want, log)
	}
	if _, err := os.Stat(filepath.Join(state, discover.SavedURLFile)); !os.IsNotExist(err) {
		t.Errorf("the fallback was saved as the last-known URL: %v", err)
	}
}

// --server-fallback is checked like --server, before anything starts.
func TestTermdServerAutoBadFallback(t *testing.T) {
	err := run(t.Context(), []string{"--server", "auto", "--server-fallback", "ftp://x", "--board", "sim", "--state-dir", t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "--server-fallback") || !strings.Contains(err.Error(), "scheme must be ws, wss, http or https") {
		t.Fatalf("run: %v", err)
	}
}
