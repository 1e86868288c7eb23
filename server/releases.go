package server

import (
	"context"
	"path/filepath"

	"termlink/release"
	"termlink/server/releases"
)

// openReleases opens the store of signed termd releases through the
// backend (package releases' rules either way): the workspace's files,
// or in cluster mode the cluster's object store, which every node lists
// and serves (each node's copies in the workspace's "releases-cache");
// with the release key of the config's "releases" block when it names
// one.
func (s *Server) openReleases() (c capability, err error) {
	cfg := s.cfg
	opt := releases.Options{Dir: filepath.Join(cfg.Workspace, "releases"), MaxBytes: cfg.Releases.MaxBytes,
		MaxReleases: cfg.Releases.MaxReleases, NoSync: s.opt.NoSync, Log: s.log}
	if f := cfg.Releases.PublicKeyFile; f != "" {
		pub, err := release.LoadPublicKey(f)
		if err != nil {
			return nil, err
		}
		opt.PublicKey = pub
	}
	s.releases, err = s.backend.openReleases(context.Background(), opt, filepath.Join(cfg.Workspace, "releases-cache"))
	return s.releases, err
}
