package server

import (
	"fmt"
	"strings"
	"testing"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
)

// A glob's shared token is one credential that could mint peers without
// end (issue 36 row 6): its peers are counted against its maxPeers, and
// a new peer id past it is refused at connect with why; a known one is
// taken back, and a peer with its own token is not counted.
func TestGlobTokenMaxPeers(t *testing.T) {
	t.Parallel()
	tok := config.Tokens{ByPeer: map[string]string{"legit-1": "tok-legit", "kiosk-*": "kiosk-shared"}, MaxPeers: map[string]int{"kiosk-*": 3}}
	ts := startServer(t, channelTokens(tok, false), nil)
	for i := range 3 {
		c := mustConnect(t, ts, fmt.Sprint("kiosk-", i), "kiosk-shared")
		c.ws.Close()
	}
	c, f := connectAs(t, ts, "kiosk-3", "kiosk-shared")
	e, ok := f.(*link.Error)
	if !ok || e.Code != link.CodeRegistryFull || !strings.Contains(e.Error, `the shared token of "kiosk-*" already has its maximum of 3 peers`) ||
		!strings.Contains(e.Error, "maxPeers") {
		t.Fatalf("a fourth peer on the glob token: %s %+v", f.FrameType(), f)
	}
	c.readClose()
	if _, ok := ts.fleet.reg.Get("terminal-dev", "kiosk-3"); ok {
		t.Fatal("the refused peer is in the registry")
	}
	mustConnect(t, ts, "kiosk-0", "kiosk-shared").alive() // known: taken back
	mustConnect(t, ts, "legit-1", "tok-legit").alive()    // its own token: not the glob's
}

// A peer with its own token is never forgotten to make room for peers of
// a glob token: 30 of them through a registry of 4 leave legit-1 (its
// exact token) in place (it was evicted before).
func TestGlobTokenNeverEvictsOwnToken(t *testing.T) {
	t.Parallel()
	tok := config.Tokens{ByPeer: map[string]string{"legit-1": "tok-legit", "kiosk-*": "kiosk-shared"}}
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	channelTokens(tok, false)(cfg)
	ts := serve(t, cfg, Options{fleet: fleetOptions{maxPeers: 4}})
	connectOff := func(peer, token string) {
		t.Helper()
		c := mustConnect(t, ts, peer, token)
		c.ws.Close()
		testwait.Until(t, peer+" offline in the registry", func() bool {
			p, ok := ts.fleet.reg.Get("terminal-dev", peer)
			return ok && !p.Online
		})
	}
	connectOff("legit-1", "tok-legit")
	for i := range 30 {
		connectOff(fmt.Sprint("kiosk-", i), "kiosk-shared")
	}
	if _, ok := ts.fleet.reg.Get("terminal-dev", "legit-1"); !ok {
		t.Fatal("legit-1, with its own token, was forgotten to make room for peers of the glob token")
	}
	if n := ts.fleet.reg.Count("terminal-dev"); n != 4 {
		t.Fatalf("%d devices in the registry, want its bound of 4", n)
	}
}
