package registry

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"termlink/link"
)

// Issue 43: the registry keeps a device's last health report, one per
// HealthEvery per connection, from its live connection only; kept across
// a reconnect and a restart; counted per condition for /metrics.
func TestHealthKeptBoundedAndPersisted(t *testing.T) {
	dir := t.TempDir()
	c := &clock{time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)}
	r := open(t, dir, c)
	gen, _, _ := r.Connected(dev("kiosk-1", nil))
	before := r.Usage("ch").Bytes
	h := link.Health{UptimeSeconds: 60, DiskFreePercent: 4, LastStop: link.StopPowerLoss, Throttled: []string{link.ThrottleThrottledOccurred}}
	if err := r.SetHealth("ch", "kiosk-1", gen+1, h); !errors.Is(err, ErrNotLive) {
		t.Fatalf("a report from another connection: %v, want ErrNotLive", err)
	}
	if err := r.SetHealth("ch", "kiosk-1", gen, h); err != nil {
		t.Fatal(err)
	}
	if r.Usage("ch").Bytes <= before {
		t.Fatalf("the report is not accounted in the channel's bytes (%d, was %d)", r.Usage("ch").Bytes, before)
	}
	c.t = c.t.Add(HealthEvery - time.Second)
	h2 := h
	h2.DiskFreePercent = 90
	if err := r.SetHealth("ch", "kiosk-1", gen, h2); !errors.Is(err, ErrHealthTooSoon) {
		t.Fatalf("a second report within %s: %v, want ErrHealthTooSoon", HealthEvery, err)
	}
	p, _ := r.Get("ch", "kiosk-1")
	if p.Health == nil || p.Health.DiskFreePercent != 4 || strings.Join(p.Health.Conditions, ",") != "disk_low,power_loss" {
		t.Fatalf("kept %+v", p.Health)
	}
	if got := r.HealthCounts("ch"); got[HealthReporting] != 1 || got[link.ConditionDiskLow] != 1 || got[link.ConditionHot] != 0 || len(got) != len(link.HealthConditions)+1 {
		t.Fatalf("HealthCounts = %v", got)
	}
	c.t = c.t.Add(time.Second)
	if err := r.SetHealth("ch", "kiosk-1", gen, h2); err != nil {
		t.Fatalf("a report %s after the last: %v", HealthEvery, err)
	}
	// A new connection reports at once; the report is kept across it.
	gen2, _, _ := r.Connected(dev("kiosk-1", nil))
	if p, _ := r.Get("ch", "kiosk-1"); p.Health == nil || p.Health.DiskFreePercent != 90 {
		t.Fatalf("after a reconnect: %+v", p.Health)
	}
	if err := r.SetHealth("ch", "kiosk-1", gen2, h); err != nil {
		t.Fatalf("the new connection's first report: %v", err)
	}
	r.Disconnected("ch", "kiosk-1", gen2)
	if got := r.HealthCounts("ch"); got[HealthReporting] != 0 {
		t.Fatalf("an offline device counted: %v", got)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = open(t, dir, c)
	defer r.Close()
	p, _ = r.Get("ch", "kiosk-1")
	if p.Health == nil || p.Health.DiskFreePercent != 4 || p.Health.At == "" || strings.Join(p.Health.Conditions, ",") != "disk_low,power_loss" {
		t.Fatalf("after a restart: %+v", p.Health)
	}
}

// A stored report that did not pass the link's decoder (a hand-edited
// snapshot) is bounded as it is loaded.
func TestHealthBoundedOnLoad(t *testing.T) {
	h := boundHealth(Health{Health: link.Health{LastStop: strings.Repeat("x", 100), LastStopDetail: strings.Repeat("é", 400),
		Throttled: []string{"melting", link.ThrottleThrottled, link.ThrottleThrottled}}})
	if len(h.LastStop) > 16 || len(h.LastStopDetail) > link.MaxStopDetailBytes || len(h.Throttled) != 1 || strings.Join(h.Conditions, ",") != "disk_low,throttled" {
		t.Fatalf("bounded: %q %d bytes, %v, %v", h.LastStop, len(h.LastStopDetail), h.Throttled, h.Conditions)
	}
}

// Issue 43: the health counts per value of an allowed tag key cover the
// online authenticated devices only (an anonymous device's tags make no
// label; an offline device's value stays listed, counted 0), never a key
// not asked for, and at most maxValues values per key, the rest under
// "other".
func TestHealthByTag(t *testing.T) {
	r := open(t, t.TempDir(), &clock{time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)})
	defer r.Close()
	low := link.Health{DiskFreePercent: 4}
	ok := link.Health{DiskFreePercent: 80}
	report := func(d Device, h *link.Health) uint64 {
		t.Helper()
		gen, _, err := r.Connected(d)
		if err != nil {
			t.Fatal(err)
		}
		if h != nil {
			if err := r.SetHealth("ch", d.PeerID, gen, *h); err != nil {
				t.Fatal(err)
			}
		}
		return gen
	}
	report(authed(dev("a", map[string]string{"site": "lobby", "floor": "1"})), &low)
	report(authed(dev("b", map[string]string{"site": "lobby", "floor": "2"})), &ok)
	report(authed(dev("c", map[string]string{"site": "lobby"})), nil) // online, no report
	gone := report(authed(dev("d", map[string]string{"site": "depot"})), &low)
	r.Disconnected("ch", "d", gone)
	report(dev("anon", map[string]string{"site": "mine"}), &low)
	for i := range 3 {
		report(authed(dev(fmt.Sprintf("e%d", i), map[string]string{"site": fmt.Sprintf("zz-%d", i)})), &low)
	}

	got := map[string]map[string]int{}
	for _, c := range r.HealthByTag("ch", []string{"site"}, 3) {
		if c.Key != "site" {
			t.Fatalf("a series for key %q, not asked for", c.Key)
		}
		got[c.Value] = c.Counts
	}
	want := map[string][2]int{ // value: reporting, disk_low
		"depot":   {0, 0}, // offline: listed, not counted
		"lobby":   {2, 1},
		"zz-0":    {1, 1},
		OtherTags: {2, 2}, // zz-1, zz-2: past the 3 values
	}
	if len(got) != len(want) {
		t.Fatalf("values %v, want those of %v", got, want)
	}
	for v, w := range want {
		if c := got[v]; c == nil || c[HealthReporting] != w[0] || c[link.ConditionDiskLow] != w[1] || len(c) != len(link.HealthConditions)+1 {
			t.Errorf("site=%s: %v, want reporting %d, disk_low %d", v, c, w[0], w[1])
		}
	}
	if _, ok := got["mine"]; ok {
		t.Error("an anonymous device's tag value is a label")
	}
	floors := r.HealthByTag("ch", []string{"floor", "floor"}, MaxHealthTagValues)
	if len(floors) != 2 || floors[0].Value != "1" || floors[0].Counts[link.ConditionDiskLow] != 1 || floors[1].Value != "2" || floors[1].Counts[link.ConditionDiskLow] != 0 {
		t.Fatalf("by floor: %+v", floors)
	}
	if got := r.HealthByTag("nope", []string{"site"}, 3); len(got) != 0 {
		t.Fatalf("an unknown channel: %+v", got)
	}
	// A view of the same peers (a cluster's) counts the same.
	v := NewView(nil)
	for _, p := range r.List("ch", Filter{}) {
		v.Put(p)
	}
	if got, want := v.HealthByTag("ch", []string{"site", "floor"}, 3), r.HealthByTag("ch", []string{"site", "floor"}, 3); !reflect.DeepEqual(got, want) {
		t.Fatalf("the view counts\n%+v\nthe registry\n%+v", got, want)
	}
}
