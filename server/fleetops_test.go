package server

import (
	"errors"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/fleetops"
	"termlink/server/registry"
)

// recordingPart is a fleet operations part (fleetops.Part) that records what it is given,
// judges the answers of its kind with judge, and keeps what it believed
// with keep, as the real parts keep it in the registry.
type recordingPart struct {
	answers  link.Type
	judge    func(link.Frame) (bool, error)
	keep     func(channelID, peerID string, f link.Frame)
	connects chan *link.Connect
	reports  chan link.Frame
}

func (p *recordingPart) DeviceConnected(_ string, c *link.Connect) { p.connects <- c }
func (p *recordingPart) Answers() link.Type                        { return p.answers }
func (p *recordingPart) Report(channelID, peerID string, f link.Frame) (bool, error) {
	p.reports <- f
	believed, err := p.judge(f)
	if believed && p.keep != nil {
		p.keep(channelID, peerID, f)
	}
	return believed, err
}

// A device's fleet frames reach the registry and the parts: connect's
// platform and settings version; update_status and settings_ack go to
// the part of their kind, which keeps them in the registry (the peer's
// update state, its settings version or error) only when it believed
// them (issue 36); one the part refuses is answered bad_frame with its
// reason, and one from a connection that did not list the capability
// never reaches a part. SendFleet reaches only a connection that listed
// the capability, and a frame the device should not send is refused as
// before.
func TestFleetOpsCarriage(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	updates := &recordingPart{answers: link.TypeUpdateStatus, connects: make(chan *link.Connect, 4), reports: make(chan link.Frame, 8),
		judge: func(f link.Frame) (bool, error) {
			switch f.(*link.UpdateStatus).UpdateID {
			case "u-1":
				return true, nil
			case "forged":
				return false, errors.New("update_id \"forged\" names no update this server sent")
			}
			return false, nil
		}}
	acks := &recordingPart{answers: link.TypeSettingsAck, connects: make(chan *link.Connect, 4), reports: make(chan link.Frame, 8),
		judge: func(f link.Frame) (bool, error) {
			if f.(*link.SettingsAck).Version == 6 {
				return true, nil
			}
			return false, errors.New("settings version 5 was not sent to this device")
		}}
	// They keep what they believed as the rollouts and the settings do.
	reg := ts.fleet.reg
	updates.keep = func(ch, peer string, f link.Frame) {
		st := f.(*link.UpdateStatus)
		reg.SetUpdate(ch, peer, registry.UpdateState{Version: st.Version, State: st.State, Reason: st.Reason})
	}
	acks.keep = func(ch, peer string, f link.Frame) {
		ack := f.(*link.SettingsAck)
		reg.SetSettings(ch, peer, ack.Version, ack.Error)
	}
	// Ahead of the server's own parts of these kinds.
	ts.fleetOps.Parts = append([]fleetops.Part{updates, acks}, ts.fleetOps.Parts...)

	c := dial(t, ts.ws, nil)
	c.send(&link.Connect{PeerID: "kiosk-f", Capabilities: []string{link.CapText, link.CapUpdate, link.CapSettings},
		Version: "v1.0.0", Platform: "linux/arm/6", SettingsVersion: 4})
	readAs[*link.Connected](c)
	select {
	case got := <-updates.connects:
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

	c.send(&link.UpdateStatus{UpdateID: "forged", Version: "v1.1.0", Running: "v1.0.0", State: link.UpdateFailed, Reason: "forged"})
	c.expectError(`update_status refused: update_id "forged" names no update this server sent`, link.CodeBadFrame)
	c.send(&link.UpdateStatus{Version: "v1.1.0", Running: "v1.0.0", State: link.UpdateFailed, Reason: "a start report"})
	c.send(&link.SettingsAck{Version: 5, Error: "log_level: cannot"})
	c.expectError("settings_ack refused: settings version 5 was not sent to this device", link.CodeBadFrame)
	c.alive() // the start report: no error
	if p := peer(); p.Update != nil || p.SettingsVersion != 4 || p.SettingsError != "" {
		t.Fatalf("answers not believed reached the registry: update %+v, settings %d %q", p.Update, p.SettingsVersion, p.SettingsError)
	}

	c.send(&link.UpdateStatus{UpdateID: "u-1", Version: "v1.1.0", Running: "v1.0.0", State: link.UpdateFailed, Reason: "no space left for the release"})
	c.send(&link.SettingsAck{Version: 6})
	c.alive()
	p := peer()
	if u := p.Update; u == nil || u.Version != "v1.1.0" || u.State != link.UpdateFailed || u.Reason != "no space left for the release" || u.At == "" {
		t.Fatalf("peer's update: %+v", u)
	}
	if p.SettingsVersion != 6 || p.SettingsError != "" {
		t.Fatalf("peer's settings: version %d, error %q; want 6 and none", p.SettingsVersion, p.SettingsError)
	}
	if n := len(updates.reports) + len(acks.reports); n != 5 {
		t.Fatalf("the parts got %d answers, want 5", n)
	}

	// A connection that did not list the capabilities: refused before
	// any part sees it.
	g := dial(t, ts.ws, nil)
	g.connect("kiosk-g")
	<-updates.connects
	g.send(&link.SettingsAck{Version: 6})
	g.expectError(`settings_ack refused: this connection did not list the "settings" capability`, link.CodeBadFrame)
	g.send(&link.UpdateStatus{UpdateID: "u-1", Version: "v1.1.0", Running: "v1.0.0", State: link.UpdateInstalled})
	g.expectError(`did not list the "update" capability`, link.CodeBadFrame)
	if n := len(updates.reports) + len(acks.reports); n != 5 {
		t.Fatalf("the parts got %d answers, want still 5", n)
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
