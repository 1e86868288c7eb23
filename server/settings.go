package server

import (
	"path/filepath"

	"termlink/server/settings"
)

// openSettings opens the settings pushed to devices (package settings,
// issue 28) in the workspace and makes it a part of the fleet operations
// (each connect, each settings_ack). In cluster mode each node keeps its
// own documents and pushes to the devices connected to it.
func (s *Server) openSettings(noSync bool) (*settings.Store, error) {
	rt := s.rt
	st, err := settings.Open(settings.Options{Dir: filepath.Join(s.cfg.Workspace, "settings"), NoSync: noSync, Log: s.log, Outside: rt.outside},
		settings.Deps{
			Registry: rt.fleet.reg,
			Send:     rt.SendFleet,
			Event:    rt.channels.event,
			Channel:  rt.channels.exists,
		})
	if err != nil {
		return nil, err
	}
	rt.fleetOps.parts = append(rt.fleetOps.parts, st)
	return st, nil
}
