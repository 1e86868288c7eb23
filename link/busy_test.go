package link_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"termlink/link"
	"termlink/link/linktest"
)

func TestDecodeBusy(t *testing.T) {
	off := 3600
	for _, c := range []struct {
		wire string
		want link.Frame
	}{
		{`{"type":"busy","busy":true,"why":"run"}`, &link.Busy{Busy: true, Why: link.BusyRun}},
		{`{"type":"busy","busy":false,"utc_offset":3600}`, &link.Busy{UTCOffset: &off}},
		{`{"type":"busy","busy":true,"why":"keys"}`, &link.Busy{Busy: true, Why: link.BusyKeys}},
	} {
		got, err := link.Decode([]byte(c.wire))
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Fatalf("Decode(%s) = %#v, %v; want %#v", c.wire, got, err, c.want)
		}
		b, err := link.Encode(got)
		if again, err2 := link.Decode(b); err != nil || err2 != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("round trip of %s: %s, %v, %v", c.wire, b, err, err2)
		}
	}
	for _, c := range []struct{ wire, field, says string }{
		{`{"type":"busy","busy":true}`, "why", `got ""`},
		{`{"type":"busy","busy":true,"why":"` + strings.Repeat("w", 5000) + `"}`, "why", "…"},
		{`{"type":"busy","busy":false,"why":"run"}`, "why", "empty when not busy"},
		{`{"type":"busy","busy":false,"utc_offset":90000}`, "utc_offset", "got 90000"},
		{`{"type":"busy","busy":"yes"}`, "busy", ""},
	} {
		_, err := link.Decode([]byte(c.wire))
		var de *link.DecodeError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.says) {
			t.Fatalf("Decode(%.80s) = %v, want a *DecodeError naming %q and saying %q", c.wire, err, c.field, c.says)
		}
		if len(err.Error()) > 400 {
			t.Fatalf("the error quotes %d bytes of the device's word", len(err.Error()))
		}
	}
}

// The latest busy state goes at once, and first again on every connect;
// a client that did not list "update" may not report it.
func TestBusyReportedOnEveryConnect(t *testing.T) {
	srv := linktest.New(t)
	d := newDevice(t, link.ClientConfig{URL: srv.URL(), Platform: "linux/arm/6",
		Capabilities: append(link.DefaultCapabilities(), link.CapUpdate)})
	srv.WaitFor(t, "connect", 20*time.Second, func() bool { return srv.Connects() == 1 })
	if err := d.Report(&link.Busy{Busy: true, Why: link.BusyRun}); err != nil {
		t.Fatal(err)
	}
	if err := d.Report(&link.Busy{Busy: true, Why: "lunch"}); err == nil {
		t.Fatal("Report took a busy frame with a bad why")
	}
	srv.WaitFor(t, "the busy frame", 20*time.Second, func() bool { return len(srv.Others()) == 1 })
	if b, ok := srv.Others()[0].(*link.Busy); !ok || !b.Busy || b.Why != link.BusyRun {
		t.Fatalf("got %#v, want busy run", srv.Others()[0])
	}
	if err := d.Report(&link.Busy{}); err != nil {
		t.Fatal(err)
	}
	srv.WaitFor(t, "idle", 20*time.Second, func() bool { return len(srv.Others()) == 2 })
	srv.Drop()
	srv.WaitFor(t, "reconnect and its busy frame", 30*time.Second, func() bool { return srv.Connects() == 2 && len(srv.Others()) == 3 })
	if b, ok := srv.Others()[2].(*link.Busy); !ok || b.Busy {
		t.Fatalf("after reconnect: %#v, want the latest state: idle", srv.Others()[2])
	}

	plain := newDevice(t, link.ClientConfig{URL: srv.URL()})
	if err := plain.Report(&link.Busy{}); err == nil || !strings.Contains(err.Error(), `"update"`) {
		t.Fatalf("a client without update reported busy: %v", err)
	}
}
