package server

import (
	"context"
	"path/filepath"

	"termlink/server/settings"
)

// openSettings opens the settings pushed to devices (package settings,
// issue 28) through the backend — the workspace's settings.json, or in
// cluster mode the cluster's bucket, which every node follows and whose
// changes, made through any node, each node pushes to the devices
// connected to it — and makes it a part of the fleet operations (each
// connect, each settings_ack).
func (s *Server) openSettings() (capability, error) {
	rt := s.rt
	st, err := rt.backend.openSettings(context.Background(),
		settings.Options{Dir: filepath.Join(s.cfg.Workspace, "settings"), NoSync: s.opt.NoSync, Log: s.log, Outside: rt.outside},
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
