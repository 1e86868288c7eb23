package config

import (
	"fmt"
	"os"

	"termlink/release"
)

// Releases is the "releases" block: termserver's store of signed termd
// releases (package server/releases; issue 28).
//
//	"releases": {"publicKeyFile": "release.pub", "maxBytes": 1073741824, "maxReleases": 64}
type Releases struct {
	// PublicKeyFile is the operator's release.pub (termrig release
	// keygen): with it the server refuses an upload whose signature the
	// key did not make. Relative to the config file's directory. Empty:
	// uploads are stored unchecked (devices always check).
	PublicKeyFile string
	MaxBytes      int64 // all stored binaries together; default 1 GiB
	MaxReleases   int   // stored releases (version x platform), 1..1000 (the list is one page); default 64
}

// releases decodes the "releases" block.
func (w *walker) releases(path string, n *node) Releases {
	var r Releases
	f := w.fields(path, n, "releases")
	if f == nil {
		return r
	}
	if e, ok := f["publicKeyFile"]; ok {
		r.PublicKeyFile, _ = w.filePath(join(path, e.key), e.val)
	}
	if e, ok := f["maxBytes"]; ok {
		v, _ := w.integer(join(path, e.key), e.val, 1<<20, noMax)
		r.MaxBytes = int64(v)
	}
	if e, ok := f["maxReleases"]; ok {
		r.MaxReleases, _ = w.integer(join(path, e.key), e.val, 1, 1000) // the list is one page
	}
	return r
}

// checkReleaseKey resolves releases.publicKeyFile against dir and checks
// that it holds an ed25519 public key.
func checkReleaseKey(cfg *Config, dir string) []*Error {
	if cfg.Releases.PublicKeyFile == "" {
		return nil
	}
	const p = "releases.publicKeyFile"
	cfg.Releases.PublicKeyFile = resolveFile(cfg.Releases.PublicKeyFile, dir)
	b, err := os.ReadFile(cfg.Releases.PublicKeyFile)
	if err == nil {
		_, err = release.ParsePublicKey(b)
	}
	if err != nil {
		return []*Error{{Path: p, Msg: fmt.Sprintf("%s: %v", cfg.Releases.PublicKeyFile, err)}}
	}
	return nil
}
