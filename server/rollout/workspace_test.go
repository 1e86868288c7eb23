package rollout

import (
	"os"
	"path/filepath"
	"testing"

	"termlink/link"
)

// A workspace written before the rollouts had a Storage keeps loading:
// its running rollout (a file as that version wrote it) is taken up
// where it was, and goes on to its end.
func TestWorkspaceOfBeforeLoads(t *testing.T) {
	dir := t.TempDir()
	old := `{"id":"ro-5f2a9c0b1d3e","channel_id":"terminal-dev","version":"v2","target":{"all":true},"canary":1,"percent":100,` +
		`"state":"running","wave":0,"waves":2,"created_by":"otto","created_at":"2026-11-01T10:00:00Z","updated_at":"2026-11-01T10:00:05Z",` +
		`"note":"","devices":[` +
		`{"peer_id":"d01","platform":"linux/arm/6","wave":0,"state":"installed","since":"2026-11-01T10:00:05Z","running":"v2","attempt":1},` +
		`{"peer_id":"d02","platform":"linux/arm/6","wave":1,"state":"pending","since":"2026-11-01T10:00:00Z","running":"v1"}]}`
	if err := os.WriteFile(filepath.Join(dir, "ro-5f2a9c0b1d3e.json"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	f := fleetOf(2)
	m := open(t, f, dir, nil)
	m.tick() // the canary settled: wave 1 goes
	r := state(t, m, "ro-5f2a9c0b1d3e")
	if r.Wave != 1 || r.Devices[1].State != Sent {
		t.Fatalf("the old workspace's rollout: %+v", r)
	}
	f.setOnline("d02", true, "v2")
	m.Report(ch, "d02", &link.UpdateStatus{UpdateID: "ro-5f2a9c0b1d3e.1", Version: "v2", Running: "v2", State: link.UpdateInstalled})
	if r := state(t, m, "ro-5f2a9c0b1d3e"); r.State != Done {
		t.Fatalf("after the last device installed: %s (%s)", r.State, r.Note)
	}
}
