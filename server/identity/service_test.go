package identity

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/events"
)

// serveService serves a Service over channel "ch" (enrollment on) and
// "off" (enrollment off) on a plain mux: no guard, so the routes' own
// body policy is what answers.
func serveService(t *testing.T) (*httptest.Server, *LocalBindings, *events.Log) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := OpenLocalBindings(t.TempDir(), "ch", true, log)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.NewLog(100)
	s := New(Options{Log: log, Channels: map[string]Channel{
		"ch":  {ID: "ch", Enabled: true, Config: config.ChannelConfig{Enrollment: true}, Bindings: b, Events: ev},
		"off": {ID: "off", Enabled: true, Bindings: b, Events: events.NewLog(10)},
	}})
	mux := http.NewServeMux()
	s.Routes(mux)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs, b, ev
}

func do(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The routes read their bodies with httpapi.Decode: a field the route
// does not know, a key given twice or a body past 4 KiB is refused
// (before: encoding/json took them, the last key winning).
func TestRoutesOneBodyPolicy(t *testing.T) {
	hs, _, _ := serveService(t)
	start := hs.URL + "/api/channels/ch/enroll"
	for _, tc := range []struct {
		url, body string
		status    int
		want      string
	}{
		{start, `{"peer_id":"a","peer":"b"}`, 400, `unknown field \"peer\"`},
		{start, `{"peer_id":"a","peer_id":"b"}`, 400, `key \"peer_id\" twice`},
		{start, `{"device_name":"` + strings.Repeat("x", maxEnrollBody) + `"}`, 413, "longer than 4096 bytes"},
		{start + "/token", `{"device_code":"x","extra":1}`, 400, "invalid_request"},
		{hs.URL + "/api/enrollments/AAA-AAA/approve", `{"peer_id":"a","tag":{}}`, 400, `approve: the body is not the JSON object expected: json: unknown field \"tag\"`},
		{hs.URL + "/api/channels/off/enroll", `{}`, 404, "enrollment is off"},
		{hs.URL + "/api/channels/nope/enroll", `{}`, 404, `no channel \"nope\"`},
	} {
		if status, body := do(t, "POST", tc.url, tc.body); status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("POST %s %.60s: %d %s, want %d with %q", tc.url, tc.body, status, body, tc.status, tc.want)
		}
	}
}

// The whole flow on the package's routes: a code asked for, listed,
// approved (binding the token), collected once; the binding listed and
// reset through the bindings API; each step in the channel's events.
func TestRoutesFlow(t *testing.T) {
	hs, b, ev := serveService(t)
	status, body := do(t, "POST", hs.URL+"/api/channels/ch/enroll", `{"peer_id":"lobby-1","device_name":"Lobby"}`)
	var g enroll.Grant
	if status != 200 || json.Unmarshal([]byte(body), &g) != nil || g.Interval != PollInterval {
		t.Fatalf("enroll: %d %s", status, body)
	}
	var list struct{ Enrollments []PendingView }
	if status, body := do(t, "GET", hs.URL+"/api/enrollments", ""); status != 200 || json.Unmarshal([]byte(body), &list) != nil ||
		len(list.Enrollments) != 1 || list.Enrollments[0].Network != "127.0.0.0/24" {
		t.Fatalf("list: %d %s", status, body)
	}
	if status, body := do(t, "POST", hs.URL+"/api/enrollments/"+g.Code+"/approve", `{"tags":{"site":"hq"}}`); status != 200 || !strings.Contains(body, `"peer_id": "lobby-1"`) {
		t.Fatalf("approve: %d %s", status, body)
	}
	status, body = do(t, "POST", hs.URL+"/api/channels/ch/enroll/token", `{"device_code":"`+g.DeviceCode+`"}`)
	var tr enroll.TokenResponse
	if status != 200 || json.Unmarshal([]byte(body), &tr) != nil || tr.PeerID != "lobby-1" || !b.Known(config.DigestOf(tr.Token)) {
		t.Fatalf("collect: %d %s", status, body)
	}
	if d := b.Authorize(config.Tokens{}, "lobby-1", tr.Token, ""); !d.OK || d.Tags["site"] != "hq" || d.Name != "Lobby" {
		t.Fatalf("the enrolled token: %+v", d)
	}
	var bl struct{ Bindings []BindingView }
	if status, body := do(t, "GET", hs.URL+"/api/channels/ch/bindings", ""); status != 200 || json.Unmarshal([]byte(body), &bl) != nil ||
		len(bl.Bindings) != 1 || bl.Bindings[0].Source != BindEnrolled || len(bl.Bindings[0].Fingerprint) != 12 || strings.Contains(body, tr.Token) {
		t.Fatalf("bindings: %d %s", status, body)
	}
	if status, body := do(t, "DELETE", hs.URL+"/api/channels/ch/bindings/lobby-1", ""); status != http.StatusNoContent {
		t.Fatalf("reset: %d %s", status, body)
	}
	if status, _ := do(t, "DELETE", hs.URL+"/api/channels/ch/bindings/lobby-1", ""); status != http.StatusNotFound {
		t.Fatalf("reset twice: %d", status)
	}
	if b.Known(config.DigestOf(tr.Token)) {
		t.Fatal("a reset token is known")
	}
	var seen []string
	for _, e := range ev.Recent(100) {
		seen = append(seen, e.Event)
	}
	if got := strings.Join(seen, " "); got != evEnrollmentRequested+" "+EvCredentialBound+" "+evCredentialReset {
		t.Fatalf("events: %s", got)
	}
}

// busyCodes is a store whose codes are being approved elsewhere (a
// shared store while another node approves).
type busyCodes struct{ *LocalCodes }

func (c busyCodes) Approve(code string, _ time.Time, _ func(Pending) (Approval, error)) (Pending, error) {
	return Pending{}, fmt.Errorf("pairing code %s is being approved on another node: %w", code, ErrInProgress)
}

func (c busyCodes) Deny(code string, _ time.Time) (Pending, error) {
	return Pending{}, fmt.Errorf("pairing code %s is being approved on another node: %w", code, ErrInProgress)
}

// A code another node is approving answers 409 with why, not 500.
func TestRoutesCodeInProgress(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := OpenLocalBindings(t.TempDir(), "ch", true, log)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Log: log, Codes: busyCodes{NewLocalCodes()}, Channels: map[string]Channel{
		"ch": {ID: "ch", Enabled: true, Config: config.ChannelConfig{Enrollment: true}, Bindings: b, Events: events.NewLog(10)},
	}})
	mux := http.NewServeMux()
	s.Routes(mux)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	for _, req := range [][2]string{{"POST", "/approve"}, {"DELETE", ""}} {
		body := ""
		if req[0] == "POST" {
			body = `{}`
		}
		status, got := do(t, req[0], hs.URL+"/api/enrollments/K7Q-4MX"+req[1], body)
		if status != http.StatusConflict || !strings.Contains(got, "being approved on another node") {
			t.Errorf("%s %s: %d %s, want 409 saying why", req[0], req[1], status, got)
		}
	}
}
