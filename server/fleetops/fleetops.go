package fleetops

import (
	"fmt"

	"termlink/link"
)

// Fleet operations (issue 28): signed updates and their rollouts,
// pushed settings, logs and self-tests on demand. The channel adapters
// carry the frames (wschannel.Fleet, the runtime's SendFleet); Ops is their one
// wschannel.Fleet. The device registry keeps what devices report (their
// update state, the settings version they applied), and each part of
// fleet operations (parts: the rollouts, the settings, the diag
// requests) gets every connect and the answers of its kind, in the
// connection's reader, so a part must not block.
//
// A device is believed only about what it was asked (issue 36): the
// adapter hands on only answers from a connection that listed their
// capability, at its answer rate (their frame routes,
// wschannel.FleetFrames); the part that takes an answer's kind says
// whether it answers what it sent that device, and keeps in the registry
// what it believed (the rollouts a device's update state, the settings
// its version: each part's rule). An answer no part asked for is refused
// (Report's error: the connection answers bad_frame).
//
// One frame the device sends unasked (issue 42): busy, whether a person
// is using it. It comes the same way (from a connection that listed
// "update", at the answer rate) and goes to the part that takes it, the
// rollouts' (rollout.Manager.Busy): it keeps the state in the registry
// for the console and the rollouts, and is refused when the device is
// not online there.
type Ops struct {
	Parts []Part // added by the server's New before the adapters start
}

// Part is a part of the fleet operations.
type Part interface {
	// DeviceConnected is wschannel.Fleet's.
	DeviceConnected(channelID string, c *link.Connect)
	// Answers is the kind of answer frame the part takes.
	Answers() link.Type
	// Report takes an answer of its kind: believed when it answers what
	// the part sent that peer (the part keeps it); an error when it
	// answers nothing asked (refused; nothing changed); neither for a
	// resend that is not news.
	Report(channelID, peerID string, f link.Frame) (believed bool, err error)
}

// DeviceConnected implements wschannel.Fleet.
func (f *Ops) DeviceConnected(channelID string, c *link.Connect) {
	for _, p := range f.Parts {
		p.DeviceConnected(channelID, c)
	}
}

// Report takes a device's answer frame (its route's handler): the part
// that takes fr's kind judges it.
func (f *Ops) Report(channelID, peerID string, fr link.Frame) error {
	var part Part
	for _, p := range f.Parts {
		if p.Answers() == fr.FrameType() {
			part = p
			break
		}
	}
	if part == nil {
		return fmt.Errorf("this server sent no %s request this frame could answer", fr.FrameType())
	}
	_, err := part.Report(channelID, peerID, fr)
	return err
}
