package wschannel

import (
	"slices"
	"strings"

	"termlink/display"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/identity"
	"termlink/server/registry"
)

// The connection's side of the device registry (package registry, the
// fleet): connect and screen frames go in; Disconnected and
// MessageAccepted are called where a connection ends and a message is
// accepted.

// registryConnected records c's connect in the registry; what the
// registry ignored of it (bad tags, oversized fields) becomes an event. A
// device authenticated when its channel requires a token (configured or
// learnt by enrollment: the connect path checked it) or it showed a
// client certificate; one let in by a glob's shared token is counted
// against it. The error is the registry's *registry.FullError for a new
// anonymous device past the channel's bounds, its *SharedCapError for a
// new peer of a shared token past the token's maxPeers.
func (c *wsConn) registryConnected(f *link.Connect) (uint64, error) {
	a := c.a
	authed := identity.RequiresToken(a.cfg.Config) || c.cert.fp != (config.Fingerprint{})
	shared, sharedMax := c.sharedCredential(f) // a glob token's peers are counted (identity.go)
	gen, ignored, err := a.registry.Connected(registry.Device{ChannelID: a.id, PeerID: c.peerID, SessionID: c.sessionKey,
		DeviceName: f.DeviceName, Board: f.Board, Version: f.Version, Platform: f.Platform, SettingsVersion: f.SettingsVersion, Capabilities: f.Capabilities, Tags: f.Tags,
		RemoteAddr: c.remote, Authenticated: authed, Shared: shared, SharedMax: sharedMax})
	if err != nil {
		return 0, err
	}
	if len(ignored) > 0 {
		a.refused(c.remote, events.Event{Event: events.InboundRejected, PeerID: c.peerID, SessionID: c.sessionKey,
			Detail: "connect: ignored " + strings.Join(ignored, "; ")})
	}
	return gen, nil
}

// handleScreen takes a screen frame into the registry's mirror; only a
// device that listed "screen" may send one.
func (c *wsConn) handleScreen(f *link.Screen) {
	a := c.a
	switch {
	case c.peerID == "":
		c.reject("", link.CodeNotConnected, "send a connect frame with your peer_id before screen frames")
	case !slices.Contains(c.caps, link.CapScreen):
		// Not an event each: a device that keeps sending them would flood the log.
		a.m.Rejected.Inc(a.id)
		c.sendError("", link.CodeBadFrame, `screen frame from a device that did not list "screen" in connect.capabilities: ignored`)
	default:
		rom := "" // only a ROM the console can draw; anything else is plain text
		if r, err := display.ParseROM(f.ROM); err == nil && f.ROM != "" {
			rom = r.String()
		}
		a.registry.SetScreen(a.id, c.peerID, c.regGen, registry.Screen{Rows: f.Rows, ROM: rom,
			CursorRow: f.CursorRow, CursorCol: f.CursorCol, CursorOn: f.CursorOn, Backlight: f.Backlight})
	}
}
