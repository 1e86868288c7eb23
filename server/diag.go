package server

import (
	"net/http"

	"termlink/server/config"
	"termlink/server/diag"
	"termlink/server/events"
	"termlink/server/registry"
)

// Logs and self-tests on demand (issue 28, package diag): the requests
// waiting for a device's answer are a part of the fleet operations (they
// take the devices' diag_result frames), and the API asks them.

// In a cluster, a request this node's connections did not take goes to
// the node whose edge holds the device (the backend's diagRemote), and
// this node's edge answers the other nodes' requests (serveDiag, with
// the API's ServeRemote).

// openDiag adds the diag requests to the fleet operations' parts and
// returns their API, a capability. Options.diagTimeout, when set, is
// both of the API's timeouts (tests).
func (s *Server) openDiag() (capability, error) {
	opt := s.opt
	reqs := diag.New(diag.Options{Send: s.rt.SendFleet, Log: s.log, Outside: s.rt.Outside, Remote: s.backend.diagRemote()})
	s.fleetOps.Parts = append(s.fleetOps.Parts, reqs)
	api := diag.NewAPI(reqs, diagHost{s})
	if opt.diagTimeout > 0 {
		api.LogsTimeout, api.SelftestTimeout = opt.diagTimeout, opt.diagTimeout
	}
	if err := s.backend.serveDiag(api.ServeRemote); err != nil {
		return nil, err
	}
	return api, nil
}

// diagHost is what the diag API asks of the server.
type diagHost struct{ s *Server }

func (h diagHost) Channel(id string) bool {
	return h.s.rt.Channels.Adapter(id) != nil
}

func (h diagHost) Peer(channelID, peerID string) (registry.Peer, bool) {
	return h.s.fleet.reg.Get(channelID, peerID)
}

func (h diagHost) Event(channelID string, e events.Event) {
	h.s.rt.Channels.Event(channelID, e)
}

func (h diagHost) Operator(f http.HandlerFunc) http.HandlerFunc {
	return h.s.RequireRole(config.RoleOperator, f)
}
