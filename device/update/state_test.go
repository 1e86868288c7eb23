package update

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseStatus(t *testing.T) {
	at := time.Date(2026, 11, 27, 1, 2, 3, 0, time.UTC)
	full := &Status{
		Pending:   &Pending{Version: "v1.1.0", SHA256: sum, Size: 42, GateSeconds: 120, Attempts: 1, Deadline: at, Requested: at},
		Installed: "v1.0.0", InstalledAt: at,
		LastFailure: &Failure{Version: "v1.0.1", Reason: "it exited (status 3) before its first heartbeat", At: at},
	}
	for _, s := range []*Status{{}, full} {
		got, err := ParseStatus(s.Marshal())
		if err != nil {
			t.Fatalf("%s: %v", s.Marshal(), err)
		}
		if !bytes.Equal(got.Marshal(), s.Marshal()) {
			t.Errorf("round trip:\n%s\nwant\n%s", got.Marshal(), s.Marshal())
		}
	}
	for _, tt := range []struct{ in, want string }{
		{`{"pending":{"version":"v1","sha256":"` + sum + `","size":1,"gate_seconds":1,"attempts":0},"x":1}`, `unknown field "x"`},
		{`{} {}`, "more than one JSON value"},
		{`{"pending":{"version":"","sha256":"` + sum + `","size":1,"gate_seconds":1}}`, "pending.version"},
		{`{"pending":{"version":"v1","sha256":"ABC","size":1,"gate_seconds":1}}`, "pending.sha256"},
		{`{"pending":{"version":"v1","sha256":"` + sum + `","size":0,"gate_seconds":1}}`, "pending.size 0"},
		{`{"pending":{"version":"v1","sha256":"` + sum + `","size":1,"gate_seconds":0}}`, "pending.gate_seconds 0"},
		{`{"pending":{"version":"v1","sha256":"` + sum + `","size":1,"gate_seconds":1,"attempts":-1}}`, "pending.attempts -1"},
		{`{"pending":{"version":"v1","sha256":"` + sum + `","size":1,"gate_seconds":1,"deadline":"soon"}}`, `parsing time "soon"`},
		{`{"last_failure":{"version":"v1","reason":"","at":"2026-11-27T01:02:03Z"}}`, "last_failure.reason"},
		{`{"installed":"no spaces"}`, "installed"},
		{`[]`, "cannot unmarshal array"},
		{`{"installed":"v1"` + strings.Repeat(" ", MaxStateBytes) + `}`, "more than 8192"},
	} {
		_, err := ParseStatus([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseStatus(%.80s) = %v, want %q", tt.in, err, tt.want)
		}
	}
}

// A failure's reason is cut to MaxReasonBytes on a rune boundary, so the
// state file it is written to parses.
func TestFailureReasonBounded(t *testing.T) {
	s := &Status{LastFailure: failure("v1", strings.Repeat("é", MaxReasonBytes), time.Now())}
	if _, err := ParseStatus(s.Marshal()); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"pending":{"version":"v1.1.0","sha256":"` + sum + `","size":42,"gate_seconds":120,"attempts":1,"deadline":"2026-11-27T01:02:03Z"},"installed":"v1.0.0","last_failure":{"version":"v1.0.1","reason":"x","at":"2026-11-27T01:02:03Z"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseStatus(data)
		if err != nil {
			return
		}
		// What parses marshals to what parses to the same.
		again, err := ParseStatus(s.Marshal())
		if err != nil {
			t.Fatalf("%s: %v", s.Marshal(), err)
		}
		if !bytes.Equal(again.Marshal(), s.Marshal()) {
			t.Fatalf("round trip changed:\n%s\n%s", s.Marshal(), again.Marshal())
		}
	})
}

// A failure's time keeps its milliseconds, as the install's does: termd
// reads which came last from them (a failure 200 ms after an install in
// the same second was once read as no rollback).
func TestFailureKeepsMilliseconds(t *testing.T) {
	at := time.Date(2026, 11, 27, 4, 7, 38, 271_400_000, time.UTC)
	if got := failure("v2", "it exited", at).At; !got.Equal(at.Round(time.Millisecond)) {
		t.Fatalf("failure at %v kept as %v", at, got)
	}
}

// A reason of any bytes and length is kept as a state file ParseStatus
// takes back: valid UTF-8, whole characters, at most MaxReasonBytes.
func TestFailureReasonParsesBack(t *testing.T) {
	for _, reason := range []string{
		strings.Repeat("é", MaxReasonBytes), // 2 bytes each: the cut falls inside one
		"open /opt/termd/t\xffermd.new: no space left on device",
		strings.Repeat("x", MaxReasonBytes-1) + "\xff" + strings.Repeat("y", 10),
	} {
		st := &Status{LastFailure: failure("v2", reason, time.Now())}
		back, err := ParseStatus(st.Marshal())
		if err != nil {
			t.Fatalf("reason %.40q...: the state file does not parse back: %v", reason, err)
		}
		if len(back.LastFailure.Reason) > MaxReasonBytes || back.LastFailure.Reason == "" {
			t.Fatalf("reason kept as %d bytes", len(back.LastFailure.Reason))
		}
	}
}
