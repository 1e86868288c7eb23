package link

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeFleetFrames(t *testing.T) {
	idle, secs := "Welcome", 30
	for _, c := range []struct {
		wire string
		want Frame
	}{
		{`{"type":"update","update_id":"r-1","version":"1.1.0","manifest":"{}","url":"/x","allow_downgrade":true,"gate_seconds":60}`,
			&Update{UpdateID: "r-1", Version: "1.1.0", Manifest: "{}", URL: "/x", AllowDowngrade: true, GateSeconds: 60}},
		{`{"type":"update_status","version":"1.1.0","running":"1.0.0","state":"rolled_back","reason":"it exited"}`,
			&UpdateStatus{Version: "1.1.0", Running: "1.0.0", State: UpdateRolledBack, Reason: "it exited"}},
		{`{"type":"settings","version":3,"idle_text":"Welcome","backlight_off_after":30,"log_level":"debug","tags":{"site":"lobby"}}`,
			&Settings{Version: 3, IdleText: &idle, BacklightOffAfter: &secs, LogLevel: "debug", Tags: map[string]string{"site": "lobby"}}},
		{`{"type":"settings_ack","version":3}`, &SettingsAck{Version: 3}},
		{`{"type":"diag","request_id":"q","kind":"logs","bytes":4096}`, &Diag{RequestID: "q", Kind: DiagLogs, Bytes: 4096}},
		{`{"type":"diag_result","request_id":"q","kind":"selftest","text":"ok","ok":true}`, &DiagResult{RequestID: "q", Kind: DiagSelftest, Text: "ok", OK: true}},
		{`{"type":"connect","peer_id":"p","platform":"linux/arm/6","settings_version":4}`, &Connect{PeerID: "p", Platform: "linux/arm/6", SettingsVersion: 4}},
	} {
		got, err := Decode([]byte(c.wire))
		if err != nil {
			t.Fatalf("Decode(%s): %v", c.wire, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Fatalf("Decode(%s) = %#v, want %#v", c.wire, got, c.want)
		}
		b, err := Encode(got)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := Decode(b); err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("round trip of %s: %s, %v", c.wire, b, err)
		}
	}
}

func TestDecodeFleetFramesRefused(t *testing.T) {
	for _, c := range []struct{ wire, field, says string }{
		{`{"type":"update","version":"1","manifest":"m","url":"u"}`, "update_id", "missing"},
		{`{"type":"update","update_id":"r","version":"1","manifest":"m","url":"u","gate_seconds":-1}`, "gate_seconds", "negative"},
		{`{"type":"update","update_id":"r","version":"1","manifest":{},"url":"u"}`, "manifest", "string"},
		{`{"type":"update_status","version":"1","running":"1","state":"exploded"}`, "state", `got "exploded"`},
		{`{"type":"update_status","running":"1","state":"installed"}`, "version", "missing"},
		{`{"type":"update_status","version":"1","running":"` + strings.Repeat("9", MaxVersionBytes+1) + `","state":"installed"}`, "running", "more than 64"},
		{`{"type":"update_status","version":"1","running":"1","state":"failed","reason":"` + strings.Repeat("r", MaxUpdateReasonBytes+1) + `"}`, "reason", "more than 1024"},
		{`{"type":"settings_ack","version":2,"error":"` + strings.Repeat("e", MaxUpdateReasonBytes+1) + `"}`, "error", "more than 1024"},
		{`{"type":"settings","version":0}`, "version", "from 1"},
		{`{"type":"settings","version":2,"idle_seconds":-5}`, "idle_seconds", "negative"},
		{`{"type":"settings","version":2,"log_level":"loud"}`, "log_level", `got "loud"`},
		{`{"type":"settings","version":2,"Idle_Text":"x"}`, "Idle_Text", ""},
		{`{"type":"settings_ack"}`, "version", "from 1"},
		{`{"type":"diag","request_id":"q","kind":"coredump"}`, "kind", `got "coredump"`},
		{`{"type":"diag","request_id":"q","kind":"logs","bytes":1000000}`, "bytes", "65536"},
		{`{"type":"diag_result","kind":"logs"}`, "request_id", "missing"},
		{`{"type":"diag_result","request_id":"q","kind":"logs","text":"` + strings.Repeat("x", MaxDiagBytes+1) + `"}`, "text", "more than"},
		// Issue 36: every id and kind of a fleet frame is bounded.
		{`{"type":"diag_result","request_id":"` + strings.Repeat("q", MaxFleetIDBytes+1) + `","kind":"logs"}`, "request_id", "129 bytes, more than 128"},
		{`{"type":"diag_result","request_id":"q","kind":"` + strings.Repeat("k", MaxDiagKindBytes+1) + `"}`, "kind", "33 bytes, more than 32"},
		{`{"type":"diag_result","request_id":"q","kind":"logs","error":"` + strings.Repeat("e", MaxUpdateReasonBytes+1) + `"}`, "error", "more than 1024"},
		{`{"type":"diag","request_id":"` + strings.Repeat("q", MaxFleetIDBytes+1) + `","kind":"logs"}`, "request_id", "more than 128"},
		{`{"type":"update_status","update_id":"` + strings.Repeat("u", MaxFleetIDBytes+1) + `","version":"1","running":"1","state":"installed"}`, "update_id", "129 bytes, more than 128"},
		{`{"type":"update","update_id":"` + strings.Repeat("u", MaxFleetIDBytes+1) + `","version":"1","manifest":"m","url":"u"}`, "update_id", "more than 128"},
	} {
		_, err := Decode([]byte(c.wire))
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("Decode(%.80s) = %v, want a *DecodeError", c.wire, err)
		}
		if !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.says) {
			t.Fatalf("Decode(%.80s) = %q, want it to name %q and say %q", c.wire, err, c.field, c.says)
		}
	}
}

// The bounds take what they bound: an id of MaxFleetIDBytes, a kind of
// MaxDiagKindBytes decode.
func TestDecodeFleetFramesAtTheirBounds(t *testing.T) {
	id, kind := strings.Repeat("i", MaxFleetIDBytes), strings.Repeat("k", MaxDiagKindBytes)
	for _, wire := range []string{
		`{"type":"diag_result","request_id":"` + id + `","kind":"` + kind + `"}`,
		`{"type":"diag","request_id":"` + id + `","kind":"logs"}`,
		`{"type":"update_status","update_id":"` + id + `","version":"1","running":"1","state":"installed"}`,
		`{"type":"update","update_id":"` + id + `","version":"1","manifest":"m","url":"u"}`,
	} {
		if _, err := Decode([]byte(wire)); err != nil {
			t.Errorf("Decode(%.60s…) = %v", wire, err)
		}
	}
}

func TestIsUpdateFailure(t *testing.T) {
	for state, want := range map[string]bool{UpdateDownloading: false, UpdateRestarting: false, UpdateInstalled: false,
		UpdateRolledBack: true, UpdateRefused: true, UpdateFailed: true} {
		if IsUpdateFailure(state) != want {
			t.Errorf("IsUpdateFailure(%q) = %v", state, !want)
		}
	}
}

// A settings frame's tags survive the wire as they were meant: nil (keep
// the device's tags), empty (clear them) and some. With omitempty an
// empty map arrived as nil, so "clear the tags" meant "keep them"
// (FuzzDecode found it).
func TestSettingsTagsRoundTrip(t *testing.T) {
	for _, in := range []*Settings{{Version: 1}, {Version: 2, Tags: map[string]string{}}, {Version: 3, Tags: map[string]string{"site": "lobby"}}} {
		b, err := Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		out := f.(*Settings)
		if (in.Tags == nil) != (out.Tags == nil) || len(in.Tags) != len(out.Tags) {
			t.Fatalf("%s decoded to tags %#v, want %#v", b, out.Tags, in.Tags)
		}
	}
}
