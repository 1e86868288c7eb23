package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/events"
	"termlink/server/rollout"
)

// connectUpdater connects peer as a device that lists "update", on
// platform running version.
func connectUpdater(t *testing.T, ts *testServer, peer, platform, version string) *client {
	t.Helper()
	c := dial(t, ts.ws, nil)
	c.send(&link.Connect{PeerID: peer, DeviceName: "test-" + peer, Version: version, Platform: platform,
		Capabilities: []string{link.CapText, link.CapUpdate}})
	readAs[*link.Connected](c)
	return c
}

// The rollout API over real HTTP: who may do what, the refusals and their
// reasons, devices without a binary for their platform skipped with why,
// and a rollout's update frame on a real WebSocket.
func TestRolloutAPI(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withAdmin(t), nil)
	putRelease(t, ts.Server, "v2.0.0", "linux/arm/6", []byte("termd v2 for arm"))
	arm := connectUpdater(t, ts, "pi-arm", "linux/arm/6", "v1.0.0")
	connectUpdater(t, ts, "pc-x86", "linux/amd64", "v1.0.0")
	base := ts.http.URL + "/api/channels/terminal-dev/rollouts"

	body := `{"version":"v2.0.0","all":true,"canary":1}`
	if r := api(t, "POST", base, viewerSecret, body); r.status != 403 || !strings.Contains(string(r.body), "needs role operator") {
		t.Fatalf("viewer POST: %d %s", r.status, r.body)
	}
	if r := api(t, "POST", base, "", body); r.status != 401 {
		t.Fatalf("no token: %d %s", r.status, r.body)
	}
	for _, tc := range []struct {
		body, want string
		status     int
	}{
		{`{"version":"v9.9.9","all":true}`, "no release v9.9.9 is stored", 404},
		{`{"version":"v2.0.0"}`, "exactly one of peers", 400},
		{`{"version":"v2.0.0","peers":["ghost"]}`, "peer ghost not known", 404},
		{`{"version":"v2.0.0","all":true,"percent":0.5}`, "not the JSON object expected", 400},
		{`{"version":"v2.0.0","everything":true}`, "unknown field", 400},
	} {
		if r := api(t, "POST", base, operatorSecret, tc.body); r.status != tc.status || !strings.Contains(string(r.body), tc.want) {
			t.Errorf("%s: %d %s, want %d %q", tc.body, r.status, r.body, tc.status, tc.want)
		}
	}
	r := api(t, "POST", base, operatorSecret, body)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var ro rollout.Rollout
	if err := json.Unmarshal(r.body, &ro); err != nil {
		t.Fatal(err)
	}
	var x86 rollout.Device
	for _, d := range ro.Devices {
		if d.PeerID == "pc-x86" {
			x86 = d
		}
	}
	if x86.State != rollout.Skipped || !strings.Contains(x86.Reason, "no release v2.0.0 for its platform linux/amd64") {
		t.Fatalf("pc-x86: %+v", x86)
	}
	u := readAs[*link.Update](arm)
	if u.Version != "v2.0.0" || u.URL != DeviceReleaseURL("terminal-dev", "v2.0.0", "linux/arm/6") {
		t.Fatalf("update frame %+v", u)
	}
	if r := api(t, "GET", base+"?version=v2.0.0", viewerSecret, ""); r.status != 200 || !strings.Contains(string(r.body), ro.ID) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if r := api(t, "POST", base+"/"+ro.ID+"/pause", viewerSecret, ""); r.status != 403 {
		t.Fatalf("viewer pause: %d %s", r.status, r.body)
	}
	for _, a := range []string{"pause", "resume"} {
		if r := api(t, "POST", base+"/"+ro.ID+"/"+a, operatorSecret, ""); r.status != 200 {
			t.Fatalf("%s: %d %s", a, r.status, r.body)
		}
	}
	// The device fails: the rollout pauses by itself, naming it.
	arm.send(&link.UpdateStatus{UpdateID: u.UpdateID, Version: "v2.0.0", Running: "v1.0.0", State: link.UpdateRolledBack, Reason: "no heartbeat within the gate"})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got rollout.Rollout
		if getRollout(t, base+"/"+ro.ID, &got); got.State == rollout.Paused {
			if got.Paused.PeerID != "pi-arm" || !strings.Contains(got.Paused.Reason, "no heartbeat") {
				t.Fatalf("paused: %+v", got.Paused)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rollout did not pause")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := api(t, "POST", base+"/"+ro.ID+"/abort", operatorSecret, ""); r.status != 200 {
		t.Fatalf("abort: %d %s", r.status, r.body)
	}
	if r := api(t, "POST", base+"/"+ro.ID+"/resume", operatorSecret, ""); r.status != 409 {
		t.Fatalf("resume after abort: %d %s", r.status, r.body)
	}
	seen := map[string]bool{}
	for _, e := range ts.rt.Channels["terminal-dev"].Events.Recent(-1) {
		seen[e.Event] = true
	}
	for _, name := range []string{events.RolloutCreated, events.RolloutWave, events.RolloutDevice, events.RolloutPaused, events.RolloutResumed, events.RolloutAborted} {
		if !seen[name] {
			t.Errorf("no %s event", name)
		}
	}
}

func getRollout(t *testing.T, url string, v *rollout.Rollout) {
	t.Helper()
	r := api(t, "GET", url, viewerSecret, "")
	if r.status != 200 {
		t.Fatalf("GET %s: %d %s", url, r.status, r.body)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatal(err)
	}
}
