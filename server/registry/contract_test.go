package registry_test

import (
	"testing"

	"termlink/server/registry"
	"termlink/server/registry/registrytest"
)

// The contract on the local store: the node restarted is the
// workspace's registry directory opened again.
func TestLocalContract(t *testing.T) {
	registrytest.Run(t, func(t *testing.T) registrytest.Store {
		dir := t.TempDir()
		return registrytest.Store{Open: func(t *testing.T, opt registry.Options) registrytest.Registry {
			opt.NoSync = true
			r, err := registry.Open(dir, opt)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}}
	})
}
