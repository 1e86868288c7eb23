package server

import (
	"fmt"
	"net/http"
	"strconv"

	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/identity"
	"termlink/server/releases"
	"termlink/server/throttle"
)

// The devices' download route (issue 28): a device fetches the release an
// update frame names (its url) with its own credentials, not an admin
// token. The route is a device route (httpapi.DeviceRoute: the guard asks no
// admin token of it) and each channel authorizes it as its WebSocket authorizes
// a device (wschannel.Adapter.AuthorizeHTTP): the client certificate on a
// mutual TLS channel, a known channel or enrolled token in
// "Authorization: Bearer" on a channel that takes only devices with a
// credential; an open channel (no tokens, no enrollment) serves anyone,
// as its WebSocket takes anyone. The bytes are served by the release
// store's own handler (releases.Store.ServeGet: Range, If-Range; its
// size and SHA-256 checked against its manifest before the first byte),
// on any node in a cluster whichever node it was uploaded to. Each
// refusal is an event of the channel (release_download_refused) and a
// log line, both through the server's gate (Runtime.outside, charged to
// the client's network: identity.GateNet), so a stranger's flood of
// refused requests writes a burst and a summary.

// deviceReleasePattern is the devices' route to a release's manifest and
// binary: {rest...} is {os}/{arch}[/{variant}]/manifest or .../binary.
const deviceReleasePattern = "GET /api/channels/{channel_id}/releases/{version}/{rest...}"

// DeviceReleaseURL is the path a device fetches a release's binary from
// on the server of its channel (an update frame's url).
func DeviceReleaseURL(channelID, version, platform string) string {
	return "/api/channels/" + channelID + "/releases/" + version + "/" + platform + "/binary"
}

// deviceReleaseRoutes registers the devices' download route.
func (s *Server) deviceReleaseRoutes(mux httpapi.Mux) {
	httpapi.HandleClass(mux, deviceReleasePattern, httpapi.DeviceRoute, s.serveDeviceRelease)
}

func (s *Server) serveDeviceRelease(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("channel_id")
	ch := s.rt.channels[id]
	if ch == nil {
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(throttle.Cut(id, releases.MaxEcho))+" is configured")
		return
	}
	refuse := func(status int, peer, why string) {
		// Anyone may be refused: the event and the line go through the
		// server's gate (per network, and per kind), the path cut to the
		// gate's bound.
		gate := s.rt.outside
		path := gate.Field(r.URL.Path)
		detail := fmt.Sprintf("%d %s from %s: %s", status, path, r.RemoteAddr, why)
		if identity.GateNet(gate, events.ReleaseDownloadRefused, r.RemoteAddr, detail) {
			ch.events.Add(events.Event{Event: events.ReleaseDownloadRefused, PeerID: peer, Detail: gate.Field(detail)})
			s.log.Warn("release download refused", "channel_id", id, "path", path, "remote", r.RemoteAddr, "status", status, "why", gate.Field(why))
		}
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="termlink-device"`)
		}
		httpapi.WriteError(w, status, why)
	}
	if ch.adapter == nil {
		refuse(http.StatusNotFound, "", "channel "+strconv.Quote(id)+" is disabled")
		return
	}
	peer, status, why := ch.adapter.AuthorizeHTTP(r)
	if status != 0 {
		refuse(status, peer, why)
		return
	}
	version := r.PathValue("version")
	platform, _, err := releases.ParsePath(version, r.PathValue("rest"), true)
	if err != nil {
		refuse(http.StatusBadRequest, peer, err.Error())
		return
	}
	if _, ok := s.releases.Manifest(version, platform); !ok {
		refuse(http.StatusNotFound, peer, "no release "+version+" for "+platform+" is stored")
		return
	}
	s.releases.ServeGet(w, r)
}
