package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	fleetapi "termlink/server/fleet"
	"termlink/server/registry"

	"github.com/gorilla/websocket"
)

// connectDevice connects a device that describes itself as termd does.
func connectDevice(t *testing.T, ts *testServer, peer string, tags map[string]string, caps ...string) *client {
	t.Helper()
	c := dial(t, ts.ws, nil)
	if len(caps) == 0 {
		caps = []string{link.CapText, link.CapScreen}
	}
	c.send(&link.Connect{PeerID: peer, DeviceName: "kiosk " + peer, Capabilities: caps, Board: "pi-lcd2004",
		Version: "0.13.0", Tags: tags})
	readAs[*link.Connected](c)
	return c
}

func peersOf(t *testing.T, ts *testServer, query string) []registry.Peer {
	t.Helper()
	var out struct {
		ChannelID string          `json:"channel_id"`
		Peers     []registry.Peer `json:"peers"`
	}
	if code := getJSON(t, ts.http.URL+"/api/channels/terminal-dev/peers"+query, &out); code != 200 {
		t.Fatalf("peers%s: HTTP %d", query, code)
	}
	if out.ChannelID != "terminal-dev" || out.Peers == nil {
		t.Fatalf("peers%s: %+v", query, out)
	}
	return out.Peers
}

func peerIDs(ps []registry.Peer) string {
	var ids []string
	for _, p := range ps {
		ids = append(ids, fmt.Sprintf("%s:%v", p.PeerID, p.Online))
	}
	return strings.Join(ids, " ")
}

// waitPeers polls the peers API until it lists want (peer:online ...).
func waitPeers(t *testing.T, ts *testServer, query, want string) []registry.Peer {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps := peersOf(t, ts, query)
		if peerIDs(ps) == want {
			return ps
		}
		if time.Now().After(deadline) {
			t.Fatalf("peers%s = %q, want %q", query, peerIDs(ps), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every device ever seen is in the registry after a restart, offline,
// with what it said about itself and when it last sent a message.
func TestRegistryAcrossRestart(t *testing.T) {
	t.Parallel()
	workspace := t.TempDir()
	cfg := config.Default()
	cfg.Workspace = workspace
	ts := serve(t, cfg, Options{})
	c := connectDevice(t, ts, "kiosk-1", map[string]string{"site": "lobby"})
	c.send(&link.Message{MessageID: "m-1", Text: "hello"})
	readAs[*link.Ack](c)
	readAs[*link.Message](c)
	connectDevice(t, ts, "kiosk-2", nil, link.CapText)
	ps := waitPeers(t, ts, "", "kiosk-1:true kiosk-2:true")
	p := ps[0]
	if p.ChannelID != "terminal-dev" || p.SessionID != "terminal-dev:local:kiosk-1" || p.DeviceName != "kiosk kiosk-1" ||
		p.Board != "pi-lcd2004" || p.Version != "0.13.0" || p.Tags["site"] != "lobby" || p.ConnectedSince == nil ||
		p.LastMessageAt == nil || !strings.HasPrefix(p.RemoteAddr, "127.0.0.1:") || strings.Join(p.Capabilities, ",") != "text,screen" {
		t.Fatalf("kiosk-1 online: %+v", p)
	}
	if _, err := time.Parse(time.RFC3339, p.LastSeen); err != nil || !strings.HasSuffix(p.LastSeen, "Z") {
		t.Fatalf("last_seen %q is not RFC 3339 UTC", p.LastSeen)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil { // the devices are still connected
		t.Fatal(err)
	}

	ts2 := serve(t, cfg, Options{})
	ps = peersOf(t, ts2, "")
	if peerIDs(ps) != "kiosk-1:false kiosk-2:false" {
		t.Fatalf("after restart: %q", peerIDs(ps))
	}
	p = ps[0]
	if p.ConnectedSince != nil || p.Screen != nil || p.LastMessageAt == nil || p.Tags["site"] != "lobby" ||
		p.Board != "pi-lcd2004" || p.ReconnectsLastHour != 0 {
		t.Fatalf("kiosk-1 after restart: %+v", p)
	}
	connectDevice(t, ts2, "kiosk-1", map[string]string{"site": "lobby"})
	ps = waitPeers(t, ts2, "", "kiosk-1:true kiosk-2:false")
	if ps[0].ReconnectsLastHour != 1 {
		t.Fatalf("reconnects_last_hour after reconnecting: %d", ps[0].ReconnectsLastHour)
	}
}

func TestPeersFilters(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	connectDevice(t, ts, "a", map[string]string{"site": "lobby", "floor": "1"})
	connectDevice(t, ts, "b", map[string]string{"site": "lobby", "floor": "2"})
	connectDevice(t, ts, "c", map[string]string{"site": "shop"})
	d := connectDevice(t, ts, "d", map[string]string{"site": "lobby"})
	d.ws.Close()
	waitPeers(t, ts, "", "a:true b:true c:true d:false")
	for query, want := range map[string]string{
		"?tag=site:lobby":                       "a:true b:true d:false",
		"?tag=site:lobby&tag=floor:2":           "b:true",
		"?tag=site:lobby&online=true":           "a:true b:true",
		"?online=false":                         "d:false",
		"?tag=site:Lobby":                       "",
		"?tag=site%3Ashop":                      "c:true",
		"?tag=site:lobby&online=false&tag=x:y":  "",
		"?online=true&tag=floor:1&tag=site:lob": "",
	} {
		if got := peerIDs(peersOf(t, ts, query)); got != want {
			t.Errorf("peers%s = %q, want %q", query, got, want)
		}
	}
	for query, want := range map[string]string{
		"?tag=site":        `tag \"site\": want key:value, e.g. tag=site:lobby`,
		"?tag=:x":          `tag \":x\": the key is empty`,
		"?online=yes":      `online must be true or false, got \"yes\"`,
		"?online=1":        `online must be true or false, got \"1\"`,
		"?tag=a:1&tag=a:2": `key \"a\" is already given as \"1\"`,
	} {
		r := api(t, "GET", ts.http.URL+"/api/channels/terminal-dev/peers"+query, "", "")
		if r.status != 400 || !strings.Contains(string(r.body), want) {
			t.Errorf("peers%s: HTTP %d %s, want 400 with %s", query, r.status, r.body, want)
		}
	}
	if r := api(t, "GET", ts.http.URL+"/api/channels/nope/peers", "", ""); r.status != 404 {
		t.Errorf("unknown channel: HTTP %d", r.status)
	}
	if r := api(t, "GET", ts.http.URL+"/api/channels/terminal-dev/peers/zz", "", ""); r.status != 404 || !strings.Contains(string(r.body), `no peer \"zz\"`) {
		t.Errorf("unknown peer: HTTP %d %s", r.status, r.body)
	}
	// Metrics: devices online per channel and tag.
	r := api(t, "GET", ts.http.URL+"/metrics", "", "")
	if want := `termserver_devices_online{channel="terminal-dev",tag=""} 3`; !strings.Contains(string(r.body), want+"\n") {
		t.Errorf("metrics lack %s", want)
	}
	// The channel takes anonymous devices: their tags are theirs to
	// choose, so they get no series (the label set stays bounded).
	if strings.Contains(string(r.body), `tag="site=`) || strings.Contains(string(r.body), `tag="floor=`) {
		t.Errorf("metrics have series for anonymous devices' tags:\n%s", r.body)
	}
}

// Devices that authenticated get a series per tag; anonymous ones none.
func TestTagSeriesOfAuthenticatedDevices(t *testing.T) {
	t.Parallel()
	ts := startServer(t, channelTokens(config.Tokens{Any: []string{"lab-one", "lab-two"}}, false), nil)
	for _, d := range [][2]string{{"a", "lab-one"}, {"b", "lab-two"}} {
		c := dial(t, ts.ws, nil)
		c.send(&link.Connect{PeerID: d[0], Token: d[1], Capabilities: []string{link.CapText}, Tags: map[string]string{"site": "lobby", "id": d[0]}})
		readAs[*link.Connected](c)
	}
	r := api(t, "GET", ts.http.URL+"/metrics", "", "")
	for _, want := range []string{
		`termserver_devices_online{channel="terminal-dev",tag=""} 2`,
		`termserver_devices_online{channel="terminal-dev",tag="site=lobby"} 2`,
		`termserver_devices_online{channel="terminal-dev",tag="id=a"} 1`,
	} {
		if !strings.Contains(string(r.body), want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
	if p := getPeer(t, ts, "a"); p["authenticated"] != true {
		t.Errorf("peer a: authenticated %v", p["authenticated"])
	}
}

// The peers API pages in peer id order; following next_cursor walks
// every peer once; the answer is not HTML-escaped.
func TestPeersPagination(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	want := []string{"a", "b", "c", "d", "e"}
	for _, p := range []string{"c", "a", "e", "b", "d"} {
		connectDevice(t, ts, p, map[string]string{"shape": "<" + p + ">"})
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatalf("more pages than peers: %v", got)
		}
		r := api(t, "GET", ts.http.URL+"/api/channels/terminal-dev/peers?limit=2&cursor="+cursor, "", "")
		if r.status != 200 {
			t.Fatalf("page %d: HTTP %d %s", pages, r.status, r.body)
		}
		if bytes.Contains(r.body, []byte(`\u003c`)) || !bytes.Contains(r.body, []byte(`"shape":"<`)) {
			t.Fatalf("page %d is HTML-escaped: %s", pages, r.body)
		}
		var page struct {
			Peers      []registry.Peer `json:"peers"`
			NextCursor *string         `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatalf("page %d: %v: %s", pages, err, r.body)
		}
		if len(page.Peers) > 2 {
			t.Fatalf("page %d has %d peers, limit 2", pages, len(page.Peers))
		}
		for _, p := range page.Peers {
			got = append(got, p.PeerID)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("walk %v, want %v", got, want)
	}
	for query, want := range map[string]string{
		"?limit=0":       "limit must be a number from 1 to 1000",
		"?limit=1001":    "limit must be a number from 1 to 1000",
		"?limit=x":       "limit must be a number from 1 to 1000",
		"?cursor=%21%21": "is not one this server gave",
	} {
		r := api(t, "GET", ts.http.URL+"/api/channels/terminal-dev/peers"+query, "", "")
		if r.status != 400 || !strings.Contains(string(r.body), want) {
			t.Errorf("peers%s: HTTP %d %s, want 400 with %s", query, r.status, r.body, want)
		}
	}
}

// Past the anonymous cap a new anonymous device is refused at connect
// (registry_full, close 1013) and the registry is unchanged; a device
// the registry knows is taken back, and so is an authenticated one.
func TestAnonymousCapRefusedAtConnect(t *testing.T) {
	t.Parallel()
	ts := serve(t, func() *config.Config { c := config.Default(); c.Workspace = t.TempDir(); return c }(),
		Options{fleet: fleetOptions{maxAnonymous: 2}})
	a := connectDevice(t, ts, "a", nil)
	connectDevice(t, ts, "b", nil)
	c := dial(t, ts.ws, nil)
	c.send(&link.Connect{PeerID: "c", Capabilities: []string{link.CapText}})
	e, ok := c.read().(*link.Error)
	if !ok || e.Code != link.CodeRegistryFull || !strings.Contains(e.Error, "maximum of 2 anonymous devices") {
		t.Fatalf("third anonymous device: %+v, want a registry_full error", e)
	}
	if ce := c.readClose(); ce.Code != websocket.CloseTryAgainLater {
		t.Fatalf("close %+v, want 1013", ce)
	}
	waitPeers(t, ts, "", "a:true b:true")
	a.ws.Close()
	waitPeers(t, ts, "", "a:false b:true")
	connectDevice(t, ts, "a", nil) // known: taken back
	waitPeers(t, ts, "", "a:true b:true")
}

// hello carries the first peers, the total and a cursor for the rest.
func TestHelloBounded(t *testing.T) {
	t.Parallel()
	cfg := adminConfig(t, withAdmin(t))
	ts := serve(t, cfg, Options{fleet: fleetOptions{helloPeers: 2}})
	for _, p := range []string{"a", "b", "c"} {
		connectDevice(t, ts, p, nil)
	}
	s := openStream(t, ts.http.URL, viewerSecret)
	hello := s.next("hello", func(e sseEvent) bool { return e.name == "hello" })
	var h struct {
		Peers      []registry.Peer `json:"peers"`
		Total      int             `json:"total"`
		NextCursor *string         `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(hello.data), &h); err != nil || peerIDs(h.Peers) != "a:true b:true" || h.Total != 3 || h.NextCursor == nil {
		t.Fatalf("hello %s (%v)", hello.data, err)
	}
	r := api(t, "GET", ts.http.URL+"/api/channels/terminal-dev/peers?cursor="+*h.NextCursor, viewerSecret, "")
	if r.status != 200 || !strings.Contains(string(r.body), `"peer_id":"c"`) || strings.Contains(string(r.body), `"peer_id":"a"`) {
		t.Fatalf("the rest after hello: HTTP %d %s", r.status, r.body)
	}
}

func getPeer(t *testing.T, ts *testServer, peer string) map[string]any {
	t.Helper()
	var out map[string]any
	if code := getJSON(t, ts.http.URL+"/api/channels/terminal-dev/peers/"+peer, &out); code != 200 {
		t.Fatalf("peer %s: HTTP %d %v", peer, code, out)
	}
	return out
}

// A screen frame from a device that listed "screen" becomes its mirror,
// latest wins; from one that did not it is refused with bad_frame and the
// connection stays.
func TestScreenFrames(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	plain := connectDevice(t, ts, "plain", nil, link.CapText)
	plain.send(&link.Screen{Rows: []string{"hello"}})
	plain.expectError(`screen refused: this connection did not list the "screen" capability`, link.CodeBadFrame)
	plain.alive()
	if p := getPeer(t, ts, "plain"); p["screen"] != nil {
		t.Fatalf("screen of a device without the capability: %v", p["screen"])
	}

	early := dial(t, ts.ws, nil)
	early.send(&link.Screen{Rows: []string{"x"}})
	early.expectError("before screen frames", link.CodeNotConnected)

	k := connectDevice(t, ts, "kiosk", nil)
	for i := range 3 {
		k.send(&link.Screen{Rows: []string{"Hello", fmt.Sprintf("frame %d", i)}, CursorRow: 1, CursorCol: i, CursorOn: true, Backlight: true})
	}
	k.alive() // the frames before the ping are handled
	scr, _ := getPeer(t, ts, "kiosk")["screen"].(map[string]any)
	if scr == nil || fmt.Sprint(scr["rows"]) != "[Hello frame 2]" || scr["cursor_col"] != 2.0 || scr["cursor_on"] != true ||
		scr["backlight"] != true || scr["updated_at"] == nil {
		t.Fatalf("mirror %v, want the last frame", scr)
	}
	k.ws.Close()
	waitPeers(t, ts, "?online=true", "plain:true")
}

// The operator cancels a device's run through the API: it ends with
// finish_reason cancelled, as a device's own cancel does; the peer's page
// shows the run while it runs and the conversation from the session log.
func TestPeerPageAndCancel(t *testing.T) {
	t.Parallel()
	runner := newCountingRunner(true)
	ts := startServer(t, nil, runner)
	c := connectDevice(t, ts, "kiosk", nil)
	url := ts.http.URL + "/api/channels/terminal-dev/peers/kiosk/cancel"
	if r := api(t, "POST", url, "", ""); r.status != 409 || !strings.Contains(string(r.body), "nothing is running for peer kiosk") {
		t.Fatalf("cancel with nothing running: HTTP %d %s", r.status, r.body)
	}
	c.send(&link.Message{MessageID: "m-1", Text: "first"})
	readAs[*link.Ack](c)
	<-runner.started
	c.send(&link.Message{MessageID: "m-2", Text: "second"})
	readAs[*link.Ack](c)
	p := getPeer(t, ts, "kiosk")
	if fmt.Sprint(p["running"]) != "[m-1]" {
		t.Fatalf("running %v", p["running"])
	}
	if r := api(t, "POST", url, "", `{"message_id": "m-9"}`); r.status != 404 || !strings.Contains(string(r.body), `message \"m-9\" is not queued or running for peer kiosk`) {
		t.Fatalf("cancel unknown message: HTTP %d %s", r.status, r.body)
	}
	if r := api(t, "POST", url, "", `{"messageid": "m-1"}`); r.status != 400 {
		t.Fatalf("cancel with a misspelt field: HTTP %d %s", r.status, r.body)
	}
	r := api(t, "POST", url, "", `{"message_id": "m-2"}`) // queued: answered cancelled without running
	if r.status != 200 || !strings.Contains(string(r.body), `"m-2"`) {
		t.Fatalf("cancel queued m-2: HTTP %d %s", r.status, r.body)
	}
	if m := readAs[*link.Message](c); m.MessageID != "m-2" || m.FinishReason != link.FinishCancelled {
		t.Fatalf("m-2 reply %+v", m)
	}
	r = api(t, "POST", url, "", "") // no body: what runs now
	if r.status != 200 || string(r.body) != "{\n  \"cancelled\": [\n    \"m-1\"\n  ]\n}\n" {
		t.Fatalf("cancel running: HTTP %d %s", r.status, r.body)
	}
	if m := readAs[*link.Message](c); m.MessageID != "m-1" || m.FinishReason != link.FinishCancelled {
		t.Fatalf("m-1 reply %+v", m)
	}
	ts.waitEvent(t, fleetapi.EventOperatorCancel, "m-1")

	close(runner.gate)
	c.send(&link.Message{MessageID: "m-3", Text: "third"})
	readAs[*link.Ack](c)
	readAs[*link.Message](c)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p = getPeer(t, ts, "kiosk")
		conv, _ := p["conversation"].([]any)
		if len(conv) == 6 {
			last := conv[5].(map[string]any)
			first := conv[0].(map[string]any)
			if first["role"] != "user" || first["text"] != "first" || first["message_id"] != "m-1" ||
				last["role"] != "assistant" || last["message_id"] != "m-3" || last["finish_reason"] != "stop" {
				t.Fatalf("conversation %v", conv)
			}
			if ts, ok := last["timestamp"].(string); !ok || !strings.HasSuffix(ts, "Z") {
				t.Fatalf("timestamp %v", last["timestamp"])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("conversation %v, want 6 records", conv)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fmt.Sprint(p["running"]) != "[]" || fmt.Sprint(p["notices"]) != "[]" || p["notices_pending"] != 0.0 {
		t.Fatalf("peer page %v", p)
	}
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	name, id, data string
	comment        bool
}

// sseStream reads a live event stream.
type sseStream struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent
}

func openStream(t *testing.T, baseURL, token string) *sseStream {
	t.Helper()
	req, _ := http.NewRequest("GET", baseURL+"/api/channels/terminal-dev/events/stream", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("stream: HTTP %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sseStream{t: t, resp: resp, events: make(chan sseEvent, 10000)}
	go func() { // ends when the body does
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.name != "" || e.comment {
					s.events <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, ":"):
				e.comment, e.data = true, strings.TrimSpace(line[1:])
			case strings.HasPrefix(line, "event: "):
				e.name = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				e.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				e.data = line[len("data: "):]
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return s
}

// next returns the next event that match accepts (the test fails after 10 s).
func (s *sseStream) next(what string, match func(sseEvent) bool) sseEvent {
	s.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				s.t.Fatalf("stream ended waiting for %s", what)
			}
			if match(e) {
				return e
			}
		case <-timeout:
			s.t.Fatalf("no %s on the stream", what)
		}
	}
}

// nextEach returns one event for each matcher, in whatever order they come
// (the test fails after 10 s).
func (s *sseStream) nextEach(want map[string]func(sseEvent) bool) map[string]sseEvent {
	s.t.Helper()
	got := make(map[string]sseEvent, len(want))
	timeout := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case e, ok := <-s.events:
			if !ok {
				s.t.Fatalf("stream ended; had %d of %d events", len(got), len(want))
			}
			for what, match := range want {
				if _, done := got[what]; !done && match(e) {
					got[what] = e
					break
				}
			}
		case <-timeout:
			for what := range want {
				if _, done := got[what]; !done {
					s.t.Fatalf("no %s on the stream", what)
				}
			}
		}
	}
	return got
}

func peerEvent(peer string, online bool) func(sseEvent) bool {
	return func(e sseEvent) bool {
		var p registry.Peer
		return e.name == "peer" && json.Unmarshal([]byte(e.data), &p) == nil && p.PeerID == peer && p.Online == online
	}
}

// The live stream says hello with the peers, then streams channel events
// and peers going online and offline, with a keepalive; it ends when the
// server shuts down.
func TestEventStream(t *testing.T) {
	t.Parallel()
	cfg := adminConfig(t, withAdmin(t))
	ts := serve(t, cfg, Options{fleet: fleetOptions{streamKeepalive: 50 * time.Millisecond}})
	connectDevice(t, ts, "kiosk-1", map[string]string{"site": "lobby"})
	s := openStream(t, ts.http.URL, viewerSecret)
	hello := s.next("hello", func(e sseEvent) bool { return e.name == "hello" })
	var h struct {
		ChannelID string          `json:"channel_id"`
		Peers     []registry.Peer `json:"peers"`
	}
	if err := json.Unmarshal([]byte(hello.data), &h); err != nil || h.ChannelID != "terminal-dev" || peerIDs(h.Peers) != "kiosk-1:true" {
		t.Fatalf("hello %s (%v)", hello.data, err)
	}

	c := connectDevice(t, ts, "kiosk-2", nil)
	// The registry's peer updates and the channel's events are two sources
	// the stream interleaves as they come: either may be first.
	got2 := s.nextEach(map[string]func(sseEvent) bool{
		"kiosk-2 online":     peerEvent("kiosk-2", true),
		"terminal_connected": func(e sseEvent) bool { return e.name == events.TerminalConnected },
	})
	ev := got2["terminal_connected"]
	var got events.Event
	if err := json.Unmarshal([]byte(ev.data), &got); err != nil || got.PeerID != "kiosk-2" || ev.id != fmt.Sprint(got.Seq) {
		t.Fatalf("terminal_connected event %+v id %q (%v)", got, ev.id, err)
	}
	c.send(&link.Message{MessageID: "m-1", Text: "hello there"})
	s.next("inbound_accepted", func(e sseEvent) bool {
		return e.name == events.InboundAccepted && strings.Contains(e.data, `"message_id":"m-1"`) && strings.Contains(e.data, `"preview":"hello there"`)
	})
	c.send(&link.Screen{Rows: []string{"on screen"}})
	s.next("screen change", func(e sseEvent) bool { return e.name == "peer" && strings.Contains(e.data, `"rows":["on screen"]`) })
	c.ws.Close()
	s.next("kiosk-2 offline", peerEvent("kiosk-2", false))
	s.next("keepalive", func(e sseEvent) bool { return e.comment && e.data == "keepalive" })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-s.events:
			if !ok {
				return // the stream ended with the server
			}
		case <-timeout:
			t.Fatal("the stream outlived the server's shutdown")
		}
	}
}

// A subscriber that stops reading is disconnected once it falls behind;
// the channel's events, its devices and other subscribers never wait for
// it.
func TestEventStreamSlowSubscriberDropped(t *testing.T) {
	t.Parallel()
	ts := serve(t, adminConfig(t), Options{fleet: fleetOptions{streamBuffer: 16, streamWrite: time.Second}})
	// A client with a small receive buffer that sends the request and
	// never reads.
	conn, err := net.Dial("tcp", ts.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /api/channels/terminal-dev/events/stream HTTP/1.1\r\nHost: %s\r\n\r\n", conn.RemoteAddr()) // a Host the server answers for
	streamsOpen := func(n int) func() bool {
		return func() bool {
			return hasSeries(ts, fmt.Sprintf(`termserver_event_streams_open{channel="terminal-dev"} %d`, n))
		}
	}
	waitFor(t, "the slow stream to open", streamsOpen(1))

	ch := ts.rt.Channels["terminal-dev"]
	added := make(chan struct{})
	go func() { // never waits for the stream
		defer close(added)
		for i := range 20000 {
			ch.Events.Add(events.Event{Event: "test_event", Detail: fmt.Sprintf("%d %s", i, strings.Repeat("x", 150))})
		}
	}()
	select {
	case <-added:
	case <-time.After(30 * time.Second):
		t.Fatal("adding events waited for the slow subscriber")
	}
	waitFor(t, "the slow stream to be dropped", func() bool {
		return hasSeries(ts, `termserver_event_streams_dropped_total{channel="terminal-dev"} 1`)
	})

	// The server goes on: a device is answered, a new stream says hello.
	c := connectDevice(t, ts, "kiosk", nil)
	c.send(&link.Message{MessageID: "m-1", Text: "still there?"})
	readAs[*link.Ack](c)
	readAs[*link.Message](c)
	s := openStream(t, ts.http.URL, "")
	s.next("hello", func(e sseEvent) bool { return e.name == "hello" })
	waitFor(t, "the dropped stream's handler to end", streamsOpen(1))
}

// hasSeries says whether the server's metrics list the series line.
func hasSeries(ts *testServer, line string) bool {
	var b bytes.Buffer
	ts.rt.Metrics.Reg.WriteText(&b)
	return strings.Contains(b.String(), "\n"+line+"\n")
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The registry is the notices' directory: a broadcast by tag reaches a
// device seen before a restart, the peer shows its pending notices, and
// the live stream tells of the change.
func TestNoticesThroughRegistry(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	ts := serve(t, cfg, Options{})
	c := connectDevice(t, ts, "lobby-1", map[string]string{"site": "lobby"}, link.CapText) // takes no notices
	connectDevice(t, ts, "shop-1", map[string]string{"site": "shop"}, link.CapText)
	waitPeers(t, ts, "", "lobby-1:true shop-1:true")
	c.ws.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	ts2 := serve(t, cfg, Options{})
	s := openStream(t, ts2.http.URL, "")
	s.next("hello", func(e sseEvent) bool { return e.name == "hello" })
	r := api(t, "POST", ts2.http.URL+"/api/channels/terminal-dev/notices", "", `{"text": "Lobby closes at 6", "tags": {"site": "lobby"}}`)
	if r.status != 201 || !strings.Contains(string(r.body), `"targets": 1`) {
		t.Fatalf("broadcast to site=lobby: HTTP %d %s", r.status, r.body)
	}
	s.next("lobby-1 with a pending notice", func(e sseEvent) bool {
		return e.name == "peer" && strings.Contains(e.data, `"peer_id":"lobby-1"`) && strings.Contains(e.data, `"notices_pending":1`)
	})
	ps := peersOf(t, ts2, "")
	if ps[0].NoticesPending != 1 || ps[1].NoticesPending != 0 {
		t.Fatalf("notices_pending %d %d", ps[0].NoticesPending, ps[1].NoticesPending)
	}
	notices, _ := getPeer(t, ts2, "lobby-1")["notices"].([]any)
	if len(notices) != 1 || notices[0].(map[string]any)["text"] != "Lobby closes at 6" {
		t.Fatalf("lobby-1's notices %v", notices)
	}
}

// The live stream outlives the HTTP server's read and write timeouts
// (meant for plain requests): keepalives keep coming.
func TestEventStreamOutlivesHTTPTimeouts(t *testing.T) {
	t.Parallel()
	saved := defaultHTTPLimits
	t.Cleanup(func() { defaultHTTPLimits = saved }) // after the server stops
	defaultHTTPLimits.Read, defaultHTTPLimits.Write = 500*time.Millisecond, 500*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, adminConfig(t), Options{fleet: fleetOptions{streamKeepalive: 200 * time.Millisecond}}, ln)
	s := openStream(t, "http://"+ln.Addr().String(), "")
	s.next("hello", func(e sseEvent) bool { return e.name == "hello" })
	start := time.Now()
	for n := 0; n < 10 || time.Since(start) < 2*time.Second; n++ {
		s.next("keepalive", func(e sseEvent) bool { return e.comment })
	}
}

// Live event streams are bounded server-wide: past the cap a new one gets
// 503 with the reason, and a closed one makes room again.
func TestEventStreamsBounded(t *testing.T) {
	t.Parallel()
	cfg := adminConfig(t, withAdmin(t))
	ts := serve(t, cfg, Options{fleet: fleetOptions{maxStreams: 2}})
	isHello := func(e sseEvent) bool { return e.name == "hello" }
	a := openStream(t, ts.http.URL, viewerSecret)
	a.next("hello", isHello)
	openStream(t, ts.http.URL, viewerSecret).next("hello", isHello)
	r := api(t, "GET", ts.http.URL+"/api/channels/terminal-dev/events/stream", viewerSecret, "")
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "too many live event streams: 2 are open") ||
		!strings.Contains(string(r.body), "/api/channels/terminal-dev/events") {
		t.Fatalf("third stream: HTTP %d %s, want 503 naming the cap", r.status, r.body)
	}
	a.resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := api(t, "GET", ts.http.URL+"/api/channels/terminal-dev/events?limit=1", viewerSecret, "")
		if r.status != 200 {
			t.Fatalf("events: HTTP %d %s", r.status, r.body)
		}
		open := ts.fleet.api.StreamsOpen()
		if open < 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream still counts: %d open", open)
		}
		time.Sleep(20 * time.Millisecond)
	}
	openStream(t, ts.http.URL, viewerSecret).next("hello", isHello)
}
