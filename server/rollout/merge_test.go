package rollout

import (
	"testing"
	"time"
)

// Two nodes' writes of one rollout at once are merged: each device
// keeps the side that changed it (both: the later change), the state
// the side that changed it (an abort wins over a pause), the furthest
// wave.
func TestMergeKeepsBothSides(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	dev := func(id, state string, at int) Device {
		return Device{PeerID: id, Platform: "linux/arm/6", Wave: 1, State: state, Since: t0.Add(time.Duration(at) * time.Second)}
	}
	base := Rollout{ID: "ro-0000000000e1", State: Running, Wave: 0, Waves: 2, UpdatedAt: t0,
		Devices: []Device{dev("d1", Sent, 0), dev("d2", Sent, 0), dev("d3", Sent, 0), dev("d4", Pending, 0)}}
	local := cloneRollout(&base)
	local.Devices[0] = dev("d1", Installed, 5)   // only here
	local.Devices[2] = dev("d3", Downloading, 3) // both: earlier here
	local.State, local.Paused, local.Note = Paused, &Pause{Reason: "paused by otto", By: "otto", At: t0}, "paused by otto"
	remote := cloneRollout(&base)
	remote.Devices[1] = dev("d2", Failed, 4)    // only there
	remote.Devices[2] = dev("d3", Installed, 6) // both: later there
	remote.State, remote.Note, remote.Wave = Aborted, "aborted by ida", 1
	got := merge(&base, &local, &remote)
	for i, want := range []string{Installed, Failed, Installed, Pending} {
		if got.Devices[i].State != want {
			t.Errorf("%s: %s, want %s", got.Devices[i].PeerID, got.Devices[i].State, want)
		}
	}
	if got.State != Aborted || got.Paused != nil || got.Note != "aborted by ida" || got.Wave != 1 {
		t.Errorf("merged: state %s, paused %+v, note %q, wave %d; want the abort, wave 1", got.State, got.Paused, got.Note, got.Wave)
	}
	// The other way round: a pause here over a record still running
	// there is kept.
	remote = cloneRollout(&base)
	remote.Wave = 1
	if got := merge(&base, &local, &remote); got.State != Paused || got.Paused == nil || got.Wave != 1 {
		t.Errorf("a pause here, waves there: %s %+v wave %d", got.State, got.Paused, got.Wave)
	}
}

// A base that does not line up with the devices (none: the record was
// never read back, as when a node's watch brings its own first write
// before the write returns) cannot say which side changed a device:
// each device is the side that changed it last, the record's on a tie.
// The devices released here used to be dropped for the record's
// pending ones while the released wave was kept.
func TestMergeOverABaseThatDoesNotLineUp(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	dev := func(id, state string, at int) Device {
		return Device{PeerID: id, Platform: "linux/arm/6", Wave: 1, State: state, Since: t0.Add(time.Duration(at) * time.Second)}
	}
	remote := Rollout{ID: "ro-0000000000e2", State: Running, Wave: -1, Waves: 2, UpdatedAt: t0,
		Devices: []Device{dev("d1", Pending, 0), dev("d2", Pending, 0), dev("d3", Pending, 0)}}
	local := cloneRollout(&remote)
	local.Wave = 1
	local.Devices[0] = dev("d1", Sent, 1)
	local.Devices[1] = dev("d2", Offline, 1)
	local.Devices[2] = dev("d3", Skipped, 0) // same time: the record's
	got := merge(&Rollout{}, &local, &remote)
	for i, want := range []string{Sent, Offline, Pending} {
		if got.Devices[i].State != want {
			t.Errorf("%s: %s, want %s", got.Devices[i].PeerID, got.Devices[i].State, want)
		}
	}
	if got.Wave != 1 {
		t.Errorf("wave %d, want 1", got.Wave)
	}
}
