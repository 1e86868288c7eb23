package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/server/config"
	"termlink/server/guard"
	"termlink/server/httpapi"
)

const (
	viewerSecret   = "viewer-secret-token-0001"
	operatorSecret = "operator-secret-token-0002"
)

// withAdmin configures a viewer (plain) and an operator (sha256) token.
func withAdmin(t *testing.T) func(*config.Config) {
	return func(cfg *config.Config) {
		sum := sha256.Sum256([]byte(operatorSecret))
		v, err := config.NewAdminToken(viewerSecret, config.RoleViewer, "vera")
		if err != nil {
			t.Fatal(err)
		}
		o, err := config.NewAdminToken("sha256:"+hex.EncodeToString(sum[:]), config.RoleOperator, "otto")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Admin.Tokens = []config.AdminToken{v, o}
	}
}

type apiResponse struct {
	status int
	header http.Header
	body   []byte
}

// api makes one request; token "" sends no Authorization header.
func api(t *testing.T, method, url, token, body string) apiResponse {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" || guard.IsWrite(method) {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return apiResponse{resp.StatusCode, resp.Header, nil} // a live stream: it does not end
	}
	b, _ := io.ReadAll(resp.Body)
	return apiResponse{resp.StatusCode, resp.Header, b}
}

var wildcardRE = regexp.MustCompile(`\{([a-z_]+)(\.\.\.)?\}`)

// guardedRoutes turns the server's registered patterns into requests: the
// method, and a path with each wildcard filled in.
func guardedRoutes(t *testing.T, s *Server) (routes [][2]string) {
	t.Helper()
	for _, p := range s.routeMx.Patterns() {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			method, path = "GET", p
		}
		if s.routeMx.Is(httpapi.DeviceRoute)(p) || !strings.HasPrefix(path, "/api/") {
			continue
		}
		path = wildcardRE.ReplaceAllStringFunc(path, func(w string) string {
			if w == "{channel_id}" {
				return "terminal-dev"
			}
			return "x1"
		})
		routes = append(routes, [2]string{method, path})
	}
	if len(routes) < 6 {
		t.Fatalf("only %d guarded routes found in %v", len(routes), s.routeMx.Patterns())
	}
	return routes
}

// operatorReads are the GET routes (as guardedRoutes fills them in)
// that only the operator role may call: a device's log may hold secrets.
var operatorReads = map[string]bool{"/api/channels/terminal-dev/peers/x1/logs": true}

// Every /api/* route the server registers (but the device WebSocket)
// refuses a request without a token or with a wrong one, a viewer may
// only read, an operator may do everything. The routes come from the
// mux, so a route added later is checked too.
func TestAPIAuthEveryRoute(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	ts := serve(t, adminConfig(t, withAdmin(t)), Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	// The routes that declared themselves a device's (no admin token),
	// where they are registered: exactly these.
	var device []string
	for p, c := range ts.routeMx.Classes() {
		if c == httpapi.DeviceRoute {
			device = append(device, p)
		}
	}
	sort.Strings(device)
	if got, want := strings.Join(device, "; "), "GET /api/channels/{channel_id}/releases/{version}/{rest...}; GET /api/channels/{channel_id}/ws; POST /api/channels/{channel_id}/enroll; POST /api/channels/{channel_id}/enroll/token"; got != want {
		t.Errorf("device routes:\n got %s\nwant %s", got, want)
	}
	for _, rt := range guardedRoutes(t, ts.Server) {
		method, url := rt[0], ts.http.URL+rt[1]
		t.Run(method+" "+rt[1], func(t *testing.T) {
			r := api(t, method, url, "", "")
			if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("no token: HTTP %d %s (WWW-Authenticate %q), want 401", r.status, r.body, r.header.Get("WWW-Authenticate"))
			}
			if !bytes.Contains(r.body, []byte(`"error": "authorization required`)) {
				t.Errorf("no token: body %s", r.body)
			}
			for _, wrong := range []string{"wrong-token-000000000", viewerSecret + "x", operatorSecret[:len(operatorSecret)-1]} {
				if r := api(t, method, url, wrong, ""); r.status != http.StatusUnauthorized {
					t.Fatalf("wrong token %q: HTTP %d %s", wrong, r.status, r.body)
				}
			}
			// Basic auth or a token in the wrong scheme is no bearer token.
			req, _ := http.NewRequest(method, url, nil)
			req.SetBasicAuth("otto", operatorSecret)
			if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("basic auth: %v %v", resp.StatusCode, err)
			} else {
				resp.Body.Close()
			}
			viewer := api(t, method, url, viewerSecret, "")
			if method == http.MethodGet && operatorReads[rt[1]] {
				if viewer.status != http.StatusForbidden || !bytes.Contains(viewer.body, []byte("it needs role operator")) {
					t.Fatalf("viewer GET of what only operators read: HTTP %d %s, want 403", viewer.status, viewer.body)
				}
			} else if method == http.MethodGet {
				if viewer.status == http.StatusUnauthorized || viewer.status == http.StatusForbidden {
					t.Fatalf("viewer GET: HTTP %d %s", viewer.status, viewer.body)
				}
			} else if viewer.status != http.StatusForbidden || !bytes.Contains(viewer.body, []byte("role viewer may not "+method)) {
				t.Fatalf("viewer %s: HTTP %d %s, want 403", method, viewer.status, viewer.body)
			}
			if op := api(t, method, url, operatorSecret, ""); op.status == http.StatusUnauthorized || op.status == http.StatusForbidden {
				t.Fatalf("operator (sha256 token): HTTP %d %s", op.status, op.body)
			}
		})
	}
	// The scheme is case-insensitive.
	if r := api(t, "GET", ts.http.URL+"/api/status", "", ""); r.status != 401 {
		t.Fatalf("status without token: %d", r.status)
	}
	req, _ := http.NewRequest("GET", ts.http.URL+"/api/status", nil)
	req.Header.Set("Authorization", "bearer "+viewerSecret)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("lower-case bearer: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// The device WebSocket keeps its own (device token) authentication.
	c := dial(t, ts.ws, nil)
	c.connect("device-1")
	// /healthz and /metrics are open by default.
	for _, p := range []string{"/healthz", "/metrics"} {
		if r := api(t, "GET", ts.http.URL+p, "", ""); r.status != 200 {
			t.Fatalf("%s without token: HTTP %d", p, r.status)
		}
	}
	for _, secret := range []string{viewerSecret, operatorSecret} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("a token is in the log:\n%s", logs.String())
		}
	}
}

func adminConfig(t *testing.T, mutate ...func(*config.Config)) *config.Config {
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	for _, m := range mutate {
		m(cfg)
	}
	return cfg
}

func TestMetricsRequireToken(t *testing.T) {
	t.Parallel()
	ts := serve(t, adminConfig(t, withAdmin(t), func(c *config.Config) { c.Admin.MetricsRequireToken = true }), Options{})
	if r := api(t, "GET", ts.http.URL+"/metrics", "", ""); r.status != 401 {
		t.Fatalf("/metrics without token: HTTP %d", r.status)
	}
	if r := api(t, "GET", ts.http.URL+"/metrics", viewerSecret, ""); r.status != 200 || !bytes.Contains(r.body, []byte("termserver_devices_online")) {
		t.Fatalf("/metrics as viewer: HTTP %d %s", r.status, r.body)
	}
	if r := api(t, "GET", ts.http.URL+"/healthz", "", ""); r.status != 200 {
		t.Fatalf("/healthz: HTTP %d", r.status)
	}
}

// nonLoopbackIP is an address of this machine that is not loopback, or nil.
func nonLoopbackIP(t *testing.T) net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP
		}
	}
	return nil
}

// serveOn runs a real Server with Serve on ln until the test ends.
func serveOn(t *testing.T, cfg *config.Config, opt Options, ln net.Listener) *Server {
	t.Helper()
	s, err := New(cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// Without admin tokens the API answers loopback clients only; a client
// on another address is refused (it still reaches /healthz and the device
// WebSocket), and the server warns at start that it listens beyond
// loopback.
func TestNoTokensLoopbackOnly(t *testing.T) {
	t.Parallel()
	ip := nonLoopbackIP(t)
	if ip == nil {
		t.Skip("this machine has no non-loopback address; TestIsLoopbackAddr covers the address check")
	}
	logs := &syncbuf.Buffer{}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := serveOn(t, adminConfig(t), Options{Logger: slog.New(slog.NewTextHandler(logs, nil))}, ln)
	remote := "http://" + ln.Addr().String()
	// Dialing the machine's own address comes from that address: not loopback.
	for _, rt := range guardedRoutes(t, s) {
		r := api(t, rt[0], remote+rt[1], operatorSecret, "")
		if r.status != http.StatusForbidden || !bytes.Contains(r.body, []byte(guard.NoTokensMsg)) {
			t.Fatalf("%s %s from %s: HTTP %d %s, want 403", rt[0], rt[1], ip, r.status, r.body)
		}
	}
	if r := api(t, "GET", remote+"/healthz", "", ""); r.status != 200 {
		t.Fatalf("/healthz from %s: HTTP %d", ip, r.status)
	}
	c := dial(t, "ws://"+ln.Addr().String()+"/api/channels/terminal-dev/ws", nil)
	c.connect("remote-device")
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "beyond loopback with no admin tokens") {
		t.Fatalf("no start-up warning:\n%s", logs.String())
	}

	// A loopback client is served, unless it forwards someone else's request.
	ts := serve(t, adminConfig(t), Options{})
	if r := api(t, "GET", ts.http.URL+"/api/status", "", ""); r.status != 200 {
		t.Fatalf("loopback client: HTTP %d %s", r.status, r.body)
	}
	req, _ := http.NewRequest("GET", ts.http.URL+"/api/status", nil)
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("forwarded request through a loopback proxy: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// With tokens configured, a non-loopback listener gets no warning.
func TestNoWarningWithTokens(t *testing.T) {
	t.Parallel()
	ip := nonLoopbackIP(t)
	if ip == nil {
		t.Skip("this machine has no non-loopback address")
	}
	logs := &syncbuf.Buffer{}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, adminConfig(t, withAdmin(t)), Options{Logger: slog.New(slog.NewTextHandler(logs, nil))}, ln)
	if r := api(t, "GET", "http://"+ln.Addr().String()+"/api/status", viewerSecret, ""); r.status != 200 {
		t.Fatalf("viewer from %s: HTTP %d %s", ip, r.status, r.body)
	}
	if strings.Contains(logs.String(), "beyond loopback") {
		t.Fatalf("warning with tokens configured:\n%s", logs.String())
	}
}

// RequireRole asks more of one route than its method does.
func TestRequireRole(t *testing.T) {
	t.Parallel()
	ts := serve(t, adminConfig(t, withAdmin(t)), Options{})
	h := ts.RequireRole(config.RoleOperator, func(w http.ResponseWriter, r *http.Request) {
		op := httpapi.OperatorOf(r)
		httpapi.WriteJSON(w, 200, map[string]string{"name": op.Name, "role": op.Role.String()})
	})
	hs := httptest.NewServer(h)
	defer hs.Close()
	if r := api(t, "GET", hs.URL, viewerSecret, ""); r.status != 403 || !strings.Contains(string(r.body), "role viewer may not GET /: it needs role operator") {
		t.Fatalf("viewer: HTTP %d %s", r.status, r.body)
	}
	if r := api(t, "GET", hs.URL, operatorSecret, ""); r.status != 200 || !strings.Contains(string(r.body), `"name": "otto"`) {
		t.Fatalf("operator: HTTP %d %s", r.status, r.body)
	}
	if r := api(t, "GET", hs.URL, "", ""); r.status != 401 {
		t.Fatalf("no token: HTTP %d", r.status)
	}
}
