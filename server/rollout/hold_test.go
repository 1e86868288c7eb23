package rollout

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/registry"
)

// clock is a Manager's injected time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func at(hhmm string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", "2026-11-30 "+hhmm)
	if err != nil {
		panic(err)
	}
	return t
}

// busy reports d busy (why) or idle through the Busy part, as its frame does.
func busy(t *testing.T, m *Manager, peer string, on bool, why string, offset *int) {
	t.Helper()
	if _, err := m.Busy().Report(ch, peer, &link.Busy{Busy: on, Why: why, UTCOffset: offset}); err != nil {
		t.Fatalf("busy of %s: %v", peer, err)
	}
}

// A device in use is not sent its update: it waits ("waiting: in use")
// and gets it the moment it says it is idle; the others go at once.
func TestBusyDeviceWaitsThenGoesWhenIdle(t *testing.T) {
	f := fleetOf(3)
	m := open(t, f, t.TempDir(), nil)
	busy(t, m, "d02", true, link.BusyRun, nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "sent at once", f.takeSent(), []string{"d01", "d03"})
	if d := devState(state(t, m, r.ID), "d02"); d.State != Waiting || d.Reason != WaitInUse {
		t.Fatalf("d02 in use is %s (%s), want waiting: in use", d.State, d.Reason)
	}
	m.tick()
	eq(t, "a tick while it is in use", f.takeSent(), nil)
	busy(t, m, "d02", true, link.BusyKeys, nil)
	eq(t, "still in use (keys)", f.takeSent(), nil)
	busy(t, m, "d02", false, "", nil)
	eq(t, "idle", f.takeSent(), []string{"d02"})
	if d := devState(state(t, m, r.ID), "d02"); d.State != Sent {
		t.Fatalf("d02 idle is %s, want sent", d.State)
	}
	if p, _ := f.Get(ch, "d02"); p.Busy == nil || p.Busy.Busy {
		t.Fatalf("the registry keeps %+v, want idle", p.Busy)
	}
	// A busy frame of a device not online is refused, nothing kept.
	f.setOnline("d03", false, "")
	if _, err := m.Busy().Report(ch, "d03", &link.Busy{Busy: true, Why: link.BusyRun}); err == nil {
		t.Fatal("a busy frame of an offline device taken")
	}
}

// Idle found by the tick (the registry's state changed without a frame
// here: another node's connection) sends it too; past the canaries a
// device in use does not hold the next wave back, a canary in use does.
func TestBusyCanaryHoldsWavesLaterOnesDoNot(t *testing.T) {
	f := fleetOf(4)
	m := open(t, f, t.TempDir(), nil)
	busy(t, m, "d01", true, link.BusyQuestion, nil)
	busy(t, m, "d03", true, link.BusyRun, nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Canary: 2, Percent: 50}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "canaries", f.takeSent(), []string{"d02"})
	install(m, f, "d02")
	m.tick()
	eq(t, "a canary in use holds wave 1", f.takeSent(), nil)
	f.SetBusy(ch, "d01", registry.BusyState{})
	m.tick()
	eq(t, "the tick sends the canary once idle", f.takeSent(), []string{"d01"})
	install(m, f, "d01")
	eq(t, "wave 1 but d03 in use", f.takeSent(), []string{"d04"})
	install(m, f, "d04")
	r = state(t, m, r.ID)
	if r.State != Running || devState(r, "d03").State != Waiting {
		t.Fatalf("rollout %s, d03 %s: want running with d03 waiting", r.State, devState(r, "d03").State)
	}
	busy(t, m, "d03", false, "", nil)
	eq(t, "d03 idle", f.takeSent(), []string{"d03"})
	install(m, f, "d03")
	if r = state(t, m, r.ID); r.State != Done {
		t.Fatalf("rollout %s, want done", r.State)
	}
}

// Outside its window a rollout sends nothing ("waiting: window"), no
// wave goes on; it sends once the window opens (the manager's clock).
func TestWindowClosedThenOpen(t *testing.T) {
	f := fleetOf(2)
	c := &clock{t: at("12:00")}
	m := open(t, f, t.TempDir(), func(o *Options) { o.Now = c.now })
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Window: "02:00-05:00"}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	if r.Window != "02:00-05:00" || r.Zone != "" {
		t.Fatalf("the rollout keeps window %q zone %q", r.Window, r.Zone)
	}
	eq(t, "at noon", f.takeSent(), nil)
	for _, d := range state(t, m, r.ID).Devices {
		if d.State != Waiting || d.Reason != WaitWindow {
			t.Fatalf("%s is %s (%s) at noon, want waiting: window", d.PeerID, d.State, d.Reason)
		}
	}
	busy(t, m, "d01", false, "", nil)
	eq(t, "idle at noon", f.takeSent(), nil)
	c.set(at("01:59"))
	m.tick()
	eq(t, "at 01:59", f.takeSent(), nil)
	c.set(at("02:00"))
	m.tick()
	eq(t, "at 02:00", f.takeSent(), []string{"d01", "d02"})
	// Its record keeps the window (a restart reads it back).
	m.Close()
	m2 := open(t, f, m.opt.Dir, func(o *Options) { o.Now = c.now })
	if r2 := state(t, m2, r.ID); r2.Window != "02:00-05:00" {
		t.Fatalf("reloaded window %q", r2.Window)
	}
}

// A window past midnight spans it; in the devices' zone it is read in
// the offset each device reported, else UTC.
func TestWindowPastMidnightAndDeviceZone(t *testing.T) {
	for _, c := range []struct {
		window string
		at     string
		in     bool
	}{
		{"22:00-04:00", "23:30", true}, {"22:00-04:00", "00:00", true}, {"22:00-04:00", "03:59", true},
		{"22:00-04:00", "04:00", false}, {"22:00-04:00", "21:59", false}, {"22:00-04:00", "12:00", false},
		{"02:00-05:00", "05:00", false}, {"02:00-05:00", "04:59", true},
	} {
		if got := inWindow(c.window, at(c.at), 0); got != c.in {
			t.Errorf("%s at %s: in %v, want %v", c.window, c.at, got, c.in)
		}
	}
	f := fleetOf(2)
	c := &clock{t: at("21:30")} // UTC: 23:30 at +2h
	m := open(t, f, t.TempDir(), func(o *Options) { o.Now = c.now })
	plus2 := 2 * 3600
	busy(t, m, "d01", false, "", &plus2)
	_, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Window: "22:00-04:00", Zone: ZoneDevice}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "23:30 at d01, 21:30 UTC at d02 (no zone said)", f.takeSent(), []string{"d01"})
	c.set(at("22:00"))
	// d03 connected a moment ago and has not said its zone yet: it is
	// given zoneGrace to say it before it is taken for UTC.
	f.add("d03", "v1", "linux/arm/6", true, nil)
	f.mu.Lock()
	p := f.peers["d03"]
	since := at("21:59").Add(58 * time.Second).Format(time.RFC3339)
	p.ConnectedSince = &since
	f.peers["d03"] = p
	f.mu.Unlock()
	m.tick()
	eq(t, "22:00 UTC", f.takeSent(), []string{"d02"})
	r := cloneRollout(&m.byID[m.order[0]].r)
	d := Device{PeerID: "d03", State: Pending}
	m.mu.Lock()
	why := m.holdLocked(&r, &d)
	m.mu.Unlock()
	if why != WaitWindow {
		t.Fatalf("a device 2 s after its connect without its zone: hold %q, want %q", why, WaitWindow)
	}
	c.set(at("22:00").Add(zoneGrace))
	m.mu.Lock()
	why = m.holdLocked(&r, &d)
	m.mu.Unlock()
	if why != "" {
		t.Fatalf("a device past the grace without its zone: hold %q, want none (UTC)", why)
	}
}

// Force sends regardless of the window and of the devices' use.
func TestForceSendsRegardless(t *testing.T) {
	f := fleetOf(2)
	c := &clock{t: at("12:00")}
	m := open(t, f, t.TempDir(), func(o *Options) { o.Now = c.now })
	busy(t, m, "d01", true, link.BusyRun, nil)
	r, err := m.Create(ch, Request{Version: "v2", Target: Target{All: true}, Window: "02:00-05:00", Force: true}, "otto")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "forced", f.takeSent(), []string{"d01", "d02"})
	if !state(t, m, r.ID).Force {
		t.Fatal("the rollout does not keep force")
	}
}

// A request's window and zone are checked, each refusal naming the field.
func TestWindowRequestRefused(t *testing.T) {
	f := fleetOf(1)
	m := open(t, f, t.TempDir(), nil)
	for _, c := range []struct {
		q    Request
		says string
	}{
		{Request{Window: "2-5"}, `window "2-5": "2" is not HH:MM`},
		{Request{Window: "02:00"}, "want HH:MM-HH:MM"},
		{Request{Window: "24:00-05:00"}, "from 00:00 to 23:59"},
		{Request{Window: "02:60-05:00"}, "from 00:00 to 23:59"},
		{Request{Window: "+1:00-05:00"}, "from 00:00 to 23:59"},
		{Request{Window: "03:00-03:00"}, "starts where it ends"},
		{Request{Window: "02:00-05:00", Zone: "Europe/Berlin"}, `zone "Europe/Berlin": want "utc"`},
		{Request{Zone: ZoneDevice}, "a zone is for a window"},
	} {
		c.q.Version, c.q.Target = "v2", Target{All: true}
		_, err := m.Create(ch, c.q, "otto")
		var e *Error
		if err == nil || !strings.Contains(err.Error(), c.says) || !errors.As(err, &e) || e.Status != 400 {
			t.Fatalf("%+v: %v, want a 400 saying %q", c.q, err, c.says)
		}
	}
	if len(f.takeSent()) != 0 {
		t.Fatal("a refused request sent something")
	}
}

// A stored rollout with a bad window is refused by the parser.
func TestParseRefusesBadWindow(t *testing.T) {
	rec := `{"id":"ro-0123456789ab","channel_id":"terminal-dev","version":"v2","target":{"all":true},"canary":0,"percent":100,` +
		`"window":"25:00-01:00","state":"running","wave":0,"waves":1,"created_by":"o","created_at":"2026-01-01T00:00:00Z",` +
		`"updated_at":"2026-01-01T00:00:00Z","devices":[{"peer_id":"d01","wave":0,"state":"waiting","reason":"window","since":"2026-01-01T00:00:00Z"}]}`
	if _, err := Parse([]byte(rec), 0); err == nil || !strings.Contains(err.Error(), "window") {
		t.Fatalf("Parse: %v, want the window refused", err)
	}
	if _, err := Parse([]byte(strings.Replace(rec, "25:00", "22:00", 1)), 0); err != nil {
		t.Fatalf("Parse of a good window and a waiting device: %v", err)
	}
}
