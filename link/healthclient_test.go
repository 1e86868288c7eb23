package link_test

import (
	"errors"
	"testing"
	"time"

	"termlink/link"
	"termlink/link/linktest"
)

// Issue 43: a health report goes on the live connection only (never
// resent on a reconnect: its figures were of then), and the client
// measures its heartbeat's round trip for the next one.
func TestHealthReportAndHeartbeatRTT(t *testing.T) {
	offline, err := link.NewClient(link.ClientConfig{URL: "ws://127.0.0.1:1/api/channels/x/ws", PeerID: "p", Outbox: link.NewMemoryOutbox(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer offline.Close()
	if err := offline.Report(&link.Health{LastStop: link.StopClean}); !errors.Is(err, link.ErrNotConnected) {
		t.Fatalf("Report(health) offline = %v, want ErrNotConnected", err)
	}

	srv := linktest.New(t)
	srv.SetHeartbeat(1)
	d := newDevice(t, link.ClientConfig{URL: srv.URL(), Capabilities: append(link.DefaultCapabilities(), link.CapHealth)})
	srv.WaitFor(t, "connect", 20*time.Second, func() bool { return srv.Connects() == 1 })
	if err := d.Report(&link.Health{LastStop: "nap"}); err == nil {
		t.Fatal("Report took a health frame with a bad last_stop")
	}
	h := &link.Health{UptimeSeconds: 5, DiskFreePercent: 7.5, LastStop: link.StopPowerLoss}
	srv.WaitFor(t, "the report taken (the session registered)", 20*time.Second, func() bool {
		err := d.Report(h)
		if err != nil && !errors.Is(err, link.ErrNotConnected) {
			t.Fatal(err)
		}
		return err == nil
	})
	srv.WaitFor(t, "the report", 20*time.Second, func() bool { return len(srv.Others()) == 1 })
	if got, ok := srv.Others()[0].(*link.Health); !ok || got.DiskFreePercent != 7.5 || got.LastStop != link.StopPowerLoss {
		t.Fatalf("the server got %#v", srv.Others()[0])
	}
	srv.WaitFor(t, "a heartbeat's round trip", 20*time.Second, func() bool { return d.Stats().HeartbeatRTT > 0 })
	srv.Drop()
	srv.WaitFor(t, "reconnect", 30*time.Second, func() bool { return srv.Connects() == 2 })
	// A marker frame after the reconnect: everything before it is in.
	if err := d.Report(&link.SettingsAck{Version: 1}); err != nil {
		t.Fatal(err)
	}
	srv.WaitFor(t, "the marker", 20*time.Second, func() bool {
		o := srv.Others()
		return o[len(o)-1].FrameType() == link.TypeSettingsAck
	})
	if o := srv.Others(); len(o) != 2 {
		t.Fatalf("after the reconnect the server got %d frames (%v), want only the marker: the old report is not resent", len(o), o)
	}
}
