package termd

import (
	"crypto/ed25519"
	"slices"
	"testing"

	"termlink/device/update"
	"termlink/link"
)

// "update" is listed only by a termd that can update itself: under its
// supervisor and with a release key pinned.
func TestUpdateCapabilityNeedsSupervisorAndKey(t *testing.T) {
	key := make(ed25519.PublicKey, ed25519.PublicKeySize)
	for _, c := range []struct {
		worker *update.Worker
		key    ed25519.PublicKey
		want   bool
	}{
		{nil, nil, false},
		{nil, key, false},
		{&update.Worker{}, nil, false},
		{&update.Worker{}, key, true},
	} {
		s := &setup{cfg: Config{Worker: c.worker, ReleaseKey: c.key}}
		if got := slices.Contains(s.fleetCaps(), link.CapUpdate); got != c.want {
			t.Errorf("worker %v, key %v: lists update = %v, want %v", c.worker != nil, c.key != nil, got, c.want)
		}
	}
}
