package wschannel

import (
	"errors"
	"fmt"
	"slices"

	"termlink/link"
)

// Device frames beyond the message path are routed the way HTTP routes
// are (issue 39): each capability registers the frame types it takes
// (Deps.Frames: notice_ack, screen, update_status, settings_ack,
// diag_result, and the next ones), with the connect capability a device
// must have listed to send one and whether the frame counts against the
// connection's answer rate. The connection checks all of that the same
// way for every route (takeFrame), then hands the frame over; the
// connection itself grows no method per capability.

// A FrameRoute is how one type of device frame is taken.
type FrameRoute struct {
	Type link.Type
	// Capability is the connect capability a device must have listed to
	// send the frame ("" : any connected device may).
	Capability string
	// Paced frames count against the connection's answer rate
	// (answerRate a second, answerBurst at once): frames a device sends a
	// few of a day. Past it they are refused busy.
	Paced bool
	// Handle takes the frame. An error refuses it: a *FrameError names
	// its code, any other is bad_frame; either way nothing changed.
	Handle func(from FrameSource, f link.Frame) error
}

// FrameSource is the connection a frame came on.
type FrameSource struct {
	ChannelID, PeerID string
	// Gen is the registry's generation of the connection (a frame from a
	// connection the peer has replaced changes nothing).
	Gen uint64
}

// FrameError refuses a frame with a code of its own (link.Code*, or
// "unavailable": the server could not record it, send it again).
type FrameError struct{ Code, Msg string }

func (e *FrameError) Error() string { return e.Msg }

// frameRoutes indexes routes by type; two routes of one type are a
// composition error.
func frameRoutes(routes []FrameRoute) map[link.Type]FrameRoute {
	m := make(map[link.Type]FrameRoute, len(routes))
	for _, r := range routes {
		if _, dup := m[r.Type]; dup || r.Handle == nil {
			panic(fmt.Sprintf("wschannel: frame route %q registered twice or without a handler", r.Type))
		}
		m[r.Type] = r
	}
	return m
}

// takeFrame applies route's rules to f from this connection and hands it
// over; a refusal is an error frame and an inbound_rejected event, both
// through the server's gate for what comes from outside.
func (c *wsConn) takeFrame(route FrameRoute, f link.Frame) {
	t := f.FrameType()
	if route.Paced {
		if c.answers == nil {
			c.answers = newTokenBucket(answerRate, answerBurst)
		}
		if !c.answers.take(answerClock()) {
			c.refuseFrame(link.CodeBusy, fmt.Sprintf("%s dropped: this connection sends answer frames faster than %d a second (burst %d)", t, answerRate, answerBurst))
			return
		}
	}
	switch {
	case c.peerID == "":
		c.refuseFrame(link.CodeNotConnected, "send a connect frame with your peer_id before "+string(t)+" frames")
	case route.Capability != "" && !slices.Contains(c.caps, route.Capability):
		c.refuseFrame(link.CodeBadFrame, fmt.Sprintf("%s refused: this connection did not list the %q capability in its connect frame", t, route.Capability))
	default:
		err := route.Handle(FrameSource{ChannelID: c.a.id, PeerID: c.peerID, Gen: c.regGen}, f)
		var fe *FrameError
		switch {
		case err == nil:
		case errors.As(err, &fe):
			c.refuseFrame(fe.Code, fmt.Sprintf("%s refused: %s", t, fe.Msg))
		default:
			c.refuseFrame(link.CodeBadFrame, fmt.Sprintf("%s refused: %v", t, err))
		}
	}
}
