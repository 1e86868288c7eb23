package registry

import (
	"strings"
	"testing"
)

// A device's busy state is kept while its connection lives (issue 42):
// bounded, its since kept while the state stays, gone with the
// connection and with a reconnect (the new connection says it again),
// never made up for an unknown or offline device, never written.
func TestSetBusy(t *testing.T) {
	dir := t.TempDir()
	r := open(t, dir, nil)
	if r.SetBusy("ch", "kiosk-1", BusyState{Busy: true, Why: "run"}) {
		t.Fatal("SetBusy made up a device")
	}
	gen, _, err := r.Connected(dev("kiosk-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := r.Get("ch", "kiosk-1"); p.Busy != nil {
		t.Fatalf("busy %+v before the device said", p.Busy)
	}
	off := 1 << 30
	if !r.SetBusy("ch", "kiosk-1", BusyState{Busy: true, Why: strings.Repeat("w", 5000), UTCOffset: &off}) {
		t.Fatal("SetBusy of an online device: false")
	}
	p, _ := r.Get("ch", "kiosk-1")
	if p.Busy == nil || !p.Busy.Busy || len(p.Busy.Why) > MaxField || *p.Busy.UTCOffset != 86400 || p.Busy.Since == "" {
		t.Fatalf("busy kept as %+v: want busy, why at most %d bytes, the offset at most a day, a since", p.Busy, MaxField)
	}
	since := p.Busy.Since
	r.SetBusy("ch", "kiosk-1", BusyState{Busy: true, Why: p.Busy.Why})
	if p, _ := r.Get("ch", "kiosk-1"); p.Busy.Since != since {
		t.Fatalf("since moved from %s to %s with the same state", since, p.Busy.Since)
	}
	r.Disconnected("ch", "kiosk-1", gen)
	if p, _ := r.Get("ch", "kiosk-1"); p.Busy != nil {
		t.Fatalf("busy %+v offline", p.Busy)
	}
	if r.SetBusy("ch", "kiosk-1", BusyState{Busy: true, Why: "keys"}) {
		t.Fatal("SetBusy of an offline device: true")
	}
	r.Connected(dev("kiosk-1", nil))
	r.SetBusy("ch", "kiosk-1", BusyState{Busy: true, Why: "keys"})
	r.Connected(dev("kiosk-1", nil))
	if p, _ := r.Get("ch", "kiosk-1"); p.Busy != nil {
		t.Fatalf("busy %+v carried over a reconnect", p.Busy)
	}
	r.SetBusy("ch", "kiosk-1", BusyState{Busy: true, Why: "keys"})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := open(t, dir, nil)
	defer r2.Close()
	if p, _ := r2.Get("ch", "kiosk-1"); p.Busy != nil {
		t.Fatalf("busy %+v after a restart", p.Busy)
	}
}
