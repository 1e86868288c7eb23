package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/identity"
)

// Issue 22 row 3: enrollment that cannot be locked. Real HTTP on
// 127.0.0.1:0; devices dial from other loopback addresses (127.a.b.c,
// all local on Linux) to stand for other source networks; the server's
// enrollment clock is a fake one the test moves.

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// serveEnroll runs a server with enrollment on terminal-dev and the
// enrollment clock given (set before the server takes a request).
func serveEnroll(t *testing.T, mutate func(*config.Config)) (*testServer, *fakeClock) {
	ts, clk, _ := serveEnrollLogs(t, mutate)
	return ts, clk
}

// serveEnrollLogs is serveEnroll with the server's log (debug level).
func serveEnrollLogs(t *testing.T, mutate func(*config.Config)) (*testServer, *fakeClock, *syncbuf.Buffer) {
	t.Helper()
	cfg := config.Default()
	cfg.Workspace = t.TempDir()
	channelTokens(config.Tokens{}, true)(cfg)
	if mutate != nil {
		mutate(cfg)
	}
	logs := &syncbuf.Buffer{}
	s, err := New(cfg, Options{Logger: debugLogger(logs)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s.ident.Now = clk.Now
	s.Start()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		hs.Close()
	})
	return &testServer{Server: s, http: hs, ws: "ws" + strings.TrimPrefix(hs.URL, "http") + "/api/channels/terminal-dev/ws"}, clk, logs
}

// device is an HTTP client whose connections come from one loopback
// address.
type device struct {
	t    *testing.T
	addr string
	hc   *http.Client
}

func deviceAt(t *testing.T, addr string) *device {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &device{t: t, addr: addr, hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

type answer struct {
	status int
	retry  string
	body   string
	er     enroll.ErrorResponse
}

func (d *device) post(url, body string) answer {
	d.t.Helper()
	resp, err := d.hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		d.t.Fatalf("POST %s from %s: %v", url, d.addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, retry: resp.Header.Get("Retry-After"), body: string(b)}
	_ = json.Unmarshal(b, &a.er)
	return a
}

// start asks for a code; ok false when refused (the answer says why).
func (d *device) start(ts *testServer) (enroll.Grant, answer) {
	d.t.Helper()
	a := d.post(enrollURL(ts), `{"peer_id":"dev-`+strings.ReplaceAll(d.addr, ".", "-")+`"}`)
	var g enroll.Grant
	if a.status == 200 {
		if err := json.Unmarshal([]byte(a.body), &g); err != nil || g.Code == "" {
			d.t.Fatalf("grant %s: %v", a.body, err)
		}
	}
	return g, a
}

func (d *device) poll(ts *testServer, deviceCode string) answer {
	d.t.Helper()
	return d.post(enrollURL(ts)+"/token", `{"device_code":"`+deviceCode+`"}`)
}

func listEnrollments(t *testing.T, ts *testServer, token string) []identity.PendingView {
	t.Helper()
	r := api(t, "GET", ts.http.URL+"/api/enrollments", token, "")
	var list struct{ Enrollments []identity.PendingView }
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil {
		t.Fatalf("GET /api/enrollments: %d %s", r.status, r.body)
	}
	return list.Enrollments
}

func listed(list []identity.PendingView, code string) bool {
	for _, p := range list {
		if p.Code == code {
			return true
		}
	}
	return false
}

// Bad device_code polls from the operator's own address neither refuse
// the operator (approve, list, typos) nor the real device polling from
// that address; only more unknown codes from that network get 429.
// (Before: 5 bad polls made the approval, with a valid operator token,
// and the device's own poll answer 429.)
func TestEnrollBadPollsDoNotLockOperator(t *testing.T) {
	t.Parallel()
	ts, clk := serveEnroll(t, withAdmin(t))
	dev := deviceAt(t, "127.0.0.1") // the operator's address too
	g, a := dev.start(ts)
	if a.status != 200 {
		t.Fatalf("code: %d %s", a.status, a.body)
	}
	attacker := deviceAt(t, "127.0.0.1")
	badPolls := func(n int) map[string]int {
		counts := map[string]int{}
		for i := 0; i < n; i++ {
			a := attacker.poll(ts, fmt.Sprintf("guess-%d-%032d", i, i))
			switch {
			case a.status == 400 && a.er.Error == enroll.Invalid:
				counts["invalid"]++
			case a.status == http.StatusTooManyRequests && a.retry != "" && strings.Contains(a.er.Description, "unknown device codes polled from network 127.0.0.0/24"):
				counts["429"]++
			default:
				t.Fatalf("bad poll %d: %d %s", i, a.status, a.body)
			}
		}
		return counts
	}
	if c := badPolls(5); c["invalid"] != 5 {
		t.Fatalf("5 bad polls answered %v", c)
	}
	// The operator mistypes codes, lists, then approves: never limited.
	for i, typo := range []string{"AAA-AAA", "BBB-BBB", "CCC-CCC", "DDD-DDD", "EEE-EEE", "FFF-FFF", "GGG-GGG", "HHH-HHH"} {
		if typo == g.Code {
			continue
		}
		if r := api(t, "POST", ts.http.URL+"/api/enrollments/"+typo+"/approve", operatorSecret, `{"peer_id":"x"}`); r.status != http.StatusNotFound {
			t.Fatalf("typo %d: %d %s", i, r.status, r.body)
		}
	}
	if list := listEnrollments(t, ts, viewerSecret); !listed(list, g.Code) {
		t.Fatalf("list %+v lacks %s", list, g.Code)
	}
	if r := api(t, "POST", ts.http.URL+"/api/enrollments/"+g.Code+"/approve", operatorSecret, `{"peer_id":"lobby-7"}`); r.status != 200 {
		t.Fatalf("the operator's approval after bad polls from its address: %d %s", r.status, r.body)
	}
	// The network's budget for unknown codes runs out; known codes poll on.
	if c := badPolls(3 * identity.NetBadPollBurst); c["invalid"] != identity.NetBadPollBurst-5 || c["429"] != 2*identity.NetBadPollBurst+5 {
		t.Fatalf("bad polls answered %v, want %d more invalid_grant then 429", c, identity.NetBadPollBurst-5)
	}
	clk.Add(identity.PollInterval * time.Second)
	a = dev.poll(ts, g.DeviceCode)
	var tr enroll.TokenResponse
	if a.status != 200 || json.Unmarshal([]byte(a.body), &tr) != nil || tr.PeerID != "lobby-7" || tr.Token == "" {
		t.Fatalf("the real device, on the address of the bad polls, collecting its token: %d %s", a.status, a.body)
	}
	mustConnect(t, ts, "lobby-7", tr.Token)
}

// A flood of code requests from one /24 (many addresses) gets that
// network's cap only; a device on another network still gets a code.
// (Before: each address had its own budget, so one /24 could take all
// 1,000 codes.)
func TestEnrollOneNetworkCapped(t *testing.T) {
	t.Parallel()
	ts, clk := serveEnroll(t, nil)
	ok, limited := 0, 0
	for i := 1; i <= 40; i++ {
		_, a := deviceAt(t, fmt.Sprintf("127.0.5.%d", i)).start(ts)
		switch {
		case a.status == 200:
			ok++
		case a.status == http.StatusTooManyRequests && a.retry != "" && strings.Contains(a.er.Description, "too many pairing codes asked for from network 127.0.5.0/24"):
			limited++
		default:
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
	}
	if ok != identity.MaxPendingPerNet || limited != 40-identity.MaxPendingPerNet {
		t.Fatalf("one /24 got %d codes and %d refusals, want %d and %d", ok, limited, identity.MaxPendingPerNet, 40-identity.MaxPendingPerNet)
	}
	// The request budget refills, the pending cap holds.
	clk.Add(identity.NetCodeEvery)
	if _, a := deviceAt(t, "127.0.5.41").start(ts); a.status != http.StatusTooManyRequests ||
		!strings.Contains(a.body, fmt.Sprintf("at most %d per network", identity.MaxPendingPerNet)) {
		t.Fatalf("past the network's pending cap: %d %s", a.status, a.body)
	}
	if _, a := deviceAt(t, "127.0.6.1").start(ts); a.status != 200 {
		t.Fatalf("a device on another network: %d %s", a.status, a.body)
	}
	perNet := map[string]int{}
	for _, p := range listEnrollments(t, ts, "") {
		perNet[p.Network]++
	}
	if perNet["127.0.5.0/24"] != identity.MaxPendingPerNet || perNet["127.0.6.0/24"] != 1 || len(perNet) != 2 {
		t.Fatalf("pending per network %v", perNet)
	}
}

// 1,000 networks with a code each fill the global cap: a request from
// one of them is refused (503), one from a new network takes the place
// of the oldest, whose device is told to ask again. (Before: 503 for
// everyone until codes expired, 600 s.)
func TestEnrollFullCapMakesRoom(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("1,000 connections")
	}
	ts, clk, logs := serveEnrollLogs(t, nil)
	var first enroll.Grant
	for k := 0; k < identity.MaxPending; k++ {
		g, a := deviceAt(t, fmt.Sprintf("127.%d.%d.1", 1+k/256, k%256)).start(ts)
		if a.status != 200 {
			t.Fatalf("network %d: %d %s", k, a.status, a.body)
		}
		if k == 0 {
			first = g
		}
		clk.Add(time.Millisecond) // oldest first; 1 s in all, none abandoned
	}
	if _, a := deviceAt(t, "127.1.0.2").start(ts); a.status != http.StatusServiceUnavailable || a.retry == "" {
		t.Fatalf("a second code for a network that has one, at the cap: %d %s", a.status, a.body)
	}
	late := deviceAt(t, "127.9.9.1")
	g, a := late.start(ts)
	if a.status != 200 {
		t.Fatalf("a device on a new network at the cap: %d %s", a.status, a.body)
	}
	list := listEnrollments(t, ts, "")
	if len(list) != identity.MaxPending || listed(list, first.Code) || !listed(list, g.Code) {
		t.Fatalf("%d listed; the oldest %s listed %v, the new %s listed %v", len(list), first.Code, listed(list, first.Code), g.Code, listed(list, g.Code))
	}
	if a := deviceAt(t, "127.1.0.1").poll(ts, first.DeviceCode); a.status != 400 || a.er.Error != enroll.Expired ||
		!strings.Contains(a.er.Description, "to make room") {
		t.Fatalf("the evicted device's poll: %d %s", a.status, a.body)
	}
	if r := api(t, "POST", ts.http.URL+"/api/enrollments/"+first.Code+"/approve", "", `{"peer_id":"x"}`); r.status != http.StatusGone ||
		!strings.Contains(string(r.body), "to make room") {
		t.Fatalf("approving the evicted code: %d %s", r.status, r.body)
	}
	// More networks make more room; the log says so once a minute.
	for i := 10; i < 20; i++ {
		if _, a := deviceAt(t, fmt.Sprintf("127.9.%d.1", i)).start(ts); a.status != 200 {
			t.Fatalf("network 127.9.%d.0/24 at the cap: %d %s", i, a.status, a.body)
		}
	}
	if n := strings.Count(logs.String(), "pairing codes at the cap"); n != 1 {
		t.Fatalf("%d log lines about the cap for 11 codes dropped in a second, want 1", n)
	}
}

// A code whose device stopped polling leaves the list (and the console,
// which shows the list) after identity.IdlePolls intervals; its device, should it
// come back, is told to ask for a new code. A device that keeps polling
// keeps its code, and an approved code waits for its device.
// (Before: an abandoned code stayed listed until it expired, 600 s.)
func TestEnrollAbandonedCodeLeaves(t *testing.T) {
	t.Parallel()
	ts, clk := serveEnroll(t, nil)
	gone, stays := deviceAt(t, "127.0.7.1"), deviceAt(t, "127.0.8.1")
	g1, a1 := gone.start(ts)
	g2, a2 := stays.start(ts)
	if a1.status != 200 || a2.status != 200 {
		t.Fatalf("codes: %d %s / %d %s", a1.status, a1.body, a2.status, a2.body)
	}
	step := identity.PollInterval * time.Second
	clk.Add(step)
	for _, d := range []struct {
		d *device
		g enroll.Grant
	}{{gone, g1}, {stays, g2}} {
		if a := d.d.poll(ts, d.g.DeviceCode); a.er.Error != enroll.Pending {
			t.Fatalf("first poll: %d %s", a.status, a.body)
		}
	}
	for i := 0; i < identity.IdlePolls; i++ { // gone stops polling
		clk.Add(step)
		if a := stays.poll(ts, g2.DeviceCode); a.er.Error != enroll.Pending {
			t.Fatalf("poll %d: %d %s", i, a.status, a.body)
		}
		if list := listEnrollments(t, ts, ""); !listed(list, g1.Code) || !listed(list, g2.Code) {
			t.Fatalf("after %d silent intervals: %+v", i+1, list)
		}
	}
	clk.Add(step / 2)
	if list := listEnrollments(t, ts, ""); listed(list, g1.Code) || !listed(list, g2.Code) {
		t.Fatalf("after %s without a poll the code is still listed (or the polled one is not): %+v", time.Duration(identity.IdlePolls)*step+step/2, list)
	}
	if r := api(t, "POST", ts.http.URL+"/api/enrollments/"+g1.Code+"/approve", "", `{}`); r.status != http.StatusGone ||
		!strings.Contains(string(r.body), "stopped polling") {
		t.Fatalf("approving the abandoned code: %d %s", r.status, r.body)
	}
	if a := gone.poll(ts, g1.DeviceCode); a.status != 400 || a.er.Error != enroll.Expired || !strings.Contains(a.er.Description, "not polled") {
		t.Fatalf("the abandoned device comes back: %d %s", a.status, a.body)
	}
	// Approved, the code waits for its device past the idle time.
	if r := api(t, "POST", ts.http.URL+"/api/enrollments/"+g2.Code+"/approve", "", `{}`); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	clk.Add(10 * time.Duration(identity.IdlePolls) * step)
	if a := stays.poll(ts, g2.DeviceCode); a.status != 200 || !strings.Contains(a.body, `"token"`) {
		t.Fatalf("collecting after a long silence once approved: %d %s", a.status, a.body)
	}
}

// Each code has its own limit: polled too fast it answers slow_down and
// its interval (and the time it may go unpolled) grows; other codes and
// the network's budget are untouched.
func TestEnrollSlowDownPerCode(t *testing.T) {
	t.Parallel()
	ts, clk := serveEnroll(t, nil)
	d := deviceAt(t, "127.0.9.1")
	g, a := d.start(ts)
	if a.status != 200 {
		t.Fatalf("code: %d %s", a.status, a.body)
	}
	clk.Add(identity.PollInterval * time.Second)
	if a := d.poll(ts, g.DeviceCode); a.er.Error != enroll.Pending {
		t.Fatalf("poll: %d %s", a.status, a.body)
	}
	if a := d.poll(ts, g.DeviceCode); a.status != 400 || a.er.Error != enroll.SlowDown || !strings.Contains(a.er.Description, "every 7s") {
		t.Fatalf("an immediate second poll: %d %s", a.status, a.body)
	}
	// 12 s later: past 3 x 2 s, within 3 x 7 s.
	clk.Add(12 * time.Second)
	if a := d.poll(ts, g.DeviceCode); a.er.Error != enroll.Pending {
		t.Fatalf("a poll at the slower pace: %d %s", a.status, a.body)
	}
	if _, a := d.start(ts); a.status != 200 {
		t.Fatalf("another code from the network: %d %s", a.status, a.body)
	}
}

// The operator denies a code: it leaves the list and its device is told
// access_denied.
func TestEnrollDeny(t *testing.T) {
	t.Parallel()
	ts, _ := serveEnroll(t, withAdmin(t))
	d := deviceAt(t, "127.0.10.1")
	g, a := d.start(ts)
	if a.status != 200 {
		t.Fatalf("code: %d %s", a.status, a.body)
	}
	if r := api(t, "DELETE", ts.http.URL+"/api/enrollments/"+g.Code, viewerSecret, ""); r.status != http.StatusForbidden {
		t.Fatalf("deny by a viewer: %d %s", r.status, r.body)
	}
	if r := api(t, "DELETE", ts.http.URL+"/api/enrollments/"+strings.ToLower(g.Code), operatorSecret, ""); r.status != 200 || !strings.Contains(string(r.body), `"denied": true`) {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	if list := listEnrollments(t, ts, viewerSecret); len(list) != 0 {
		t.Fatalf("listed after deny: %+v", list)
	}
	if a := d.poll(ts, g.DeviceCode); a.status != 400 || a.er.Error != "access_denied" {
		t.Fatalf("the denied device's poll: %d %s", a.status, a.body)
	}
	for _, m := range []string{"DELETE", "POST"} {
		path := "/api/enrollments/" + g.Code
		if m == "POST" {
			path += "/approve"
		}
		if r := api(t, m, ts.http.URL+path, operatorSecret, `{"peer_id":"x"}`); r.status != http.StatusGone || !strings.Contains(string(r.body), "denied") {
			t.Fatalf("%s %s after deny: %d %s", m, path, r.status, r.body)
		}
	}
}

// A device_name or an approved name longer than the registry takes is
// refused with the reason (a pending code holds a few hundred bytes).
func TestEnrollNamesBounded(t *testing.T) {
	t.Parallel()
	ts, _ := serveEnroll(t, nil)
	d := deviceAt(t, "127.0.11.1")
	if a := d.post(enrollURL(ts), `{"device_name":"`+strings.Repeat("n", 129)+`"}`); a.status != 400 || !strings.Contains(a.body, "device_name must be at most 128 bytes (this one has 129)") {
		t.Fatalf("device_name of 129 bytes: %d %s", a.status, a.body)
	}
	a := d.post(enrollURL(ts), `{"device_name":"`+strings.Repeat("n", 128)+`"}`)
	var g enroll.Grant
	if a.status != 200 || json.Unmarshal([]byte(a.body), &g) != nil {
		t.Fatalf("device_name of 128 bytes: %d %s", a.status, a.body)
	}
	if r := api(t, "POST", ts.http.URL+"/api/enrollments/"+g.Code+"/approve", "", `{"peer_id":"p","name":"`+strings.Repeat("n", 129)+`"}`); r.status != 400 ||
		!strings.Contains(string(r.body), "name must be at most 128 bytes") {
		t.Fatalf("approving with a name of 129 bytes: %d %s", r.status, r.body)
	}
}
