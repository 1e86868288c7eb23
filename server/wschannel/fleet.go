package wschannel

import (
	"slices"

	"termlink/link"
)

// Fleet operations on a device connection (issue 28): the server's side
// (package fleetops) hands update, settings and diag frames to a live
// connection that listed the matching capability (SendFleet), and gets
// the device's answers (update_status, settings_ack, diag_result) and
// each connect (Fleet). The connection only carries them.

// maxFleetQueue bounds the fleet frames waiting on one connection.
const maxFleetQueue = 16

// Fleet is the server's side of fleet operations.
type Fleet interface {
	// DeviceConnected is called once a device's connect is taken (it is
	// registered, connected is queued): the fleet side may queue frames
	// for it (SendFleet) at once.
	DeviceConnected(channelID string, f *link.Connect)
	// Report takes a device's update_status, settings_ack or
	// diag_result.
	Report(channelID, peerID string, f link.Frame)
}

// capFor is the capability a fleet frame needs.
func capFor(t link.Type) string {
	switch t {
	case link.TypeUpdate:
		return link.CapUpdate
	case link.TypeSettings:
		return link.CapSettings
	case link.TypeDiag:
		return link.CapDiag
	}
	return ""
}

// SendFleet implements Adapter: f (an update, settings or diag frame)
// goes on the peer's live connection if it listed the capability f
// needs and its fleet queue has room.
func (a *terminalAdapter) SendFleet(peerID string, f link.Frame) bool {
	need := capFor(f.FrameType())
	if need == "" {
		return false
	}
	b, err := link.Encode(f)
	if err != nil {
		a.log.Error("fleet frame not encoded", "peer_id", peerID, "type", f.FrameType(), "err", err)
		return false
	}
	a.mu.Lock()
	c := a.peers[peerID]
	a.mu.Unlock()
	if c == nil || !slices.Contains(c.caps, need) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state >= connClosing || len(c.fleet) >= maxFleetQueue {
		return false
	}
	c.fleet = append(c.fleet, b)
	c.startWriterLocked()
	return true
}

// handleFleet passes a device's answer to a fleet operation on.
func (c *wsConn) handleFleet(f link.Frame) {
	switch {
	case c.peerID == "":
		c.reject("", link.CodeNotConnected, "send a connect frame with your peer_id before "+string(f.FrameType())+" frames")
		return
	case c.a.fleet == nil:
		c.reject("", link.CodeBadFrame, "Unsupported websocket frame type: "+string(f.FrameType())+" (this server has no fleet operations)")
		return
	}
	c.a.fleet.Report(c.a.id, c.peerID, f)
}

// fleetOnConnect tells the fleet side about a connect taken.
func (c *wsConn) fleetOnConnect(f *link.Connect) {
	if c.a.fleet != nil {
		c.a.fleet.DeviceConnected(c.a.id, f)
	}
}
