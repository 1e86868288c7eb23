package registry

import (
	"errors"
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
