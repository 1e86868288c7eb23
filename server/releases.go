package server

import (
	"log/slog"
	"path/filepath"

	"termlink/release"
	"termlink/server/config"
	"termlink/server/releases"
)

// openReleases opens the store of signed termd releases in the workspace
// (package releases), with the release key of the config's "releases"
// block when it names one. In cluster mode each node keeps its own store
// (an upload goes to the node it is sent to).
func openReleases(cfg *config.Config, noSync bool, log *slog.Logger) (*releases.Store, error) {
	opt := releases.Options{Dir: filepath.Join(cfg.Workspace, "releases"), MaxBytes: cfg.Releases.MaxBytes,
		MaxReleases: cfg.Releases.MaxReleases, NoSync: noSync, Log: log}
	if f := cfg.Releases.PublicKeyFile; f != "" {
		pub, err := release.LoadPublicKey(f)
		if err != nil {
			return nil, err
		}
		opt.PublicKey = pub
	}
	return releases.Open(opt)
}
