package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/guard"
	"termlink/server/notices"
)

// Issue 22, row 2: the operator API is browser-safe (package guard).
// Every rule is tried on a real server, with and without admin tokens.

// browserReq is one request as a browser (or an attacker's script) might
// send it.
type browserReq struct {
	method, path string
	host         string            // "" = the address dialled
	header       map[string]string // Origin, Sec-Fetch-Site, Content-Type, ...
	body         string
}

func (ts *testServer) send(t *testing.T, token string, rq browserReq) (int, string) {
	t.Helper()
	req, err := http.NewRequest(rq.method, ts.http.URL+rq.path, strings.NewReader(rq.body))
	if err != nil {
		t.Fatal(err)
	}
	if rq.host != "" {
		req.Host = rq.host
	}
	for k, v := range rq.header {
		req.Header.Set(k, v)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (ts *testServer) addr() string { return ts.http.Listener.Addr().String() }

func (ts *testServer) port() string {
	_, p, _ := net.SplitHostPort(ts.addr())
	return p
}

// otherPort is a loopback port that is not ts's (another local server's).
func otherPort(ts *testServer) string {
	if ts.port() == "1" {
		return "2"
	}
	return "1"
}

const jsonCT = "application/json"

func TestBrowserSafeOperatorAPI(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name  string
		admin bool
	}{{"no admin tokens (loopback)", false}, {"admin tokens", true}} {
		t.Run(mode.name, func(t *testing.T) {
			var mutate []func(*config.Config)
			token := ""
			if mode.admin {
				mutate = append(mutate, withAdmin(t))
				token = operatorSecret
			}
			ts := serve(t, adminConfig(t, mutate...), Options{})
			self := "http://" + ts.addr()
			notice := "/api/channels/terminal-dev/peers/kiosk-1/notices"
			ok := `{"text":"hello"}`
			other := "http://127.0.0.1:" + otherPort(ts)
			for _, tc := range []struct {
				name string
				rq   browserReq
				want int
				msg  string
			}{
				// Origin and Sec-Fetch-Site: another origin's page.
				{"Origin of another site", browserReq{header: map[string]string{"Origin": "http://evil.example", "Content-Type": jsonCT}}, 403, `cross-origin request refused: Origin \"http://evil.example\" is not this server`},
				{"Origin of another local port", browserReq{header: map[string]string{"Origin": other, "Content-Type": jsonCT, "Sec-Fetch-Site": "same-site"}}, 403, "cross-origin request refused"},
				{"Origin null", browserReq{header: map[string]string{"Origin": "null", "Content-Type": jsonCT}}, 403, `Origin \"null\"`},
				{"Origin with another scheme", browserReq{header: map[string]string{"Origin": "file://" + ts.addr(), "Content-Type": jsonCT}}, 403, "cross-origin request refused"},
				{"Sec-Fetch-Site cross-site", browserReq{header: map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": jsonCT}}, 403, "Sec-Fetch-Site: cross-site"},
				{"Sec-Fetch-Site cross-site, same Origin", browserReq{header: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": self, "Content-Type": jsonCT}}, 403, "Sec-Fetch-Site: cross-site"},
				{"Sec-Fetch-Site same-site, no Origin", browserReq{header: map[string]string{"Sec-Fetch-Site": "same-site", "Content-Type": jsonCT}}, 403, "same-site and no Origin"},
				{"same origin (the console)", browserReq{header: map[string]string{"Origin": self, "Sec-Fetch-Site": "same-origin", "Content-Type": jsonCT}}, 201, ""},
				{"Sec-Fetch-Site none (typed by the user)", browserReq{header: map[string]string{"Sec-Fetch-Site": "none", "Content-Type": jsonCT}}, 201, ""},
				{"no browser headers (curl, termrig)", browserReq{header: map[string]string{"Content-Type": jsonCT}}, 201, ""},

				// Host: DNS rebinding and names the server does not answer for.
				{"Host evil.example", browserReq{host: "evil.example", header: map[string]string{"Content-Type": jsonCT}}, 421, `does not answer for Host \"evil.example\"`},
				{"DNS rebinding (Host and Origin evil.example:PORT)", browserReq{host: "evil.example:" + ts.port(),
					header: map[string]string{"Origin": "http://evil.example:" + ts.port(), "Sec-Fetch-Site": "same-origin", "Content-Type": jsonCT}}, 421, "DNS rebinding"},
				{"Host of another port", browserReq{host: "127.0.0.1:" + otherPort(ts), header: map[string]string{"Content-Type": jsonCT}}, 421, "does not answer for Host"},
				{"Host with a bad port", browserReq{host: "127.0.0.1:x", header: map[string]string{"Content-Type": jsonCT}}, 421, "is not a host[:port]"},
				{"Host localhost:PORT", browserReq{host: "localhost:" + ts.port(), header: map[string]string{"Content-Type": jsonCT}}, 201, ""},
				{"Host LOCALHOST.:PORT", browserReq{host: "LOCALHOST.:" + ts.port(), header: map[string]string{"Content-Type": jsonCT}}, 201, ""},
				{"Host [::1]:PORT", browserReq{host: "[::1]:" + ts.port(), header: map[string]string{"Content-Type": jsonCT}}, 201, ""},
				{"Host localhost:PORT, Origin 127.0.0.1:PORT", browserReq{host: "localhost:" + ts.port(), header: map[string]string{"Origin": self, "Content-Type": jsonCT}}, 201, ""},

				// Content-Type: what a page may send another origin without asking.
				{"text/plain (no-cors fetch, form)", browserReq{header: map[string]string{"Content-Type": "text/plain;charset=UTF-8"}}, 415, `Content-Type: application/json, not \"text/plain;charset=UTF-8\"`},
				{"form-urlencoded (curl -d)", browserReq{header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415, "must say Content-Type: application/json"},
				{"multipart form", browserReq{header: map[string]string{"Content-Type": "multipart/form-data; boundary=x"}}, 415, "must say Content-Type: application/json"},
				{"no Content-Type", browserReq{}, 415, "it has none"},
				{"JSON in latin-1", browserReq{header: map[string]string{"Content-Type": "application/json; charset=iso-8859-1"}}, 415, `charset \"iso-8859-1\"`},
				{"JSON, charset utf-8", browserReq{header: map[string]string{"Content-Type": "Application/JSON; charset=UTF-8"}}, 201, ""},

				// The body policy (row 9): the device wire's.
				{"duplicate key", browserReq{header: map[string]string{"Content-Type": jsonCT}, body: `{"text":"hello","text":"again"}`}, 400, `the body gives key \"text\" twice: each`},
				{"duplicate nested key", browserReq{path: "/api/channels/terminal-dev/notices", header: map[string]string{"Content-Type": jsonCT}, body: `{"text":"hi","tags":{"site":"a","site":"b"}}`}, 400, `key \"site\" twice in tags:`},
				{"invalid UTF-8", browserReq{header: map[string]string{"Content-Type": jsonCT}, body: "{\"text\":\"hello \xff\"}"}, 400, "not valid UTF-8 (first bad byte at offset 15)"},
				{"not JSON", browserReq{header: map[string]string{"Content-Type": jsonCT}, body: "text=hello"}, 400, "must be a JSON object"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					rq := tc.rq
					rq.method = "POST"
					if rq.path == "" {
						rq.path = notice
					}
					if rq.body == "" {
						rq.body = ok
					}
					code, body := ts.send(t, token, rq)
					if code != tc.want || !strings.Contains(body, tc.msg) {
						t.Fatalf("HTTP %d %s, want %d with %q", code, body, tc.want, tc.msg)
					}
				})
			}
			// Only the requests answered 201 created a notice.
			got := ts.peerNoticesAs(t, token, "kiosk-1")
			if len(got) != 8 {
				t.Errorf("kiosk-1 has %d notices, want the 8 allowed ones: %+v", len(got), got)
			}
			for _, n := range got {
				if n.Text != "hello" {
					t.Errorf("notice text %q: a refused body got through", n.Text)
				}
			}
			// A read from another origin's page is refused too; a rebinding
			// page cannot read.
			if code, body := ts.send(t, token, browserReq{method: "GET", path: "/api/status", header: map[string]string{"Origin": "http://evil.example"}}); code != 403 {
				t.Errorf("GET /api/status from another origin: HTTP %d %s", code, body)
			}
			if code, body := ts.send(t, token, browserReq{method: "GET", path: "/api/status", host: "evil.example"}); code != 421 {
				t.Errorf("GET /api/status with Host evil.example: HTTP %d %s", code, body)
			}
		})
	}
}

// peerNoticesAs lists every notice of peer (operator token when set).
func (ts *testServer) peerNoticesAs(t *testing.T, token, peer string) []notices.PeerNotice {
	t.Helper()
	code, body := ts.send(t, token, browserReq{method: "GET", path: "/api/channels/terminal-dev/peers/" + peer + "/notices?all=true"})
	var out struct{ Notices []notices.PeerNotice }
	if err := json.Unmarshal([]byte(body), &out); code != 200 || err != nil {
		t.Fatalf("listing notices: HTTP %d %s %v", code, body, err)
	}
	return out.Notices
}

// Every operator write route, found in the mux, refuses a body that is
// not JSON, another origin and an unknown Host before it does anything.
func TestBrowserSafeEveryWriteRoute(t *testing.T) {
	t.Parallel()
	ts := serve(t, adminConfig(t, withAdmin(t)), Options{})
	n := 0
	for _, rt := range guardedRoutes(t, ts.Server) {
		method, path := rt[0], rt[1]
		if !guard.IsWrite(method) {
			continue
		}
		n++
		for _, tc := range []struct {
			name string
			rq   browserReq
			want int
		}{
			{"text/plain", browserReq{header: map[string]string{"Content-Type": "text/plain"}}, 415},
			{"cross-origin", browserReq{header: map[string]string{"Content-Type": jsonCT, "Origin": "http://evil.example"}}, 403},
			{"cross-site", browserReq{header: map[string]string{"Content-Type": jsonCT, "Sec-Fetch-Site": "cross-site"}}, 403},
			{"Host evil.example", browserReq{host: "evil.example", header: map[string]string{"Content-Type": jsonCT}}, 421},
			{"duplicate key", browserReq{header: map[string]string{"Content-Type": jsonCT}, body: `{"a":1,"a":2}`}, 400},
		} {
			rq := tc.rq
			rq.method, rq.path = method, path
			want := tc.want
			if method == "PUT" && strings.HasPrefix(path, "/api/releases/") && tc.name == "duplicate key" {
				want = 415 // a release upload takes application/octet-stream only (guard.Options.RawBodyRoute)
			}
			if code, body := ts.send(t, operatorSecret, rq); code != want {
				t.Errorf("%s %s, %s: HTTP %d %s, want %d", method, path, tc.name, code, body, want)
			}
		}
	}
	if n < 4 {
		t.Fatalf("only %d write routes found in %v", n, ts.routeMx.Patterns())
	}
}

// Enrollment: another origin's page can neither approve a code (with or
// without admin tokens) nor ask for codes; the device side, which sends
// JSON and no browser headers, works from any Host.
func TestBrowserSafeEnrollment(t *testing.T) {
	t.Parallel()
	for _, admin := range []bool{false, true} {
		t.Run(map[bool]string{false: "no admin tokens", true: "admin tokens"}[admin], func(t *testing.T) {
			mutate := []func(*config.Config){channelTokens(config.Tokens{}, true)}
			token := ""
			if admin {
				mutate = append(mutate, withAdmin(t))
				token = operatorSecret
			}
			ts := serve(t, adminConfig(t, mutate...), Options{})
			c := enroll.Client{Endpoint: enrollURL(ts)}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g, err := c.Start(ctx, enroll.StartRequest{PeerID: "attacker-pi"})
			if err != nil {
				t.Fatal(err)
			}
			approve := "/api/enrollments/" + g.Code + "/approve"
			for _, tc := range []struct {
				name string
				rq   browserReq
				want int
			}{
				{"no-cors text/plain form POST", browserReq{header: map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}}, 403},
				{"text/plain without browser headers", browserReq{header: map[string]string{"Content-Type": "text/plain"}}, 415},
				{"JSON from another origin", browserReq{header: map[string]string{"Content-Type": jsonCT, "Origin": "http://127.0.0.1:" + otherPort(ts), "Sec-Fetch-Site": "same-site"}}, 403},
				{"JSON with Host evil.example", browserReq{host: "evil.example", header: map[string]string{"Content-Type": jsonCT}}, 421},
			} {
				rq := tc.rq
				rq.method, rq.path, rq.body = "POST", approve, `{"peer_id":"lobby-1"}`
				if code, body := ts.send(t, token, rq); code != tc.want {
					t.Errorf("approve, %s: HTTP %d %s, want %d", tc.name, code, body, tc.want)
				}
			}
			// The code is still waiting: none of them approved it.
			pollCtx, cancelPoll := context.WithTimeout(ctx, 3*time.Second)
			_, err = c.Wait(pollCtx, g)
			cancelPoll()
			if err == nil {
				t.Fatal("the device collected a token: a refused approval went through")
			}
			// The device routes take the Origin and JSON rules, not Host.
			for _, tc := range []struct {
				name string
				rq   browserReq
				want int
			}{
				{"code request from another origin", browserReq{header: map[string]string{"Content-Type": jsonCT, "Origin": "http://evil.example"}}, 403},
				{"code request as text/plain", browserReq{header: map[string]string{"Content-Type": "text/plain"}}, 415},
				{"code request with a duplicate key", browserReq{header: map[string]string{"Content-Type": jsonCT}, body: `{"peer_id":"a","peer_id":"b"}`}, 400},
				{"code request by a name behind NAT", browserReq{host: "kiosk-gateway.example:8080", header: map[string]string{"Content-Type": jsonCT}}, 200},
			} {
				rq := tc.rq
				rq.method, rq.path = "POST", "/api/channels/terminal-dev/enroll"
				if rq.body == "" {
					rq.body = `{"device_name":"x"}`
				}
				if code, body := ts.send(t, "", rq); code != tc.want {
					t.Errorf("%s: HTTP %d %s, want %d", tc.name, code, body, tc.want)
				}
			}
			// The operator's own approval (no browser headers, JSON) works.
			if code, body := ts.send(t, token, browserReq{method: "POST", path: approve, body: `{"peer_id":"lobby-1"}`,
				header: map[string]string{"Content-Type": jsonCT}}); code != 200 {
				t.Fatalf("approve: HTTP %d %s", code, body)
			}
		})
	}
}

// The device WebSocket: a page of another origin (or a rebinding one)
// cannot open it; a device (no Origin) connects whatever Host it uses.
func TestBrowserSafeDeviceSocket(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	for _, tc := range []struct {
		name   string
		header http.Header
		want   int // 101 when it connects
	}{
		{"another origin", http.Header{"Origin": {"http://evil.example"}}, 403},
		{"another local port", http.Header{"Origin": {"http://127.0.0.1:" + otherPort(ts)}, "Sec-Fetch-Site": {"same-site"}}, 403},
		{"rebinding page", http.Header{"Origin": {"http://evil.example:" + ts.port()}, "Host": {"evil.example:" + ts.port()}}, 403},
		{"cross-site", http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403},
		{"a page from a file", http.Header{"Origin": {"null"}}, 403},
		{"a device by another name", http.Header{"Host": {"termserver.local:8080"}}, 101},
		{"a device library that sends Origin file://", http.Header{"Origin": {"file://"}}, 101},
		{"the server's own page", http.Header{"Origin": {"http://" + ts.addr()}}, 101},
		{"a device", nil, 101},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, resp, err := websocket.DefaultDialer.Dial(ts.ws, tc.header)
			if ws != nil {
				ws.Close()
			}
			status := 0
			var body []byte
			if resp != nil {
				status = resp.StatusCode
				body, _ = io.ReadAll(resp.Body)
			}
			if status != tc.want {
				t.Fatalf("dial: HTTP %d %s (%v), want %d", status, body, err, tc.want)
			}
			if tc.want == 403 && !bytes.Contains(body, []byte("refused")) {
				t.Errorf("refusal without its reason: %s", body)
			}
		})
	}
}

// The console page takes the Host check; /healthz and /metrics do not
// (probes and scrapers use service names).
func TestBrowserSafeOpenRoutes(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	for _, tc := range []struct {
		path, host string
		want       int
	}{
		{"/", "evil.example", 421},
		{"/console/app.js", "evil.example:" + ts.port(), 421},
		{"/", "", 200},
		{"/", "localhost:" + ts.port(), 200},
		{"/healthz", "evil.example", 200},
		{"/metrics", "prometheus-target.svc:9090", 200},
	} {
		if code, body := ts.send(t, "", browserReq{method: "GET", path: tc.path, host: tc.host}); code != tc.want {
			t.Errorf("GET %s Host %q: HTTP %d %.200s, want %d", tc.path, tc.host, code, body, tc.want)
		}
	}
}

// admin.allowedHosts: the names a reverse proxy gives the server, in Host
// or (a proxy that rewrites Host) in Origin.
func TestBrowserSafeAllowedHosts(t *testing.T) {
	t.Parallel()
	ts := serve(t, adminConfig(t, withAdmin(t), func(c *config.Config) {
		c.Admin.AllowedHosts = []config.HostPort{{Host: "ops.example.com"}, {Host: "kiosk.lan", Port: "8443"}}
	}), Options{})
	for _, tc := range []struct {
		name   string
		host   string
		origin string
		want   int
	}{
		{"proxy keeps Host", "ops.example.com", "https://ops.example.com", 201},
		{"proxy keeps Host and port", "OPS.example.com:443", "https://ops.example.com", 201},
		{"proxy rewrites Host", "", "https://ops.example.com", 201},
		{"listed name and port", "kiosk.lan:8443", "https://kiosk.lan:8443", 201},
		{"listed name, other port", "kiosk.lan:9000", "", 421},
		{"a name not listed", "ops.example.com.evil.example", "", 421},
		{"Origin of a name not listed", "ops.example.com", "https://evil.example", 403},
		{"Origin of a listed name, other port", "", "https://kiosk.lan:9000", 403},
	} {
		hdr := map[string]string{"Content-Type": jsonCT}
		if tc.origin != "" {
			hdr["Origin"] = tc.origin
		}
		code, body := ts.send(t, operatorSecret, browserReq{method: "POST", path: "/api/channels/terminal-dev/peers/k/notices", host: tc.host, header: hdr, body: `{"text":"x"}`})
		if code != tc.want {
			t.Errorf("%s: HTTP %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
}
