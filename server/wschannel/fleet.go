package wschannel

import (
	"slices"
	"time"

	"termlink/link"
	"termlink/server/events"
)

// Fleet operations on a device connection (issue 28): the server's side
// (package fleetops) hands update, settings and diag frames to a live
// connection that listed the matching capability (SendFleet), gets each
// connect (Fleet), and gets the device's answers (update_status,
// settings_ack, diag_result) through their frame routes (FleetFrames,
// frames.go). The connection only carries them.
//
// A device is believed only about what it was asked (issue 36): an
// answer frame is taken from a connection that listed the capability it
// answers, at most answerBurst at once and answerRate a second, and the
// fleet side takes it only when it answers a request, settings version
// or update this server sent that peer. Anything else is dropped with an
// error frame (bad_frame; busy past the rate), and those error frames
// and their inbound_rejected events pass the server's gate for what
// comes from outside (Deps.Outside) per connection: a flood of them
// writes a handful, then one a minute.

// maxFleetQueue bounds the fleet frames waiting on one connection.
const maxFleetQueue = 16

// Fleet is the server's side of fleet operations.
type Fleet interface {
	// DeviceConnected is called once a device's connect is taken (it is
	// registered, connected is queued): the fleet side may queue frames
	// for it (SendFleet) at once.
	DeviceConnected(channelID string, f *link.Connect)
}

// The rate of a connection's answer frames: a device answers a few
// requests a day, and resends its last update_status and settings_ack on
// each connect.
const (
	answerRate  = 2  // a second, sustained
	answerBurst = 20 // at once
)

// answerClock is the answer rate's clock (tests stop it).
var answerClock = time.Now

// gateAnswerRefused is the gate's kind for a device frame a route refused.
const gateAnswerRefused = "a device's frame refused"

// capFor is the capability a fleet frame needs: a request's, or the one
// of the request an answer frame answers.
func capFor(t link.Type) string {
	switch t {
	case link.TypeUpdate, link.TypeUpdateStatus, link.TypeBusy:
		return link.CapUpdate
	case link.TypeSettings, link.TypeSettingsAck:
		return link.CapSettings
	case link.TypeDiag, link.TypeDiagResult:
		return link.CapDiag
	}
	return ""
}

// SendFleet implements Adapter: f (an update, settings or diag frame)
// goes on the peer's live connection if it listed the capability f
// needs and its fleet queue has room.
func (a *terminalAdapter) SendFleet(peerID string, f link.Frame) bool {
	need := capFor(f.FrameType())
	switch f.FrameType() {
	case link.TypeUpdate, link.TypeSettings, link.TypeDiag:
	default:
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
	if c.state >= connClosing || c.q != nil && len(c.q.fleet) >= maxFleetQueue {
		return false
	}
	q := c.busy()
	q.fleet = append(q.fleet, b)
	c.startWriterLocked()
	return true
}

// refuseFrame drops a frame a route refused: counted as rejected; the
// error frame and its event only as the gate admits them for this
// connection.
func (c *wsConn) refuseFrame(code, msg string) {
	a := c.a
	a.m.Rejected.Inc(a.id)
	if !a.outside.Allow(gateAnswerRefused, "conn "+c.remote, msg) {
		return
	}
	msg = a.outside.Field(msg)
	a.events.Add(events.Event{Event: events.InboundRejected, PeerID: c.peerID, SessionID: c.sessionKey, Detail: msg})
	c.sendError("", code, msg)
}

// fleetOnConnect tells the fleet side about a connect taken.
func (c *wsConn) fleetOnConnect(f *link.Connect) {
	if c.a.fleet != nil {
		c.a.fleet.DeviceConnected(c.a.id, f)
	}
}

// FleetFrames are the routes of the fleet operations' answer frames
// (update_status, settings_ack, diag_result): each from a connection that
// listed the capability it answers, paced, and taken by report (nil when
// it answers what this server asked that peer, or is the device's resend
// of such an answer, which changes nothing; else why it answers nothing
// asked: refused, and nothing changed). The busy frame (issue 42: whether
// the device is in use, which the rollouts wait for) goes the same way:
// from a connection that listed "update", paced as the answers.
func FleetFrames(report func(channelID, peerID string, f link.Frame) error) []FrameRoute {
	var routes []FrameRoute
	for _, t := range []link.Type{link.TypeUpdateStatus, link.TypeSettingsAck, link.TypeDiagResult, link.TypeBusy} {
		routes = append(routes, FrameRoute{Type: t, Capability: capFor(t), Paced: true,
			Handle: func(from FrameSource, f link.Frame) error { return report(from.ChannelID, from.PeerID, f) }})
	}
	return routes
}
