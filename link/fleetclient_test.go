package link_test

import (
	"errors"
	"testing"
	"time"

	"termlink/link"
	"termlink/link/linktest"
)

func nextFleet(t *testing.T, d *device) link.Frame {
	t.Helper()
	select {
	case f := <-d.Fleet():
		return f
	case <-time.After(20 * time.Second):
		t.Fatal("no fleet request reached the client")
		return nil
	}
}

// Update, settings and diag frames reach the caller on Fleet(); the
// connect frame says the platform and the settings version; the answers
// go back, update_status and settings_ack again on every connect, a diag
// result only on the connection that asked.
func TestFleetRequestsAndReports(t *testing.T) {
	srv := linktest.New(t)
	d := newDevice(t, link.ClientConfig{URL: srv.URL(), Platform: "linux/arm/6", SettingsVersion: 2,
		Capabilities: append(link.DefaultCapabilities(), link.CapUpdate, link.CapSettings, link.CapDiag)})
	srv.WaitFor(t, "connect", 20*time.Second, func() bool { return srv.Connects() == 1 })
	if c := srv.Connect(0); c.Platform != "linux/arm/6" || c.SettingsVersion != 2 {
		t.Fatalf("connect says platform %q, settings version %d", c.Platform, c.SettingsVersion)
	}
	up := &link.Update{UpdateID: "r1", Version: "1.1.0", Manifest: "{}", URL: "/b"}
	idle := "Lobby"
	set := &link.Settings{Version: 3, IdleText: &idle}
	diag := &link.Diag{RequestID: "q1", Kind: link.DiagLogs, Bytes: 100}
	mustSend(t, srv, up, set, diag)
	for _, want := range []link.Frame{up, set, diag} {
		if got := nextFleet(t, d); got.FrameType() != want.FrameType() {
			t.Fatalf("got a %s request, want %s", got.FrameType(), want.FrameType())
		}
	}
	st := &link.UpdateStatus{UpdateID: "r1", Version: "1.1.0", Running: "1.0.0", State: link.UpdateRefused, Reason: "bad signature"}
	for _, f := range []link.Frame{st, &link.SettingsAck{Version: 3}, &link.DiagResult{RequestID: "q1", Kind: link.DiagLogs, Text: "log"}} {
		if err := d.Report(f); err != nil {
			t.Fatalf("Report(%s): %v", f.FrameType(), err)
		}
	}
	srv.WaitFor(t, "the three answers", 20*time.Second, func() bool { return len(srv.Others()) == 3 })
	if err := d.Report(&link.Message{MessageID: "x"}); err == nil {
		t.Fatal("Report took a message frame")
	}
	if err := d.Report(&link.UpdateStatus{Version: "1", State: "melted"}); err == nil {
		t.Fatal("Report took an update_status with a bad state")
	}
	// A new connection: the update status and the settings ack again, no
	// diag result, and the settings version the ack set.
	d.SetTags(map[string]string{"site": "lobby"})
	srv.Drop()
	srv.WaitFor(t, "reconnect", 30*time.Second, func() bool { return srv.Connects() == 2 && len(srv.Others()) == 5 })
	if c := srv.Connect(1); c.SettingsVersion != 3 || c.Tags["site"] != "lobby" {
		t.Fatalf("the second connect says settings version %d, tags %v; want 3, site=lobby", c.SettingsVersion, c.Tags)
	}
	o := srv.Others()
	if s, ok := o[3].(*link.UpdateStatus); !ok || *s != *st {
		t.Fatalf("after reconnect: %#v, want %#v", o[3], st)
	}
	if a, ok := o[4].(*link.SettingsAck); !ok || a.Version != 3 {
		t.Fatalf("after reconnect: %#v, want the settings ack", o[4])
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(srv.Others()); n != 5 {
		t.Fatalf("%d frames after reconnect, want 5 (no diag result again)", n)
	}
}

// A diag result with no connection is refused (its request is gone).
func TestFleetDiagResultNeedsConnection(t *testing.T) {
	c, err := link.NewClient(link.ClientConfig{URL: "ws://127.0.0.1:1/api/channels/x/ws", PeerID: "p", Outbox: link.NewMemoryOutbox(), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Report(&link.DiagResult{RequestID: "q", Kind: link.DiagLogs}); !errors.Is(err, link.ErrNotConnected) {
		t.Fatalf("Report(diag_result) offline = %v, want ErrNotConnected", err)
	}
	if err := c.Report(&link.UpdateStatus{Version: "1.0.0", Running: "1.0.0", State: link.UpdateInstalled}); err != nil {
		t.Fatalf("Report(update_status) offline = %v, want it kept for the next connect", err)
	}
}
