package termd

import (
	"crypto/ed25519"
	"slices"
	"testing"
	"time"

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

// On start termd says where the last update left it. A release given up
// 200 ms after the install before it (the same second: the state file
// kept whole seconds once, and then said "installed") is a rollback. The
// report names the attempt (its update_id) when the last update staged
// was of the version it is about.
func TestStartStatus(t *testing.T) {
	at := time.Date(2026, 11, 27, 4, 7, 38, 48e6, time.UTC)
	reqV1 := &update.Request{Version: "v1", UpdateID: "r-7.1"}
	reqV2 := &update.Request{Version: "v2", UpdateID: "r-7.2"}
	rolledBack := update.Status{Installed: "v1", InstalledAt: at,
		LastFailure: &update.Failure{Version: "v2", Reason: "it exited", At: at.Add(200 * time.Millisecond)}}
	for _, c := range []struct {
		name  string
		st    update.Status
		req   *update.Request
		want  link.UpdateStatus
		trial bool
	}{
		{"never updated", update.Status{}, nil, link.UpdateStatus{Version: "v1", Running: "v1", State: link.UpdateInstalled}, false},
		{"installed by hand after an update to it", update.Status{}, reqV1, link.UpdateStatus{Version: "v1", Running: "v1", State: link.UpdateInstalled}, false},
		{"on trial", update.Status{Pending: &update.Pending{Version: "v1"}}, nil, link.UpdateStatus{Version: "v1", Running: "v1", State: link.UpdateRestarting}, true},
		{"on trial, its attempt named", update.Status{Pending: &update.Pending{Version: "v1"}}, reqV1,
			link.UpdateStatus{UpdateID: "r-7.1", Version: "v1", Running: "v1", State: link.UpdateRestarting}, true},
		{"on trial, another version's request", update.Status{Pending: &update.Pending{Version: "v1"}}, reqV2,
			link.UpdateStatus{Version: "v1", Running: "v1", State: link.UpdateRestarting}, true},
		{"rolled back in the install's second", rolledBack, nil,
			link.UpdateStatus{Version: "v2", Running: "v1", State: link.UpdateRolledBack, Reason: "it exited"}, false},
		{"rolled back, its attempt named", rolledBack, reqV2,
			link.UpdateStatus{UpdateID: "r-7.2", Version: "v2", Running: "v1", State: link.UpdateRolledBack, Reason: "it exited"}, false},
		{"installed after an older failure", update.Status{Installed: "v1", InstalledAt: at,
			LastFailure: &update.Failure{Version: "v0", Reason: "x", At: at.Add(-time.Minute)}}, reqV1,
			link.UpdateStatus{UpdateID: "r-7.1", Version: "v1", Running: "v1", State: link.UpdateInstalled}, false},
		{"the failed version is this one", update.Status{LastFailure: &update.Failure{Version: "v1", At: at}}, nil,
			link.UpdateStatus{Version: "v1", Running: "v1", State: link.UpdateInstalled}, false},
	} {
		got, trial := startStatus(&c.st, c.req, "v1")
		if *got != c.want || trial != c.trial {
			t.Errorf("%s: %+v, trial %v; want %+v, %v", c.name, *got, trial, c.want, c.trial)
		}
	}
}
