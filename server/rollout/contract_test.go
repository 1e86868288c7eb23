package rollout_test

import (
	"testing"

	"termlink/server/rollout"
	"termlink/server/rollout/rollouttest"
)

// The contract on the local store: each handle is the workspace's
// directory opened again.
func TestLocalContract(t *testing.T) {
	rollouttest.Run(t, func(t *testing.T) func() rollout.Storage {
		dir := t.TempDir()
		return func() rollout.Storage {
			st, err := rollout.OpenLocal(dir, true)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	})
}

// The contract on the shared store in memory (the tests' stand-in for
// the cluster's).
func TestMemContract(t *testing.T) {
	rollouttest.Run(t, func(t *testing.T) func() rollout.Storage { return rollouttest.NewMem().Handle })
}
