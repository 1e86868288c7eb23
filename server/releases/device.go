package releases

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/identity"
	"termlink/server/throttle"
)

// The devices' download route (issue 28): a device fetches the release an
// update frame names (its url) with its own credentials, not an admin
// token. The route is a device route (httpapi.DeviceRoute: the guard asks
// no admin token of it) and each channel authorizes it as its WebSocket
// authorizes a device (the channel's Authorizer, its adapter's
// AuthorizeHTTP): the client certificate on a mutual TLS channel, a known
// channel or enrolled token in "Authorization: Bearer" on a channel that
// takes only devices with a credential; an open channel (no tokens, no
// enrollment) serves anyone, as its WebSocket takes anyone. The bytes
// are served by the store's own handler (ServeGet: Range, If-Range; its
// size and SHA-256 checked against its manifest before the first byte),
// on any node in a cluster whichever node it was uploaded to. Each
// refusal is an event of the channel (release_download_refused) and a
// log line, both through the server's gate (charged to the client's
// network: identity.GateNet), so a stranger's flood of refused requests
// writes a burst and a summary.

// devicePattern is the devices' route to a release's manifest and
// binary: {rest...} is {os}/{arch}[/{variant}]/manifest or .../binary.
const devicePattern = "GET /api/channels/{channel_id}/releases/{version}/{rest...}"

// DeviceURL is the path a device fetches a release's binary from on the
// server of its channel (an update frame's url).
func DeviceURL(channelID, version, platform string) string {
	return "/api/channels/" + channelID + "/releases/" + version + "/" + platform + "/binary"
}

// Authorizer authorizes a device's HTTP request as the channel's
// WebSocket authorizes a device: the peer, or a status and why.
type Authorizer interface {
	AuthorizeHTTP(r *http.Request) (peer string, status int, why string)
}

// DeviceChannel is a configured channel as the download route sees it.
type DeviceChannel struct {
	Events *events.Log
	Auth   Authorizer // nil: the channel is disabled
}

// Downloads is the devices' download route over a Store.
type Downloads struct {
	Store   *Store
	Channel func(id string) (DeviceChannel, bool) // false: not configured
	Gate    *throttle.Gate                        // the server's one gate
	Log     *slog.Logger
}

// Routes registers the devices' download route.
func (d *Downloads) Routes(mux httpapi.Mux) {
	httpapi.HandleClass(mux, devicePattern, httpapi.DeviceRoute, d.serve)
}

func (d *Downloads) serve(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("channel_id")
	ch, ok := d.Channel(id)
	if !ok {
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(throttle.Cut(id, MaxEcho))+" is configured")
		return
	}
	refuse := func(status int, peer, why string) {
		// Anyone may be refused: the event and the line go through the
		// server's gate (per network, and per kind), the path cut to the
		// gate's bound.
		gate := d.Gate
		path := gate.Field(r.URL.Path)
		detail := fmt.Sprintf("%d %s from %s: %s", status, path, r.RemoteAddr, why)
		if identity.GateNet(gate, events.ReleaseDownloadRefused, r.RemoteAddr, detail) {
			ch.Events.Add(events.Event{Event: events.ReleaseDownloadRefused, PeerID: peer, Detail: gate.Field(detail)})
			d.Log.Warn("release download refused", "channel_id", id, "path", path, "remote", r.RemoteAddr, "status", status, "why", gate.Field(why))
		}
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="termlink-device"`)
		}
		httpapi.WriteError(w, status, why)
	}
	if ch.Auth == nil {
		refuse(http.StatusNotFound, "", "channel "+strconv.Quote(id)+" is disabled")
		return
	}
	peer, status, why := ch.Auth.AuthorizeHTTP(r)
	if status != 0 {
		refuse(status, peer, why)
		return
	}
	version := r.PathValue("version")
	platform, _, err := ParsePath(version, r.PathValue("rest"), true)
	if err != nil {
		refuse(http.StatusBadRequest, peer, err.Error())
		return
	}
	if _, ok := d.Store.Manifest(version, platform); !ok {
		refuse(http.StatusNotFound, peer, "no release "+version+" for "+platform+" is stored")
		return
	}
	d.Store.ServeGet(w, r)
}
