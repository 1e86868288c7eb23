package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/identity"
)

func enrollURL(ts *testServer) string { return ts.http.URL + "/api/channels/terminal-dev/enroll" }

// post sends body to url and returns the status, the Retry-After header
// and the body.
func post(t *testing.T, url, body string) (int, string, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

func approve(t *testing.T, ts *testServer, code, body string) (int, string) {
	t.Helper()
	status, _, b := post(t, ts.http.URL+"/api/enrollments/"+code+"/approve", body)
	return status, b
}

// A device asks for a code, an operator approves it, the device collects
// its token once and connects with it; the code cannot be used again,
// and neither the server log nor the workspace holds the token.
func TestEnrollmentFlow(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	channelTokens(config.Tokens{}, true)(cfg)
	ts := serve(t, cfg, Options{Logger: debugLogger(logs)})

	// With enrollment on, the channel takes no device without a token.
	mustRefuse(t, ts, "walk-in", "", "no token")

	c := enroll.Client{Endpoint: enrollURL(ts)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := c.Start(ctx, enroll.StartRequest{PeerID: "lobby-1", DeviceName: "Lobby"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enroll.ParseCode(g.Code); err != nil || g.ExpiresIn != 600 || !strings.HasPrefix(g.VerificationURI, ts.http.URL) {
		t.Fatalf("grant %+v (code: %v)", g, err)
	}
	var list struct{ Enrollments []identity.PendingView }
	if code := getJSON(t, ts.http.URL+"/api/enrollments", &list); code != 200 || len(list.Enrollments) != 1 ||
		list.Enrollments[0].Code != g.Code || list.Enrollments[0].PeerID != "lobby-1" {
		t.Fatalf("GET /api/enrollments: %d %+v", code, list)
	}
	if status, _, body := post(t, enrollURL(ts)+"/token", `{"device_code":"`+g.DeviceCode+`"}`); status != 400 || !strings.Contains(body, enroll.Pending) {
		t.Fatalf("poll before approval: %d %s", status, body)
	}
	if status, body := approve(t, ts, g.Code, `{"tags": {"bad key": "x"}}`); status != 400 || !strings.Contains(body, "the key may hold only") {
		t.Fatalf("approve with a bad tag: %d %s", status, body)
	}
	// The operator types it in lower case without the dash.
	typed := strings.ToLower(strings.ReplaceAll(g.Code, "-", ""))
	if status, body := approve(t, ts, typed, `{"name": "Lobby kiosk", "tags": {"site": "hq"}}`); status != 200 || !strings.Contains(body, `"peer_id": "lobby-1"`) {
		t.Fatalf("approve: %d %s", status, body)
	}
	if status, body := approve(t, ts, g.Code, `{}`); status != http.StatusConflict || !strings.Contains(body, "single use") {
		t.Fatalf("second approval: %d %s", status, body)
	}
	tr, err := c.Wait(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if tr.PeerID != "lobby-1" || tr.ChannelID != "terminal-dev" || len(tr.Token) < 40 {
		t.Fatalf("token response peer %q channel %q token length %d", tr.PeerID, tr.ChannelID, len(tr.Token))
	}
	// Collected once: the device code and the pairing code are spent.
	if status, _, body := post(t, enrollURL(ts)+"/token", `{"device_code":"`+g.DeviceCode+`"}`); status != 400 || !strings.Contains(body, enroll.Invalid) {
		t.Fatalf("second collection: %d %s", status, body)
	}
	if status, body := approve(t, ts, g.Code, `{}`); status != http.StatusNotFound {
		t.Fatalf("approval after use: %d %s", status, body)
	}

	dev := mustConnect(t, ts, "lobby-1", tr.Token)
	if _, reply := dev.ask("e-1", "hello"); !strings.Contains(reply, "hello") {
		t.Fatalf("reply %q", reply)
	}
	mustRefuse(t, ts, "lobby-2", tr.Token, "bound to another peer_id")
	// The registry shows the name and tags the operator approved.
	var peer struct {
		DeviceName string            `json:"device_name"`
		Tags       map[string]string `json:"tags"`
	}
	if code := getJSON(t, ts.http.URL+"/api/channels/terminal-dev/peers/lobby-1", &peer); code != 200 || peer.DeviceName != "Lobby kiosk" || peer.Tags["site"] != "hq" {
		t.Fatalf("registry: HTTP %d %+v", code, peer)
	}
	var b struct{ Bindings []identity.BindingView }
	getJSON(t, ts.http.URL+"/api/channels/terminal-dev/bindings", &b)
	if len(b.Bindings) != 1 || b.Bindings[0].Source != identity.BindEnrolled || b.Bindings[0].Name != "Lobby kiosk" || b.Bindings[0].Tags["site"] != "hq" ||
		b.Bindings[0].ApprovedBy != "local" {
		t.Fatalf("bindings %+v", b)
	}
	ws, err := os.ReadFile(filepath.Join(cfg.Workspace, "credentials", "terminal-dev.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(cfg.Workspace, "credentials", "terminal-dev.json")); fi.Mode().Perm() != 0o600 {
		t.Errorf("credentials file mode %v, want 0600", fi.Mode().Perm())
	}
	if strings.Contains(string(ws), tr.Token) || !strings.Contains(string(ws), sha256Hex(tr.Token)) {
		t.Fatalf("workspace credentials hold the token, or not its digest:\n%s", ws)
	}
	for _, secret := range []string{tr.Token, g.DeviceCode} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("the server log shows a secret:\n%s", logs.String())
		}
	}
	for _, e := range ts.events(t) {
		if strings.Contains(e.Detail, tr.Token) || strings.Contains(e.Detail, g.DeviceCode) {
			t.Fatalf("event shows a secret: %+v", e)
		}
	}
}

func TestEnrollmentCodeExpires(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) {
		channelTokens(config.Tokens{}, true)(c)
		ch := c.Channels["terminal-dev"]
		ch.Config.EnrollmentCodeSeconds = 1
		c.Channels["terminal-dev"] = ch
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := enroll.Client{Endpoint: enrollURL(ts)}
	g, err := c.Start(ctx, enroll.StartRequest{PeerID: "late-1"})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the code to expire (the device's own poll reports it).
	if _, err := c.Wait(ctx, g); !errors.Is(err, enroll.ErrExpired) {
		t.Fatalf("Wait: %v, want ErrExpired", err)
	}
	g2, err := c.Start(ctx, enroll.StartRequest{PeerID: "late-2"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, body := approve(t, ts, g2.Code, `{}`)
		if status == http.StatusGone && strings.Contains(body, "expired") {
			break
		}
		if status != http.StatusOK && status != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("approve of an expiring code: %d %s", status, body)
		}
		if status == http.StatusOK {
			// approved before it expired: fine, but then it is no test of
			// expiry; ask for another and try after it expired.
			g2, _ = c.Start(ctx, enroll.StartRequest{PeerID: "late-3"})
		}
		time.Sleep(1100 * time.Millisecond)
	}
}

// One address asks for codes: identity.NetCodeBurst at once, then 429 with
// Retry-After. (The operator's routes and the other limits are in
// enroll_lock_test.go.)
func TestEnrollmentRateLimited(t *testing.T) {
	t.Parallel()
	ts := startServer(t, channelTokens(config.Tokens{}, true), nil)
	for i := 0; i < identity.NetCodeBurst; i++ {
		if status, _, body := post(t, enrollURL(ts), `{}`); status != 200 {
			t.Fatalf("code %d: %d %s", i, status, body)
		}
	}
	status, retry, body := post(t, enrollURL(ts), `{}`)
	if status != http.StatusTooManyRequests || retry == "" || !strings.Contains(body, "too many pairing codes asked for from network 127.0.0.0/24") {
		t.Fatalf("code %d: %d Retry-After %q %s", identity.NetCodeBurst+1, status, retry, body)
	}
}

func TestEnrollmentOffByDefault(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	if ts.enrollmentOn() {
		t.Error("enrollmentOn with no channel taking enrollment")
	}
	if on := startServer(t, channelTokens(config.Tokens{}, true), nil); !on.enrollmentOn() {
		t.Error("enrollmentOn false with enrollment on")
	}
	status, _, body := post(t, enrollURL(ts), `{}`)
	if status != http.StatusNotFound || !strings.Contains(body, `enrollment is off on channel \"terminal-dev\"`) {
		t.Fatalf("enroll on a channel without enrollment: %d %s", status, body)
	}
}

// With no tokens and no enrollment a channel is open; the startup log
// says so when the server listens beyond loopback.
func TestOpenChannelWarning(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	s, err := New(cfg, Options{Logger: debugLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	s.warnOpenChannels(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
	if strings.Contains(logs.String(), "channel is open") {
		t.Fatalf("a warning for a loopback listener: %s", logs.String())
	}
	s.warnOpenChannels(&netTCPAddr)
	if !strings.Contains(logs.String(), "channel is open: any device may connect as any peer_id") {
		t.Fatalf("no warning in %s", logs.String())
	}
	// A channel with enrollment (or tokens) is not open.
	logs2 := &syncbuf.Buffer{}
	cfg2 := config.Default()
	cfg2.Workspace = t.TempDir()
	channelTokens(config.Tokens{}, true)(cfg2)
	s2, err := New(cfg2, Options{Logger: debugLogger(logs2)})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown(context.Background())
	s2.warnOpenChannels(&netTCPAddr)
	if strings.Contains(logs2.String(), "channel is open") {
		t.Fatalf("a warning for a channel with enrollment: %s", logs2.String())
	}
}

var netTCPAddr = net.TCPAddr{IP: net.IPv4zero, Port: 8080}

func debugLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
