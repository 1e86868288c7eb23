package termd

import (
	"context"
	"testing"
	"time"

	"termlink/device"
	"termlink/device/activity"
	"termlink/link"
)

// busy_seconds (a pushed setting) sets how long a key keeps the device
// busy, kept across a restart; leaving it out gives the default back; a
// value past the bound is refused naming it.
func TestBusySecondsSetting(t *testing.T) {
	dir := t.TempDir()
	s, _ := testSetup(t, dir, Config{})
	p := s.settings
	tr := activity.New(nil, p.keyWindow())
	defer tr.Stop()
	p.setTracker(tr)
	if tr.KeyWindow() != activity.DefaultKeyWindow {
		t.Fatalf("key window %v before any settings, want %v", tr.KeyWindow(), activity.DefaultKeyWindow)
	}
	var acks []link.SettingsAck
	apply := func(f *link.Settings) {
		p.apply(f, nil, func(map[string]string) {}, func(a *link.SettingsAck) { acks = append(acks, *a) })
	}
	apply(&link.Settings{Version: 2, BusySeconds: intp(15)})
	if tr.KeyWindow() != 15*time.Second || len(acks) != 1 || acks[0].Error != "" {
		t.Fatalf("key window %v, acks %+v; want 15 s, acked", tr.KeyWindow(), acks)
	}
	if s2, _ := testSetup(t, dir, Config{}); s2.settings.keyWindow() != 15*time.Second {
		t.Fatalf("after a restart: %v", s2.settings.keyWindow())
	}
	apply(&link.Settings{Version: 3, BusySeconds: intp(link.MaxSettingsSeconds + 1)})
	if acks[1].Error == "" || acks[1].Error[:len("busy_seconds")] != "busy_seconds" || tr.KeyWindow() != 15*time.Second {
		t.Fatalf("ack %+v, key window %v: want busy_seconds refused, 15 s kept", acks[1], tr.KeyWindow())
	}
	apply(&link.Settings{Version: 4})
	if tr.KeyWindow() != activity.DefaultKeyWindow {
		t.Fatalf("key window %v without busy_seconds, want the default", tr.KeyWindow())
	}
}

// Every input passed to the daemon is a key the tracker hears of; a
// closed keypad closes the daemon's inputs.
func TestPassKeys(t *testing.T) {
	tr := activity.New(nil, time.Hour)
	defer tr.Stop()
	in, out := make(chan device.Input), make(chan device.Input)
	done := make(chan struct{})
	go func() { defer close(done); passKeys(context.Background(), tr, in, out) }()
	if tr.Busy() {
		t.Fatal("busy before a key")
	}
	in <- device.Input{Text: "1"}
	if k := <-out; k.Text != "1" || !tr.Busy() {
		t.Fatalf("passed %+v, busy %v: want the key passed on and the device busy", k, tr.Busy())
	}
	close(in)
	if _, ok := <-out; ok {
		t.Fatal("out not closed with the keypad")
	}
	<-done
}
