package server

import (
	"testing"
	"time"

	"termlink/link"
	"termlink/server/registry"
)

// recordingPart is a fleetOps part that records what it is given.
type recordingPart struct {
	connects chan *link.Connect
	reports  chan link.Frame
}

func (p *recordingPart) DeviceConnected(_ string, c *link.Connect) { p.connects <- c }
func (p *recordingPart) Report(_, _ string, f link.Frame)          { p.reports <- f }

// A device's fleet frames reach the registry and the parts: connect's
// platform and settings version, update_status as the peer's update
// state, settings_ack as its settings version or error. SendFleet
// reaches only a connection that listed the capability, and a frame the
// device should not send is refused as before.
func TestFleetOpsCarriage(t *testing.T) {
	ts := startServer(t, nil, nil)
	part := &recordingPart{connects: make(chan *link.Connect, 4), reports: make(chan link.Frame, 4)}
	ts.rt.fleetOps.parts = append(ts.rt.fleetOps.parts, part)

	c := dial(t, ts.ws, nil)
	c.send(&link.Connect{PeerID: "kiosk-f", Capabilities: []string{link.CapText, link.CapUpdate, link.CapSettings},
		Version: "v1.0.0", Platform: "linux/arm/6", SettingsVersion: 4})
	readAs[*link.Connected](c)
	select {
	case got := <-part.connects:
		if got.PeerID != "kiosk-f" || got.Platform != "linux/arm/6" {
			t.Fatalf("the part got connect %+v", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the part got no connect")
	}
	peer := func() registry.Peer {
		var p registry.Peer
		if code := getJSON(t, ts.http.URL+"/api/channels/terminal-dev/peers/kiosk-f", &p); code != 200 {
			t.Fatalf("GET peer: %d", code)
		}
		return p
	}
	if p := peer(); p.Platform != "linux/arm/6" || p.SettingsVersion != 4 || p.Update != nil {
		t.Fatalf("peer after connect: platform %q, settings %d, update %+v", p.Platform, p.SettingsVersion, p.Update)
	}

	c.send(&link.UpdateStatus{Version: "v1.1.0", Running: "v1.0.0", State: link.UpdateFailed, Reason: "no space left for the release"})
	c.send(&link.SettingsAck{Version: 5, Error: "log_level: cannot"})
	c.send(&link.SettingsAck{Version: 6})
	for i := 0; i < 3; i++ {
		select {
		case <-part.reports:
		case <-time.After(10 * time.Second):
			t.Fatalf("the part got %d reports, want 3", i)
		}
	}
	p := peer()
	if u := p.Update; u == nil || u.Version != "v1.1.0" || u.State != link.UpdateFailed || u.Reason != "no space left for the release" || u.At == "" {
		t.Fatalf("peer's update: %+v", u)
	}
	if p.SettingsVersion != 6 || p.SettingsError != "" {
		t.Fatalf("peer's settings: version %d, error %q; want 6 and none", p.SettingsVersion, p.SettingsError)
	}

	// SendFleet: a settings frame goes; a diag frame does not (not listed).
	if !ts.rt.SendFleet("terminal-dev", "kiosk-f", &link.Settings{Version: 7}) {
		t.Fatal("SendFleet(settings) = false for a device that listed settings")
	}
	if got := readAs[*link.Settings](c); got.Version != 7 {
		t.Fatalf("the device got settings %+v", got)
	}
	if ts.rt.SendFleet("terminal-dev", "kiosk-f", &link.Diag{RequestID: "q", Kind: link.DiagLogs}) {
		t.Fatal("SendFleet(diag) = true for a device that did not list diag")
	}
	if ts.rt.SendFleet("terminal-dev", "nobody", &link.Settings{Version: 7}) {
		t.Fatal("SendFleet to a peer not connected = true")
	}
	// A server frame sent by a device is refused, the connection goes on.
	c.send(&link.Update{UpdateID: "u", Version: "1", Manifest: "m", URL: "/x"})
	c.expectError("sent by the server", link.CodeBadFrame)
	c.alive()
}
