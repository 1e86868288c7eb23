package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/guard"
	"termlink/server/notices"
)

// apiDo sends a request with an optional JSON body and decodes the answer
// into a generic map.
func apiDo(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if guard.IsWrite(method) {
		req.Header.Set("Content-Type", "application/json") // the API takes JSON only (package guard)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s %s: HTTP %d, body not JSON: %s", method, url, resp.StatusCode, data)
	}
	return resp.StatusCode, out
}

func (ts *testServer) noticeURL(peer string) string {
	if peer == "" {
		return ts.http.URL + "/api/channels/terminal-dev/notices"
	}
	return ts.http.URL + "/api/channels/terminal-dev/peers/" + peer + "/notices"
}

// postNotice creates a notice through the API and returns its id.
func (ts *testServer) postNotice(t *testing.T, peer, body string) (string, map[string]any) {
	t.Helper()
	code, out := apiDo(t, "POST", ts.noticeURL(peer), body)
	if code != http.StatusCreated {
		t.Fatalf("POST notice for %q: HTTP %d %v", peer, code, out)
	}
	ids, _ := out["notice_ids"].([]any)
	if len(ids) != 1 {
		t.Fatalf("notice_ids %v", out)
	}
	return ids[0].(string), out
}

// peerNotices lists a peer's notices through the API.
func (ts *testServer) peerNotices(t *testing.T, peer string, all bool) []notices.PeerNotice {
	t.Helper()
	url := ts.noticeURL(peer)
	if all {
		url += "?all=true"
	}
	var out struct{ Notices []notices.PeerNotice }
	if code := getJSON(t, url, &out); code != 200 {
		t.Fatalf("GET %s: HTTP %d", url, code)
	}
	return out.Notices
}

var noticeCaps = []string{link.CapText, link.CapNotice}

// quiet proves that nothing but the pong is queued for c: anything the
// server sent before the pong would be read first.
func (c *client) quiet() {
	c.t.Helper()
	c.send(&link.Ping{})
	if f := c.read(); f.FrameType() != link.TypePong {
		c.t.Fatalf("got %s frame %+v, want nothing before the pong", f.FrameType(), f)
	}
}

// A notice for a device that is offline reaches it once it connects, once:
// after the ack it is not sent again on the next connect, and the API shows
// it acked.
func TestNoticeToOfflineDeviceDeliveredOnceAfterConnect(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	id, out := ts.postNotice(t, "kiosk-1", `{"text":"Lobby closes at 6","priority":"alert","display_seconds":20,"ttl_seconds":3600}`)
	if out["online"].(float64) != 0 || out["targets"].(float64) != 1 {
		t.Fatalf("answer %v, want targets 1 online 0", out)
	}
	if got := ts.peerNotices(t, "kiosk-1", false); len(got) != 1 || got[0].State != notices.Pending || got[0].Source != "api" {
		t.Fatalf("pending %+v", got)
	}
	c := dial(t, ts.ws, nil)
	c.connect("kiosk-1", noticeCaps...)
	n := readAs[*link.Notice](c)
	exp, err := time.Parse(time.RFC3339, n.ExpiresAt)
	if n.NoticeID != id || n.Text != "Lobby closes at 6" || n.Priority != link.PriorityAlert || n.DisplaySeconds != 20 ||
		err != nil || time.Until(exp) < 50*time.Minute {
		t.Fatalf("notice %+v (expires %v, %v)", n, exp, err)
	}
	ts.waitEvent(t, "notice_sent", id) // recorded once the write is done
	if got := ts.peerNotices(t, "kiosk-1", false); len(got) != 1 || got[0].State != notices.Sent || got[0].SentAt == nil {
		t.Fatalf("after sending: %+v", got)
	}
	c.send(&link.NoticeAck{NoticeID: id})
	c.quiet()
	ts.waitEvent(t, "notice_acked", id)
	if got := ts.peerNotices(t, "kiosk-1", false); len(got) != 0 {
		t.Fatalf("pending after ack: %+v", got)
	}
	if got := ts.peerNotices(t, "kiosk-1", true); len(got) != 1 || got[0].State != notices.Acked || got[0].AckedAt == nil {
		t.Fatalf("all after ack: %+v", got)
	}
	c.ws.Close()

	c2 := dial(t, ts.ws, nil)
	c2.connect("kiosk-1", noticeCaps...)
	c2.quiet() // not sent again
}

// A device that disconnects between receiving a notice and acking it gets
// it again on every reconnect until it acks; the ack of the resent copy
// ends it. Several notices arrive in created order.
func TestNoticeResentUntilAcked(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	a, _ := ts.postNotice(t, "kiosk-2", `{"text":"first"}`)
	b, _ := ts.postNotice(t, "kiosk-2", `{"text":"second"}`)
	for range 2 {
		c := dial(t, ts.ws, nil)
		c.connect("kiosk-2", noticeCaps...)
		if n := readAs[*link.Notice](c); n.NoticeID != a {
			t.Fatalf("first notice %+v, want %s", n, a)
		}
		if n := readAs[*link.Notice](c); n.NoticeID != b {
			t.Fatalf("second notice %+v, want %s", n, b)
		}
		c.ws.Close() // gone before acking
	}
	c := dial(t, ts.ws, nil)
	c.connect("kiosk-2", noticeCaps...)
	readAs[*link.Notice](c)
	readAs[*link.Notice](c)
	c.send(&link.NoticeAck{NoticeID: a})
	c.send(&link.NoticeAck{NoticeID: a}) // a second ack of the same notice is harmless
	c.quiet()
	c.ws.Close()

	c = dial(t, ts.ws, nil)
	c.connect("kiosk-2", noticeCaps...)
	if n := readAs[*link.Notice](c); n.NoticeID != b {
		t.Fatalf("after acking %s: got %+v, want only %s", a, n, b)
	}
	c.send(&link.NoticeAck{NoticeID: b})
	c.quiet()
	c.ws.Close()
	c = dial(t, ts.ws, nil)
	c.connect("kiosk-2", noticeCaps...)
	c.quiet()
}

// A notice created while its device is online goes out at once, after
// whatever was pending, in created order.
func TestNoticeLiveDelivery(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	c := dial(t, ts.ws, nil)
	c.connect("kiosk-3", noticeCaps...)
	var ids []string
	for i := range 5 {
		id, out := ts.postNotice(t, "kiosk-3", fmt.Sprintf(`{"text":"live %d"}`, i))
		if out["online"].(float64) != 1 {
			t.Fatalf("answer %v, want online 1", out)
		}
		ids = append(ids, id)
	}
	for i, id := range ids {
		n := readAs[*link.Notice](c)
		if n.NoticeID != id || n.Text != fmt.Sprintf("live %d", i) {
			t.Fatalf("notice %d: %+v, want %s", i, n, id)
		}
		c.send(&link.NoticeAck{NoticeID: id})
	}
	c.quiet()
	for _, id := range ids {
		ts.waitEvent(t, "notice_acked", id)
	}
	ts.waitEvent(t, "notice_sent", ids[4])
	ts.waitEvent(t, "notice_created", ids[4])
}

// Notices live in the workspace: a new server on the same workspace
// delivers what the old one held, and remembers what was acked.
func TestNoticeSurvivesRestart(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	s1 := serveUntil(t, cfg)
	a, _ := s1.postNotice(t, "kiosk-4", `{"text":"acked before the restart"}`)
	b, _ := s1.postNotice(t, "kiosk-4", `{"text":"survives the restart"}`)
	c := dial(t, s1.ws, nil)
	c.connect("kiosk-4", noticeCaps...)
	readAs[*link.Notice](c)
	readAs[*link.Notice](c)
	c.send(&link.NoticeAck{NoticeID: a})
	c.quiet()
	s1.stop(t)

	s2 := serveUntil(t, cfg)
	c = dial(t, s2.ws, nil)
	c.connect("kiosk-4", noticeCaps...)
	if n := readAs[*link.Notice](c); n.NoticeID != b || n.Text != "survives the restart" {
		t.Fatalf("after restart: %+v, want only %s", n, b)
	}
	c.quiet()
	if got := s2.peerNotices(t, "kiosk-4", true); len(got) != 2 || got[0].State != notices.Acked || got[1].State != notices.Sent {
		t.Fatalf("after restart: %+v", got)
	}
	c.send(&link.NoticeAck{NoticeID: b})
	c.quiet()
	s2.stop(t)

	s3 := serveUntil(t, cfg) // the acks were kept too: nothing left to send
	c = dial(t, s3.ws, nil)
	c.connect("kiosk-4", noticeCaps...)
	c.quiet()
}

// serveUntil is serve with a stop the test calls itself (a restart).
type stoppable struct {
	*testServer
	stopped bool
}

func serveUntil(t *testing.T, cfg *config.Config) *stoppable {
	t.Helper()
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.Start()
	ts := &stoppable{testServer: &testServer{Server: s}}
	ts.http = httptest.NewServer(s.Handler())
	ts.ws = "ws" + strings.TrimPrefix(ts.http.URL, "http") + "/api/channels/terminal-dev/ws"
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

func (ts *stoppable) stop(t *testing.T) {
	t.Helper()
	if ts.stopped {
		return
	}
	ts.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	ts.http.Close()
}

// A notice that expired is never sent, and the API shows it expired.
func TestNoticeExpiredNeverSent(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	id, _ := ts.postNotice(t, "kiosk-5", `{"text":"gone soon","ttl_seconds":1}`)
	keep, _ := ts.postNotice(t, "kiosk-5", `{"text":"still good"}`)
	time.Sleep(1100 * time.Millisecond)
	c := dial(t, ts.ws, nil)
	c.connect("kiosk-5", noticeCaps...)
	if n := readAs[*link.Notice](c); n.NoticeID != keep {
		t.Fatalf("got %+v, want only %s (%s expired)", n, keep, id)
	}
	c.quiet()
	ts.waitEvent(t, "notice_expired", id)
	all := ts.peerNotices(t, "kiosk-5", true)
	if len(all) != 2 || all[0].NoticeID != id || all[0].State != notices.Expired {
		t.Fatalf("all: %+v", all)
	}
	// An ack that comes late changes nothing and is no error.
	c.send(&link.NoticeAck{NoticeID: id})
	c.quiet()
	if got := ts.peerNotices(t, "kiosk-5", true); got[0].State != notices.Expired {
		t.Fatalf("after a late ack: %+v", got[0])
	}
}

// A full mailbox refuses more with 429 naming the peer; a broadcast skips
// the full peers and lists them. An ack makes room.
func TestNoticeMailboxFull(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		ch.Config.MaxNoticesPerPeer = 2
		c.Channels["terminal-dev"] = ch
	}, nil)
	first, _ := ts.postNotice(t, "kiosk-6", `{"text":"one"}`)
	ts.postNotice(t, "kiosk-6", `{"text":"two"}`)
	code, out := apiDo(t, "POST", ts.noticeURL("kiosk-6"), `{"text":"three"}`)
	if code != http.StatusTooManyRequests || !strings.Contains(fmt.Sprint(out["error"]), "kiosk-6") ||
		!strings.Contains(fmt.Sprint(out["error"]), "maxNoticesPerPeer") {
		t.Fatalf("third notice: HTTP %d %v, want 429 naming kiosk-6", code, out)
	}
	_, out = ts.postNotice(t, "", `{"text":"all","peers":["kiosk-6","kiosk-7"]}`)
	if out["targets"].(float64) != 1 || fmt.Sprint(out["skipped"]) != "[kiosk-6]" {
		t.Fatalf("broadcast: %v, want kiosk-6 skipped", out)
	}
	code, out = apiDo(t, "POST", ts.noticeURL(""), `{"text":"all","peers":["kiosk-6"]}`)
	if code != http.StatusTooManyRequests || !strings.Contains(fmt.Sprint(out["error"]), "kiosk-6") {
		t.Fatalf("broadcast to full peers only: HTTP %d %v", code, out)
	}
	c := dial(t, ts.ws, nil)
	c.connect("kiosk-6", noticeCaps...)
	readAs[*link.Notice](c)
	readAs[*link.Notice](c)
	c.send(&link.NoticeAck{NoticeID: first})
	c.quiet()
	ts.postNotice(t, "kiosk-6", `{"text":"room again"}`)
	if n := readAs[*link.Notice](c); n.Text != "room again" {
		t.Fatalf("got %+v", n)
	}
}

// DELETE withdraws a notice not yet acked: it is not sent any more.
func TestNoticeWithdraw(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	id, _ := ts.postNotice(t, "", `{"text":"to both","peers":["kiosk-8","kiosk-9"]}`)
	other, _ := ts.postNotice(t, "kiosk-8", `{"text":"stays"}`)
	code, out := apiDo(t, "DELETE", ts.noticeURL("kiosk-9")+"/"+id, "")
	if code != 200 || out["withdrawn"].(float64) != 1 {
		t.Fatalf("withdraw from kiosk-9: HTTP %d %v", code, out)
	}
	c := dial(t, ts.ws, nil)
	c.connect("kiosk-9", noticeCaps...)
	c.quiet()
	code, out = apiDo(t, "DELETE", ts.noticeURL("")+"/"+id, "")
	if code != 200 || out["withdrawn"].(float64) != 1 {
		t.Fatalf("withdraw from all: HTTP %d %v (kiosk-8 still had it)", code, out)
	}
	c8 := dial(t, ts.ws, nil)
	c8.connect("kiosk-8", noticeCaps...)
	if n := readAs[*link.Notice](c8); n.NoticeID != other {
		t.Fatalf("got %+v, want only %s", n, other)
	}
	c8.send(&link.NoticeAck{NoticeID: other})
	c8.quiet()
	code, out = apiDo(t, "DELETE", ts.noticeURL("kiosk-8")+"/"+other, "")
	if code != 200 || out["withdrawn"].(float64) != 0 {
		t.Fatalf("withdraw an acked notice: HTTP %d %v, want 0 withdrawn", code, out)
	}
	for _, url := range []string{ts.noticeURL("") + "/n-unknown", ts.noticeURL("kiosk-1") + "/" + id} {
		if code, out := apiDo(t, "DELETE", url, ""); code != 404 || !strings.Contains(fmt.Sprint(out["error"]), "has no notice") {
			t.Fatalf("DELETE %s: HTTP %d %v, want 404", url, code, out)
		}
	}
	var list struct{ Notices []notices.Notice }
	getJSON(t, ts.noticeURL("")+"?all=true", &list)
	if len(list.Notices) != 2 || list.Notices[0].Peers[0].State != notices.Withdrawn {
		t.Fatalf("list: %+v", list.Notices)
	}
}

// Only a device that listed "notice" gets notices: a plain spec client
// sees exactly the spec, and its notice_ack is a bad frame. An ack for a
// notice the peer does not have is a bad frame too; the connection stays.
func TestNoticeCapabilityGating(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	ts.postNotice(t, "plain-1", `{"text":"not for plain clients"}`)
	c := dial(t, ts.ws, nil)
	c.connect("plain-1", link.CapText, link.CapProgress)
	c.quiet()
	_, out := ts.postNotice(t, "plain-1", `{"text":"live, still not for plain clients"}`)
	if out["online"].(float64) != 0 {
		t.Fatalf("online %v for a client without the notice capability", out)
	}
	c.send(&link.Message{MessageID: "m-1", Text: "hello"})
	readAs[*link.Ack](c)
	if m := readAs[*link.Message](c); m.Text != "You said: hello" {
		t.Fatalf("reply %+v", m)
	}
	c.send(&link.NoticeAck{NoticeID: "n-whatever"})
	c.expectError(`notice_ack refused: this connection did not list the "notice" capability`, link.CodeBadFrame)
	c.alive()

	n := dial(t, ts.ws, nil)
	n.connect("kiosk-10", noticeCaps...)
	n.send(&link.NoticeAck{NoticeID: "n-bogus"})
	n.expectError("peer kiosk-10 has no notice n-bogus", link.CodeBadFrame)
	n.alive()
	id, _ := ts.postNotice(t, "plain-1", `{"text":"not yours"}`)
	n.send(&link.NoticeAck{NoticeID: id}) // another peer's notice
	n.expectError("has no notice "+id, link.CodeBadFrame)
	n.alive()

	raw := dial(t, ts.ws, nil) // an ack before connect
	raw.send(&link.NoticeAck{NoticeID: id})
	raw.expectError("connect frame", link.CodeNotConnected)
}

// Broadcast selectors: peers by tags from their connect frames, or all.
func TestNoticeBroadcastByTags(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	connectTagged := func(peer string, tags map[string]string) *client {
		c := dial(t, ts.ws, nil)
		c.send(&link.Connect{PeerID: peer, Capabilities: noticeCaps, Tags: tags})
		readAs[*link.Connected](c)
		return c
	}
	lobby := connectTagged("lobby-1", map[string]string{"site": "lobby", "floor": "0"})
	shop := connectTagged("shop-1", map[string]string{"site": "shop"})
	id, out := ts.postNotice(t, "", `{"text":"lobby only","tags":{"site":"lobby"}}`)
	if out["targets"].(float64) != 1 || out["online"].(float64) != 1 {
		t.Fatalf("by tag: %v", out)
	}
	if n := readAs[*link.Notice](lobby); n.NoticeID != id {
		t.Fatalf("lobby got %+v", n)
	}
	shop.quiet()
	all, out := ts.postNotice(t, "", `{"text":"everyone"}`)
	if out["targets"].(float64) != 2 || out["online"].(float64) != 2 {
		t.Fatalf("all: %v", out)
	}
	for _, c := range []*client{lobby, shop} {
		if n := readAs[*link.Notice](c); n.NoticeID != all {
			t.Fatalf("got %+v, want %s", n, all)
		}
	}
	code, out2 := apiDo(t, "POST", ts.noticeURL(""), `{"text":"x","tags":{"site":"garage"}}`)
	if code != 404 || !strings.Contains(fmt.Sprint(out2["error"]), "site=garage") {
		t.Fatalf("no match: HTTP %d %v", code, out2)
	}
}

// Bad bodies and paths get 400 with a message naming what is wrong.
func TestNoticeAPIBadRequests(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	long := strings.Repeat("é", notices.MaxTextChars+1)
	for _, tc := range []struct {
		name, url, body string
		code            int
		want            string
	}{
		{"not JSON", ts.noticeURL("k"), `hello`, 400, "must be a JSON object"},
		{"array", ts.noticeURL("k"), `[1]`, 400, "must be a JSON object"},
		{"null", ts.noticeURL("k"), `null`, 400, "must be a JSON object"},
		{"trailing", ts.noticeURL("k"), `{"text":"a"} {}`, 400, "one JSON object"},
		{"no text", ts.noticeURL("k"), `{}`, 400, `field "text" is missing`},
		{"blank text", ts.noticeURL("k"), `{"text":"  "}`, 400, `field "text" is missing or blank`},
		{"text number", ts.noticeURL("k"), `{"text":5}`, 400, `field "text" must be a string, not 5`},
		{"long text", ts.noticeURL("k"), `{"text":"` + long + `"}`, 400, "is 1001 characters; a notice holds at most 1000"},
		{"priority", ts.noticeURL("k"), `{"text":"a","priority":"urgent"}`, 400, `"priority" must be "info" or "alert", not "urgent"`},
		{"display zero", ts.noticeURL("k"), `{"text":"a","display_seconds":0}`, 400, `"display_seconds" must be a whole number from 1 to 3600, not 0`},
		{"display float", ts.noticeURL("k"), `{"text":"a","display_seconds":1.5}`, 400, `"display_seconds" must be a whole number from 1 to 3600, not 1.5`},
		{"display string", ts.noticeURL("k"), `{"text":"a","display_seconds":"5"}`, 400, `"display_seconds" must be a whole number, not "5"`},
		{"expiry and ttl", ts.noticeURL("k"), `{"text":"a","ttl_seconds":5,"expires_at":"2099-01-01T00:00:00Z"}`, 400, `not both`},
		{"expiry format", ts.noticeURL("k"), `{"text":"a","expires_at":"tomorrow"}`, 400, `"expires_at" must be an RFC 3339 time`},
		{"expiry past", ts.noticeURL("k"), `{"text":"a","expires_at":"2000-01-01T00:00:00Z"}`, 400, "is not in the future"},
		{"expiry far", ts.noticeURL("k"), `{"text":"a","expires_at":"2999-01-01T00:00:00Z"}`, 400, "more than 30 days ahead"},
		{"ttl negative", ts.noticeURL("k"), `{"text":"a","ttl_seconds":-1}`, 400, `"ttl_seconds" must be a whole number from 1 to 2592000`},
		{"unknown field", ts.noticeURL("k"), `{"text":"a","colour":"red"}`, 400, `unknown field "colour"`},
		{"selector on peer route", ts.noticeURL("k"), `{"text":"a","peers":["x"]}`, 400, `"peers" selects peers on the broadcast route`},
		{"both selectors", ts.noticeURL(""), `{"text":"a","peers":["x"],"tags":{"a":"b"}}`, 400, "not both"},
		{"empty peers", ts.noticeURL(""), `{"text":"a","peers":[]}`, 400, `"peers" must list 1 to`},
		{"bad peer id", ts.noticeURL(""), `{"text":"a","peers":["ok","bad id"]}`, 400, `"peers"[1]: "bad id" is not a peer id`},
		{"duplicate peer", ts.noticeURL(""), `{"text":"a","peers":["x","x"]}`, 400, `lists "x" twice`},
		{"peers not strings", ts.noticeURL(""), `{"text":"a","peers":[1]}`, 400, `"peers" must be an array of peer id strings`},
		{"empty tags", ts.noticeURL(""), `{"text":"a","tags":{}}`, 400, `"tags" is empty`},
		{"tags not strings", ts.noticeURL(""), `{"text":"a","tags":{"a":1}}`, 400, `"tags" must be an object of strings`},
		{"bad peer in path", ts.noticeURL("bad%20id"), `{"text":"a"}`, 400, `"bad id" is not a peer id`},
		{"unknown channel", ts.http.URL + "/api/channels/nope/notices", `{"text":"a"}`, 404, `no channel "nope"`},
		{"no peers known", ts.noticeURL(""), `{"text":"a"}`, 404, "knows no peers yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := apiDo(t, "POST", tc.url, tc.body)
			if code != tc.code || !strings.Contains(fmt.Sprint(out["error"]), tc.want) {
				t.Fatalf("HTTP %d %v, want %d with %q", code, out, tc.code, tc.want)
			}
		})
	}
	if code, out := apiDo(t, "GET", ts.noticeURL("k")+"?all=maybe", ""); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "all must be true or false") {
		t.Fatalf("GET ?all=maybe: HTTP %d %v", code, out)
	}
	big := bytes.Repeat([]byte(" "), notices.MaxBodyBytes+1)
	if code, out := apiDo(t, "POST", ts.noticeURL("k"), string(big)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("huge body: HTTP %d %v", code, out)
	}
	// Nothing was created by any of them.
	if got := ts.peerNotices(t, "k", true); len(got) != 0 {
		t.Fatalf("created by bad requests: %+v", got)
	}
}

// The notice metrics count what happened.
func TestNoticeMetrics(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	id, _ := ts.postNotice(t, "", `{"text":"m","peers":["a1","a2","a3"]}`)
	c := dial(t, ts.ws, nil)
	c.connect("a1", noticeCaps...)
	readAs[*link.Notice](c)
	c.send(&link.NoticeAck{NoticeID: id})
	c.quiet()
	ts.waitEvent(t, "notice_acked", id)
	resp, err := http.Get(ts.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`termlink_notices_created_total{channel="terminal-dev"} 3`,
		`termlink_notices_acked_total{channel="terminal-dev"} 1`,
		`termlink_notices_pending{channel="terminal-dev"} 2`,
		`termlink_notice_mailboxes{channel="terminal-dev"} 2`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

// The device registry shows a peer's open notices: notices_pending and
// the notices on its page, also for a device that is offline.
func TestNoticePeerPage(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	c := dial(t, ts.ws, nil)
	c.connect("kiosk-11", noticeCaps...)
	id, _ := ts.postNotice(t, "kiosk-11", `{"text":"on the page"}`)
	readAs[*link.Notice](c)
	c.ws.Close()
	var page struct {
		NoticesPending int                  `json:"notices_pending"`
		Notices        []notices.PeerNotice `json:"notices"`
	}
	url := ts.http.URL + "/api/channels/terminal-dev/peers/kiosk-11"
	if code := getJSON(t, url, &page); code != 200 || page.NoticesPending != 1 || len(page.Notices) != 1 || page.Notices[0].NoticeID != id {
		t.Fatalf("peer page: HTTP %d %+v", code, page)
	}
	c = dial(t, ts.ws, nil)
	c.connect("kiosk-11", noticeCaps...)
	readAs[*link.Notice](c)
	c.send(&link.NoticeAck{NoticeID: id})
	c.quiet()
	if getJSON(t, url, &page); page.NoticesPending != 0 || len(page.Notices) != 0 {
		t.Fatalf("peer page after the ack: %+v", page)
	}
}

// A full mailbox (more notices than a connection's send queue takes in
// one batch) reaches the device whole, in created order.
func TestNoticeFullMailboxDelivered(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		ch.Config.SendQueue = 8
		c.Channels["terminal-dev"] = ch
	}, nil)
	var ids []string
	for i := range notices.DefaultMaxPerPeer {
		id, _ := ts.postNotice(t, "kiosk-12", fmt.Sprintf(`{"text":"n%d"}`, i))
		ids = append(ids, id)
	}
	c := dial(t, ts.ws, nil)
	c.connect("kiosk-12", noticeCaps...)
	for i, id := range ids {
		if n := readAs[*link.Notice](c); n.NoticeID != id {
			t.Fatalf("notice %d: %+v, want %s", i, n, id)
		}
	}
	c.quiet()
}
