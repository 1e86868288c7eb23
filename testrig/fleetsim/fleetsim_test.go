package fleetsim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"termlink/release"
	"termlink/server/config"
	"termlink/server/rollout"
	"termlink/server/servertest"
)

// upload stores body as version for linux/arm/6 on the server at base.
func upload(tb testing.TB, base, version string, body []byte) *release.Manifest {
	tb.Helper()
	m, err := Upload(context.Background(), base, "", tb.TempDir(), version, "linux/arm/6", body)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// call makes one API request with a JSON body (or none) into v.
func call(tb testing.TB, method, url, body string, v any) int {
	tb.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if method == "POST" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			tb.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
	return resp.StatusCode
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within 90 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startFleet(t *testing.T, srv *servertest.Server, n int, fail ...string) *Fleet {
	t.Helper()
	f, err := Start(context.Background(), Options{URL: srv.URL, N: n, Version: "v1", Fail: fail, Tags: map[string]string{"site": "lab"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("fleet: %v", err)
		}
	})
	return f
}

// A real termserver and 12 simulated devices on real WebSockets: the
// canaries, then waves of half, every device downloading the real
// binary over the devices' route and coming back on the new version.
func TestRolloutToSimulatedFleet(t *testing.T) {
	srv := servertest.Start(t, nil)
	base := "http://" + srv.Addr
	bin := bytes.Repeat([]byte("termd v2 "), 20000)
	m := upload(t, base, "v2", bin)
	f := startFleet(t, srv, 12)
	api := base + "/api/channels/terminal-dev/rollouts"
	waitFor(t, "12 devices online", func() bool {
		var l struct{ Peers []struct{ Online bool } }
		call(t, "GET", base+"/api/channels/terminal-dev/peers?online=true", "", &l)
		return len(l.Peers) == 12
	})
	var r rollout.Rollout
	if st := call(t, "POST", api, `{"version":"v2","tag":"site=lab","canary":2,"percent":50}`, &r); st != 201 {
		t.Fatalf("create: %d %+v", st, r)
	}
	waitFor(t, "every device on v2", func() bool { return f.Versions()["v2"] == 12 })
	waitFor(t, "the rollout done", func() bool {
		call(t, "GET", api+"/"+r.ID, "", &r)
		return r.State == rollout.Done
	})
	if r.Counts[rollout.Installed] != 12 {
		t.Fatalf("counts %v", r.Counts)
	}
	for _, d := range f.Devices {
		if d.Bytes() != m.Size || d.Updates() != 1 {
			t.Errorf("%s downloaded %d bytes in %d updates, want %d in 1", d.ID, d.Bytes(), d.Updates(), m.Size)
		}
	}
	if errs := f.Errors(); len(errs) > 0 {
		t.Fatalf("download errors: %v", errs)
	}
}

// A canary that rolls back pauses the rollout, naming it; nothing else
// is updated until the operator resumes.
func TestCanaryRollbackPauses(t *testing.T) {
	srv := servertest.Start(t, func(c *config.Config) {})
	base := "http://" + srv.Addr
	upload(t, base, "v2", []byte("termd v2"))
	f := startFleet(t, srv, 6, "sim-001")
	api := base + "/api/channels/terminal-dev/rollouts"
	waitFor(t, "6 devices online", func() bool {
		var l struct{ Peers []struct{ Online bool } }
		call(t, "GET", base+"/api/channels/terminal-dev/peers?online=true", "", &l)
		return len(l.Peers) == 6
	})
	var r rollout.Rollout
	if st := call(t, "POST", api, `{"version":"v2","all":true,"canary":2,"percent":50}`, &r); st != 201 {
		t.Fatalf("create: %d", st)
	}
	waitFor(t, "the rollout paused", func() bool {
		call(t, "GET", api+"/"+r.ID, "", &r)
		return r.State == rollout.Paused
	})
	if r.Paused.PeerID != "sim-001" || r.Paused.State != rollout.RolledBack || !strings.Contains(r.Paused.Reason, "health gate") {
		t.Fatalf("paused: %+v", r.Paused)
	}
	waitFor(t, "the other canary installed", func() bool { return f.Devices[1].Version() == "v2" })
	time.Sleep(300 * time.Millisecond) // a wave wrongly released would have gone out by now
	if v := f.Versions(); v["v2"] != 1 {
		t.Fatalf("versions while paused: %v", v)
	}
	if st := call(t, "POST", api+"/"+r.ID+"/resume", "", &r); st != 200 {
		t.Fatalf("resume: %d", st)
	}
	waitFor(t, "the rest on v2", func() bool { return f.Versions()["v2"] == 5 })
	waitFor(t, "done", func() bool {
		call(t, "GET", api+"/"+r.ID, "", &r)
		return r.State == rollout.Done
	})
	if d := fmt.Sprint(r.Counts); r.Counts[rollout.RolledBack] != 1 || r.Counts[rollout.Installed] != 5 {
		t.Fatalf("counts %s", d)
	}
}
