package settings_test

import (
	"testing"

	"termlink/server/settings"
	"termlink/server/settings/settingstest"
)

// The contract on the local store: each handle is the workspace's
// directory opened again (once the previous one is closed).
func TestLocalContract(t *testing.T) {
	settingstest.Run(t, func(t *testing.T) func(settings.Options, settings.Deps) *settings.Store {
		dir := t.TempDir()
		return func(opt settings.Options, deps settings.Deps) *settings.Store {
			opt.Dir, opt.NoSync = dir, true
			s, err := settings.Open(opt, deps)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}
