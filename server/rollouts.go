package server

import (
	"context"
	"path/filepath"

	"termlink/server/rollout"
)

// Staged rollouts of signed termd releases (package rollout): a part of
// the fleet operations (package fleetops: it gets each connect and each
// update_status), sending update frames through the runtime's SendFleet
// with the devices' download route (devicedownload.go) as their url;
// its routes are the operator's /api/channels/{channel_id}/rollouts.

// openRollouts opens the rollouts kept in workspace/rollouts, adds them
// to the fleet operations' parts and keeps them for the routes. Called by
// New once the release store is open, before the adapters start.
func (s *Server) openRollouts(noSync bool) error {
	rt := s.rt
	m, err := s.backend.openRollouts(context.Background(), rollout.Options{
		Dir: filepath.Join(s.cfg.Workspace, "rollouts"), Channels: rt.Order,
		Devices: s.fleet.reg, Releases: s.releases, Send: rt.SendFleet,
		Event: rt.Channels.Event,
		URL:   DeviceReleaseURL, NoSync: noSync, Log: s.log,
	})
	if err != nil {
		return err
	}
	s.rollouts = m
	s.fleetOps.Parts = append(s.fleetOps.Parts, m, m.Busy())
	return nil
}

// closeRollouts stops the rollouts' ticker and writes what is behind
// (Shutdown, once the adapters are closed).
func (s *Server) closeRollouts() error {
	if s.rollouts == nil {
		return nil
	}
	return s.rollouts.Close()
}
