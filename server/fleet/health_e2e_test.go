package fleet_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/registry"
	"termlink/server/servertest"
)

// rawConn is a device connection the test writes frames on and reads
// the server's answers from.
type rawConn struct {
	t  *testing.T
	ws *websocket.Conn
}

func connectRaw(t *testing.T, url, peer string, caps ...string) *rawConn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	c := &rawConn{t: t, ws: ws}
	c.write(&link.Connect{PeerID: peer, Capabilities: append([]string{link.CapText}, caps...)})
	if _, ok := c.next().(*link.Connected); !ok {
		t.Fatal("no connected frame")
	}
	return c
}

func (c *rawConn) write(f link.Frame) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
		c.t.Fatal(err)
	}
}

// next is the next frame other than a ping (10 s at most: a frame the
// test waits for that never comes fails it rather than hanging).
func (c *rawConn) next() link.Frame {
	c.t.Helper()
	for {
		_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			c.t.Fatalf("reading: %v", err)
		}
		f, err := link.Decode(data)
		if err != nil {
			c.t.Fatalf("decoding %s: %v", data, err)
		}
		if _, ping := f.(*link.Ping); !ping {
			return f
		}
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	return string(b)
}

// peerHealth is the health on a peer's page (nil: none).
func peerHealth(t *testing.T, url string) *registry.Health {
	t.Helper()
	var peer registry.Peer
	if err := json.Unmarshal([]byte(getText(t, url)), &peer); err != nil {
		t.Fatalf("the peer's page: %v", err)
	}
	return peer.Health
}

// Issue 43: a health report is taken only from a connection that listed
// "health", at most one per 30 s per connection; the registry keeps the
// last, the peer's page shows it, /metrics counts the devices per
// condition (never per device).
func TestHealthFrameRules(t *testing.T) {
	s := servertest.Start(t, nil)
	temp := int64(85_000)
	report := &link.Health{UptimeSeconds: 600, Load1: 0.5, MemAvailable: 50 << 20, DiskFree: 1 << 20, DiskFreePercent: 3.5,
		TempMilliC: &temp, Throttled: []string{link.ThrottleUnderVoltage}, LastStop: link.StopCrash, LastStopDetail: "panic: boom",
		RestartsLastHour: 4, Reconnects: 1, HeartbeatRTTMillis: 12}
	peerURL := "http://" + s.Addr + "/api/channels/terminal-dev/peers/"

	// Without the capability: refused, nothing kept.
	plain := connectRaw(t, s.URL, "kiosk-plain")
	plain.write(report)
	if e, ok := plain.next().(*link.Error); !ok || e.Code != link.CodeBadFrame || !strings.Contains(e.Error, `"health" capability`) {
		t.Fatalf("health without the capability: %+v, want bad_frame naming it", e)
	}
	if page := getText(t, peerURL+"kiosk-plain"); strings.Contains(page, `"health"`) {
		t.Fatalf("a refused report was kept: %s", page)
	}

	// With it: taken, kept, shown.
	dev := connectRaw(t, s.URL, "kiosk-h", link.CapHealth)
	dev.write(report)
	var h *registry.Health
	testwait.Until(t, "the report on the peer's page", func() bool {
		h = peerHealth(t, peerURL+"kiosk-h")
		return h != nil
	})
	if h.DiskFreePercent != 3.5 || h.LastStopDetail != "panic: boom" || h.HeartbeatRTTMillis != 12 || h.At == "" ||
		strings.Join(h.Conditions, ",") != "disk_low,hot,throttled,crash_looping" {
		t.Fatalf("kept %+v", *h)
	}

	// A second report within 30 s on the same connection: busy, and the
	// first one stays.
	second := *report
	second.DiskFreePercent = 50
	dev.write(&second)
	if e, ok := dev.next().(*link.Error); !ok || e.Code != link.CodeBusy || !strings.Contains(e.Error, "one health report per 30s") {
		t.Fatalf("a second report within 30 s: %+v, want busy", e)
	}
	if h := peerHealth(t, peerURL+"kiosk-h"); h == nil || h.DiskFreePercent != 3.5 {
		t.Fatalf("a refused report replaced the kept one: %+v", h)
	}

	// A new connection may report at once (its connect's report).
	dev.ws.Close()
	again := connectRaw(t, s.URL, "kiosk-h", link.CapHealth)
	again.write(&second)
	testwait.Until(t, "the new connection's report kept", func() bool {
		h := peerHealth(t, peerURL+"kiosk-h")
		return h != nil && h.DiskFreePercent == 50
	})

	// /metrics: counts per condition, no device in a label.
	metrics := getText(t, "http://"+s.Addr+"/metrics")
	for _, want := range []string{
		`termserver_devices_health{channel="terminal-dev",condition="reporting"} 1`,
		`termserver_devices_health{channel="terminal-dev",condition="hot"} 1`,
		`termserver_devices_health{channel="terminal-dev",condition="disk_low"} 0`,
		`termserver_devices_health{channel="terminal-dev",condition="power_loss"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "termserver_devices_health") && strings.Contains(line, "kiosk") {
			t.Errorf("a device in a health series: %s", line)
		}
	}
}

// A device that floods health frames gets a few refusals (the answer
// pace, then the gate per connection) and nothing else: the kept report
// is the first, the server keeps serving the connection.
func TestHealthFloodIsBounded(t *testing.T) {
	s := servertest.Start(t, nil)
	dev := connectRaw(t, s.URL, "kiosk-flood", link.CapHealth)
	first := &link.Health{DiskFreePercent: 42, LastStop: link.StopClean}
	const flood = 200
	for i := range flood {
		h := *first
		h.UptimeSeconds = int64(i)
		dev.write(&h)
	}
	dev.write(&link.Ping{})
	refusals := 0
	for {
		f := dev.next()
		if _, ok := f.(*link.Pong); ok {
			break
		}
		if e, ok := f.(*link.Error); !ok || e.Code != link.CodeBusy {
			t.Fatalf("got %#v, want busy refusals then the pong", f)
		}
		refusals++
	}
	// The gate lets 10 refusals of a kind through per connection at once
	// (throttle's burst), 10 more a minute.
	if refusals == 0 || refusals > 20 {
		t.Fatalf("%d refusals written for %d frames past the first; want a few (the gate's burst)", refusals, flood-1)
	}
	h := peerHealth(t, "http://"+s.Addr+"/api/channels/terminal-dev/peers/kiosk-flood")
	if h == nil || h.UptimeSeconds != 0 || h.DiskFreePercent != 42 {
		t.Fatalf("kept %+v, want the first report", h)
	}
}

// Issue 43: with metrics.healthTagKeys ["site"], /metrics counts the
// online devices per condition per value of site, of authenticated
// devices; another tag key (floor) gets no series, nor does a device.
func TestHealthByTagOnMetrics(t *testing.T) {
	s := servertest.Start(t, func(cfg *config.Config) {
		ch := cfg.Channels["terminal-dev"]
		ch.Config.Tokens = config.Tokens{Any: []string{"lab-one", "lab-two"}}
		cfg.Channels["terminal-dev"] = ch
		cfg.Metrics.HealthTagKeys = []string{"site"}
	})
	peerURL := "http://" + s.Addr + "/api/channels/terminal-dev/peers/"
	for i, d := range []struct {
		peer, token, floor string
		disk               float64
	}{{"kiosk-a", "lab-one", "1", 3}, {"kiosk-b", "lab-two", "2", 80}} {
		ws, _, err := websocket.DefaultDialer.Dial(s.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.Close() })
		c := &rawConn{t: t, ws: ws}
		c.write(&link.Connect{PeerID: d.peer, Token: d.token, Capabilities: []string{link.CapText, link.CapHealth},
			Tags: map[string]string{"site": "lobby", "floor": d.floor}})
		if _, ok := c.next().(*link.Connected); !ok {
			t.Fatalf("device %d: no connected frame", i)
		}
		c.write(&link.Health{UptimeSeconds: 60, DiskFreePercent: d.disk, LastStop: link.StopClean})
		testwait.Until(t, d.peer+"'s report kept", func() bool { return peerHealth(t, peerURL+d.peer) != nil })
	}
	metrics := getText(t, "http://"+s.Addr+"/metrics")
	for _, want := range []string{
		`termserver_devices_health_by_tag{channel="terminal-dev",tag_key="site",tag_value="lobby",condition="reporting"} 2`,
		`termserver_devices_health_by_tag{channel="terminal-dev",tag_key="site",tag_value="lobby",condition="disk_low"} 1`,
		`termserver_devices_health_by_tag{channel="terminal-dev",tag_key="site",tag_value="lobby",condition="hot"} 0`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "termserver_devices_health_by_tag") && (strings.Contains(line, `tag_key="floor"`) || strings.Contains(line, "kiosk")) {
			t.Errorf("a series for a key not allowed, or for a device: %s", line)
		}
	}
}
