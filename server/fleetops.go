package server

import (
	"termlink/link"
	"termlink/server/registry"
	"termlink/server/wschannel"
)

// Fleet operations (issue 28): signed updates and their rollouts,
// pushed settings, logs and self-tests on demand. The channel adapters
// carry the frames (wschannel.Fleet, SendFleet); fleetOps is their one
// wschannel.Fleet. The device registry keeps what devices report (their
// update state, the settings version they applied), and each part of
// fleet operations (parts: the rollouts, the settings, the diag
// requests) gets every connect and every answer, in the connection's
// reader, so a part must not block.
type fleetOps struct {
	rt    *Runtime
	parts []wschannel.Fleet // added by New before the adapters start
}

// DeviceConnected implements wschannel.Fleet.
func (f *fleetOps) DeviceConnected(channelID string, c *link.Connect) {
	for _, p := range f.parts {
		p.DeviceConnected(channelID, c)
	}
}

// Report implements wschannel.Fleet.
func (f *fleetOps) Report(channelID, peerID string, fr link.Frame) {
	switch fr := fr.(type) {
	case *link.UpdateStatus:
		f.rt.fleet.reg.SetUpdate(channelID, peerID, registry.UpdateState{Version: fr.Version, State: fr.State, Reason: fr.Reason})
	case *link.SettingsAck:
		f.rt.fleet.reg.SetSettings(channelID, peerID, fr.Version, fr.Error)
	}
	for _, p := range f.parts {
		p.Report(channelID, peerID, fr)
	}
}

// SendFleet hands a fleet operation's frame (update, settings, diag) to
// the peer's live connection on this server; false when it is not
// connected here or did not list the capability the frame needs.
func (rt *Runtime) SendFleet(channelID, peerID string, f link.Frame) bool {
	if ch := rt.channels[channelID]; ch != nil && ch.adapter != nil {
		return ch.adapter.SendFleet(peerID, f)
	}
	return false
}
