package wschannel

import (
	"math"
	"strings"

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
	authed := identity.RequiresToken(a.cfg.Config) || c.cert().fp != (config.Fingerprint{})
	shared, sharedMax := c.sharedCredential(f) // a glob token's peers are counted (identity.go)
	gen, ignored, err := a.registry.Connected(registry.Device{ChannelID: a.id, PeerID: c.peerID, SessionID: c.sessionKey,
		DeviceName: f.DeviceName, Board: f.Board, Version: f.Version, Platform: f.Platform, SettingsVersion: f.SettingsVersion, BinarySHA256: f.BinarySHA256, Capabilities: f.Capabilities, Tags: f.Tags,
		RemoteAddr: c.remote, Authenticated: authed, Shared: shared, SharedMax: int32(min(sharedMax, math.MaxInt32))})
	if err != nil {
		return 0, err
	}
	if len(ignored) > 0 {
		a.refused(c.remote, events.Event{Event: events.InboundRejected, PeerID: c.peerID, SessionID: c.sessionKey,
			Detail: "connect: ignored " + strings.Join(ignored, "; ")})
	}
	return gen, nil
}
