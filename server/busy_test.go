package server

import (
	"testing"

	"termlink/link"
	"termlink/server/registry"
)

// A device's busy frame (issue 42) reaches the registry through the
// server's wiring (the rollouts' Busy part) when its connection listed
// "update"; from a connection that did not it is refused bad_frame and
// the registry shows nothing.
func TestBusyFrameReachesRegistry(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	peer := func(id string) registry.Peer {
		var p registry.Peer
		if code := getJSON(t, ts.http.URL+"/api/channels/terminal-dev/peers/"+id, &p); code != 200 {
			t.Fatalf("GET peer %s: %d", id, code)
		}
		return p
	}
	g := dial(t, ts.ws, nil)
	g.connect("kiosk-plain")
	g.send(&link.Busy{Busy: true, Why: link.BusyRun})
	g.expectError(`busy refused: this connection did not list the "update" capability`, link.CodeBadFrame)
	if p := peer("kiosk-plain"); p.Busy != nil {
		t.Fatalf("a refused busy frame reached the registry: %+v", p.Busy)
	}

	c := dial(t, ts.ws, nil)
	c.send(&link.Connect{PeerID: "kiosk-u", Capabilities: []string{link.CapText, link.CapUpdate}, Version: "v1.0.0", Platform: "linux/arm/6"})
	readAs[*link.Connected](c)
	off := -5 * 3600
	c.send(&link.Busy{Busy: true, Why: link.BusyKeys, UTCOffset: &off})
	c.alive()
	if b := peer("kiosk-u").Busy; b == nil || !b.Busy || b.Why != link.BusyKeys || b.UTCOffset == nil || *b.UTCOffset != off {
		t.Fatalf("the registry keeps %+v, want busy keys at -5h", b)
	}
	c.send(&link.Busy{})
	c.alive()
	if b := peer("kiosk-u").Busy; b == nil || b.Busy {
		t.Fatalf("the registry keeps %+v, want idle", b)
	}
}
