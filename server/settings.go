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
	st, err := s.backend.openSettings(context.Background(),
		settings.Options{Dir: filepath.Join(s.cfg.Workspace, "settings"), NoSync: s.opt.NoSync, Log: s.log, Outside: rt.Outside},
		settings.Deps{
			Registry: s.fleet.reg,
			Send:     rt.SendFleet,
			Event:    rt.Channels.Event,
			Channel:  rt.Channels.Exists,
		})
	if err != nil {
		return nil, err
	}
	s.fleetOps.Parts = append(s.fleetOps.Parts, st)
	return st, nil
}
