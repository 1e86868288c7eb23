package releases_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/server/releases"
	"termlink/server/releases/releasestest"
)

// The contract on DirStorage: each handle is the directory opened again.
func TestLocalContract(t *testing.T) {
	releasestest.Run(t, func(t *testing.T) releasestest.Harness {
		dir := filepath.Join(t.TempDir(), "releases")
		return releasestest.Harness{
			Open: func(t *testing.T, opt releases.Options) *releases.Store {
				opt.Dir, opt.NoSync = dir, true
				s, err := releases.Open(opt)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			Tamper: func(t *testing.T, version, platform string, data []byte) {
				p := filepath.Join(dir, version, strings.ReplaceAll(platform, "/", "_"), "binary")
				if err := os.WriteFile(p+".new", data, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(p+".new", p); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}
