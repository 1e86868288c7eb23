package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/syncbuf"
	"termlink/link"
	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/identity"
	"termlink/server/wschannel"
)

// channelTokens sets terminal-dev's tokens (and enrollment).
func channelTokens(tok config.Tokens, enroll bool) func(*config.Config) {
	return func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		ch.Config.Tokens = tok
		ch.Config.Enrollment = enroll
		c.Channels["terminal-dev"] = ch
	}
}

func hashed(token string) string { return "sha256:" + sha256Hex(token) }

// sha256Hex is a token's SHA-256 in hex, as the workspace keeps it.
func sha256Hex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// connectAs dials with token in the connect frame and returns the client
// and the first frame the server answers.
func connectAs(t *testing.T, ts *testServer, peer, token string) (*client, link.Frame) {
	t.Helper()
	c := dial(t, ts.ws, nil)
	c.send(&link.Connect{PeerID: peer, Token: token, DeviceName: "test-" + peer, Capabilities: []string{link.CapText}})
	return c, c.read()
}

func mustConnect(t *testing.T, ts *testServer, peer, token string) *client {
	t.Helper()
	c, f := connectAs(t, ts, peer, token)
	if _, ok := f.(*link.Connected); !ok {
		t.Fatalf("connect as %s: got %s %+v, want connected", peer, f.FrameType(), f)
	}
	return c
}

// mustRefuse checks a connect is refused with "unauthorized", a reason
// containing why, and close 4003.
func mustRefuse(t *testing.T, ts *testServer, peer, token, why string) {
	t.Helper()
	c, f := connectAs(t, ts, peer, token)
	e, ok := f.(*link.Error)
	if !ok {
		t.Fatalf("connect as %s: got %s %+v, want an unauthorized error", peer, f.FrameType(), f)
	}
	if e.Code != link.CodeUnauthorized || !strings.Contains(e.Error, why) {
		t.Fatalf("connect as %s: error %+v, want code unauthorized containing %q", peer, e, why)
	}
	if ce := c.readClose(); ce.Code != wschannel.CloseUnauthorized {
		t.Fatalf("connect as %s: close %d, want %d", peer, ce.Code, wschannel.CloseUnauthorized)
	}
}

// ask sends a message and returns its ack and reply text.
func (c *client) ask(id, text string) (*link.Ack, string) {
	c.t.Helper()
	c.send(&link.Message{MessageID: id, Text: text})
	var ack *link.Ack
	for {
		switch f := c.read().(type) {
		case *link.Ack:
			ack = f
		case *link.Message:
			if f.MessageID == id {
				return ack, f.Text
			}
		case *link.Error:
			c.t.Fatalf("message %s: error %+v", id, f)
		}
	}
}

func TestDeviceTokenModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		tok     config.Tokens
		allowed [][2]string // peer, token
		refused [][3]string // peer, token, reason
	}{
		{"exact plain", config.Tokens{ByPeer: map[string]string{"pi-1": "tok-pi-1", "pi-2": "tok-pi-2"}},
			[][2]string{{"pi-1", "tok-pi-1"}, {"pi-2", "tok-pi-2"}},
			[][3]string{{"pi-1", "tok-pi-2", "has its own token"}, {"pi-3", "tok-pi-1", "belongs to another peer_id"}, {"pi-1", "", "no token"}}},
		{"exact hashed", config.Tokens{ByPeer: map[string]string{"pi-1": hashed("tok-pi-1")}},
			[][2]string{{"pi-1", "tok-pi-1"}},
			[][3]string{{"pi-1", hashed("tok-pi-1"), "has its own token"}, {"pi-1", "tok-pi-2", "has its own token"}}},
		{"glob", config.Tokens{ByPeer: map[string]string{"kiosk-*": hashed("kiosk-shared"), "kiosk-boss": "boss-token"}},
			[][2]string{{"kiosk-1", "kiosk-shared"}, {"kiosk-22", "kiosk-shared"}, {"kiosk-boss", "boss-token"}},
			[][3]string{{"desk-1", "kiosk-shared", "not valid for this peer_id"}, {"kiosk-boss", "kiosk-shared", "has its own token"},
				{"kiosk-3", "boss-token", "belongs to another peer_id"}}},
		{"list first use", config.Tokens{Any: []string{"lab-one", hashed("lab-two")}},
			[][2]string{{"lab-a", "lab-one"}, {"lab-b", "lab-two"}, {"lab-a", "lab-one"}},
			[][3]string{{"lab-c", "lab-one", "bound to another peer_id"}, {"lab-a", "lab-two", "bound to another token"}, {"lab-d", "nope", "not valid"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, channelTokens(tt.tok, false), nil)
			for _, a := range tt.allowed {
				c := mustConnect(t, ts, a[0], a[1])
				c.ws.Close()
			}
			for _, r := range tt.refused {
				mustRefuse(t, ts, r[0], r[1], r[2])
			}
		})
	}
}

// The takeover chain: an attacker with a valid credential of its own
// connects as the victim's peer_id (refused), then, as itself, resends
// the victim's message ids: it gets its own answers, never the victim's.
func TestTakeoverChainRefused(t *testing.T) {
	t.Parallel()
	modes := []struct {
		name           string
		tok            config.Tokens
		victimToken    string
		attackerPeer   string
		attackerToken  string
		takeoverReason string
	}{
		{"exact", config.Tokens{ByPeer: map[string]string{"victim": "victim-tok", "attacker": hashed("attacker-tok")}},
			"victim-tok", "attacker", "attacker-tok", "has its own token"},
		{"glob", config.Tokens{ByPeer: map[string]string{"victim": "victim-tok", "kiosk-*": "kiosk-tok"}},
			"victim-tok", "kiosk-9", "kiosk-tok", "has its own token"},
		{"list", config.Tokens{Any: []string{"victim-tok", "attacker-tok"}},
			"victim-tok", "attacker", "attacker-tok", "bound to another token"},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ts := startServer(t, channelTokens(m.tok, false), nil)
			victim := mustConnect(t, ts, "victim", m.victimToken)
			_, reply := victim.ask("v-1", "the victim's secret")
			if !strings.Contains(reply, "the victim's secret") {
				t.Fatalf("victim's reply %q", reply)
			}
			mustRefuse(t, ts, "victim", m.attackerToken, m.takeoverReason)
			victim.alive() // not kicked off
			found := false
			for _, e := range ts.events(t) {
				if strings.Contains(e.Detail, m.attackerToken) || strings.Contains(e.Detail, m.victimToken) {
					t.Fatalf("event shows a token: %+v", e)
				}
				if e.Event == events.TerminalRefused && e.PeerID == "victim" && strings.Contains(e.Detail, "takeover refused (remote=127.0.0.1:") {
					found = true
				}
			}
			if !found {
				t.Fatalf("no takeover_refused event with the remote address in %+v", ts.events(t))
			}
			attacker := mustConnect(t, ts, m.attackerPeer, m.attackerToken)
			ack, reply := attacker.ask("v-1", "mine")
			if strings.Contains(reply, "secret") || (ack != nil && ack.Reply != nil && strings.Contains(ack.Reply.Text, "secret")) {
				t.Fatalf("attacker resending the victim's message id got the victim's reply: ack %+v reply %q", ack, reply)
			}
			if ack == nil || ack.Duplicate {
				t.Fatalf("attacker's message v-1 ack %+v: want a fresh message in its own session", ack)
			}
		})
	}
}

// A list token binds to its first peer; the binding survives a restart
// and an operator resets it through the API.
func TestFirstUseBindingPersistsAndResets(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	channelTokens(config.Tokens{Any: []string{"lab-token"}}, false)(cfg)
	ts := serve(t, cfg, Options{})
	c := mustConnect(t, ts, "bench-1", "lab-token")
	c.ws.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	ts = serve(t, cfg, Options{}) // same workspace
	mustRefuse(t, ts, "bench-2", "lab-token", "bound to another peer_id")
	var got struct {
		Bindings []identity.BindingView
	}
	url := ts.http.URL + "/api/channels/terminal-dev/bindings"
	if code := getJSON(t, url, &got); code != 200 || len(got.Bindings) != 1 || got.Bindings[0].PeerID != "bench-1" ||
		got.Bindings[0].Source != identity.BindFirstUse || got.Bindings[0].Fingerprint != sha256Hex("lab-token")[:12] {
		t.Fatalf("bindings: HTTP %d %+v", code, got)
	}
	req, _ := http.NewRequest(http.MethodDelete, url+"/bench-1", nil)
	req.Header.Set("Content-Type", "application/json") // every write says JSON (package guard)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE binding: HTTP %d", resp.StatusCode)
	}
	mustConnect(t, ts, "bench-2", "lab-token") // binds anew
	mustRefuse(t, ts, "bench-1", "lab-token", "bound to another peer_id")
	if code := getJSON(t, url, &got); code != 200 || len(got.Bindings) != 1 || got.Bindings[0].PeerID != "bench-2" {
		t.Fatalf("bindings after reset: HTTP %d %+v", code, got)
	}

	// A list token taken out of the config is revoked, binding or not,
	// and its peer is free for another list token.
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	channelTokens(config.Tokens{Any: []string{"lab-token-2"}}, false)(cfg)
	ts = serve(t, cfg, Options{})
	mustRefuse(t, ts, "bench-2", "lab-token", "not valid")
	mustConnect(t, ts, "bench-2", "lab-token-2")
}

// The takeover chain with an enrolled victim: a holder of a list token
// cannot be the enrolled peer, nor read its cached replies.
func TestTakeoverChainRefusedEnrolled(t *testing.T) {
	t.Parallel()
	ts := startServer(t, channelTokens(config.Tokens{Any: []string{"attacker-tok"}}, true), nil)
	c := enroll.Client{Endpoint: enrollURL(ts)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := c.Start(ctx, enroll.StartRequest{PeerID: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := approve(t, ts, g.Code, `{}`); status != 200 {
		t.Fatalf("approve: %d %s", status, body)
	}
	tr, err := c.Wait(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	victim := mustConnect(t, ts, "victim", tr.Token)
	victim.ask("v-1", "the victim's secret")
	mustRefuse(t, ts, "victim", "attacker-tok", "bound to another token")
	attacker := mustConnect(t, ts, "attacker", "attacker-tok")
	if ack, reply := attacker.ask("v-1", "mine"); strings.Contains(reply, "secret") || ack == nil || ack.Duplicate {
		t.Fatalf("attacker got ack %+v reply %q", ack, reply)
	}
}

// The bindings API is for operators: a viewer may list, not reset.
func TestBindingsAPIGuarded(t *testing.T) {
	t.Parallel()
	viewer, _ := config.NewAdminToken("viewer-token-0123456789", config.RoleViewer, "v")
	ts := startServer(t, func(c *config.Config) {
		channelTokens(config.Tokens{Any: []string{"lab-token"}}, false)(c)
		c.Admin.Tokens = []config.AdminToken{viewer}
	}, nil)
	for _, tc := range []struct {
		method, auth string
		want         int
	}{
		{http.MethodGet, "", http.StatusUnauthorized},
		{http.MethodGet, "Bearer viewer-token-0123456789", http.StatusOK},
		{http.MethodDelete, "Bearer viewer-token-0123456789", http.StatusForbidden},
	} {
		url := ts.http.URL + "/api/channels/terminal-dev/bindings"
		if tc.method == http.MethodDelete {
			url += "/x"
		}
		req, _ := http.NewRequest(tc.method, url, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: HTTP %d, want %d", tc.method, url, resp.StatusCode, tc.want)
		}
	}
}

// Secrets hygiene: with the server logging at debug level, connects
// that pass, fail, try a takeover or present a wrong bearer token leave
// no trace of any token in the log or the events.
func TestServerLogHasNoToken(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	channelTokens(config.Tokens{Any: []string{"KNOWN-lab-token-1", hashed("KNOWN-lab-token-2")}}, false)(cfg)
	ts := serve(t, cfg, Options{Logger: debugLogger(logs)})
	mustConnect(t, ts, "lab-1", "KNOWN-lab-token-1")
	mustRefuse(t, ts, "lab-1", "KNOWN-lab-token-2", "bound to another token") // takeover
	mustRefuse(t, ts, "lab-2", "KNOWN-wrong-token", "not valid")
	if _, resp, err := websocketDial(ts.ws, "Bearer KNOWN-bearer-token"); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unknown bearer: %v %v", err, resp)
	}
	if !strings.Contains(logs.String(), "takeover refused") {
		t.Fatalf("the log has no takeover line:\n%s", logs.String())
	}
	var all strings.Builder
	all.WriteString(logs.String())
	for _, e := range ts.events(t) {
		all.WriteString(e.Detail + e.Preview)
	}
	for _, secret := range []string{"KNOWN-lab-token", "KNOWN-wrong-token", "KNOWN-bearer-token", sha256Hex("KNOWN-lab-token-2")} {
		if strings.Contains(all.String(), secret) {
			t.Fatalf("the log or the events show %q:\n%s", secret, all.String())
		}
	}
}

func websocketDial(url, auth string) (*websocket.Conn, *http.Response, error) {
	c, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {auth}})
	if c != nil {
		c.Close()
	}
	return c, resp, err
}
