package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"termlink/link"
	"termlink/server/events"
)

// GET /api/whoami says the caller's role, and whether a login was
// needed: the console hides write controls from a viewer and "Log out"
// when no token was asked for.
func TestWhoami(t *testing.T) {
	t.Parallel()
	ts := serve(t, adminConfig(t, withAdmin(t)), Options{})
	for _, c := range []struct {
		token, name, role string
	}{{viewerSecret, "vera", "viewer"}, {operatorSecret, "otto", "operator"}} {
		r := api(t, "GET", ts.http.URL+"/api/whoami", c.token, "")
		var got struct {
			Name, Role string
			Login      *bool
		}
		if err := json.Unmarshal(r.body, &got); err != nil || r.status != http.StatusOK {
			t.Fatalf("whoami as %s: HTTP %d %s (%v)", c.role, r.status, r.body, err)
		}
		if got.Name != c.name || got.Role != c.role || got.Login == nil || !*got.Login {
			t.Errorf("whoami as %s: %s, want name %s role %s login true", c.role, r.body, c.name, c.role)
		}
	}
	if r := api(t, "GET", ts.http.URL+"/api/whoami", "", ""); r.status != http.StatusUnauthorized {
		t.Errorf("whoami without a token: HTTP %d %s, want 401", r.status, r.body)
	}

	// No admin tokens: a loopback client is the local operator, no login.
	open := serve(t, adminConfig(t), Options{})
	r := api(t, "GET", open.http.URL+"/api/whoami", "", "")
	if r.status != http.StatusOK || string(r.body) != "{\n  \"login\": false,\n  \"name\": \"local\",\n  \"role\": \"operator\"\n}\n" {
		t.Errorf("whoami without tokens: HTTP %d %q", r.status, r.body)
	}
}

// GET .../events?peer_id= lists one device's events only, the newest
// limit of them, oldest first.
func TestEventsOfOnePeer(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	ch := ts.rt.Channels["terminal-dev"]
	for i := range 10 {
		ch.Events.Add(events.Event{Event: "e", PeerID: fmt.Sprintf("p%d", i%2), Detail: fmt.Sprint(i)})
	}
	var got struct{ Events []events.Event }
	if code := getJSON(t, ts.http.URL+"/api/channels/terminal-dev/events?peer_id=p1&limit=3", &got); code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	var details []string
	for _, e := range got.Events {
		if e.PeerID != "p1" {
			t.Errorf("event of %s listed for p1: %+v", e.PeerID, e)
		}
		details = append(details, e.Detail)
	}
	if fmt.Sprint(details) != "[5 7 9]" {
		t.Errorf("p1's newest 3 events: %v, want [5 7 9] (oldest first)", details)
	}
	if getJSON(t, ts.http.URL+"/api/channels/terminal-dev/events?peer_id=nobody", &got); len(got.Events) != 0 {
		t.Errorf("events of an unknown peer: %+v, want none", got.Events)
	}
}

// A screen frame's ROM reaches the API when it is one the console can
// draw (A00, A02, any case); anything else is left out (plain text rows).
func TestScreenROM(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	k := connectDevice(t, ts, "kiosk", nil)
	for _, c := range []struct{ sent, want string }{{"A02", "A02"}, {"a00", "A00"}, {"Z99", ""}, {"", ""}} {
		k.send(&link.Screen{Rows: []string{"Hello " + c.sent}, ROM: c.sent, Backlight: true})
		k.alive() // the frame before the ping is handled
		scr, _ := getPeer(t, ts, "kiosk")["screen"].(map[string]any)
		got, has := scr["rom"]
		if scr == nil || fmt.Sprint(scr["rows"]) != "[Hello "+c.sent+"]" || (c.want == "" && has) || (c.want != "" && got != c.want) {
			t.Errorf("screen with rom %q: mirror %v, want rom %q", c.sent, scr, c.want)
		}
	}
}
