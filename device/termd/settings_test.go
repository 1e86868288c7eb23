package termd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"termlink/boards"
	"termlink/device"
	"termlink/display/hd44780"
	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/servertest"
	"termlink/testrig/lcdemu"
)

func strp(s string) *string { return &s }
func intp(n int) *int       { return &n }

// testSetup is a setup as prepare makes it, on the 20x4 I2C board, with
// its log in logs.
func testSetup(t *testing.T, stateDir string, cfg Config) (*setup, *syncbuf.Buffer) {
	t.Helper()
	p, err := boards.Select("rpi-lcd2004-i2c", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = stateDir
	logs := &syncbuf.Buffer{}
	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel)
	s := &setup{cfg: cfg, profile: p, level: level, log: slog.New(slog.NewTextHandler(io.MultiWriter(logs, tWriter{t}), &slog.HandlerOptions{Level: level}))}
	s.loadSettings()
	return s, logs
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Applied settings: the kiosk (over the command line's and the board's
// values, field by field), the log level, the tags of the next connect;
// kept in the state dir, read back by the next start; acked. Settings
// termd cannot apply are acked with the field at fault and change
// nothing.
func TestSettingsApply(t *testing.T) {
	dir := t.TempDir()
	s, logs := testSetup(t, dir, Config{IdleText: strp("own text"), IdleSeconds: intp(90), LogLevel: slog.LevelInfo, Tags: map[string]string{"site": "lobby"}})
	p := s.settings
	if k := p.kiosk(); k.IdleText != "own text" || k.IdleAfter != 90*time.Second || p.version() != 0 || p.tags()["site"] != "lobby" {
		t.Fatalf("before any settings: %+v, version %d, tags %v", k, p.version(), p.tags())
	}
	var acks []link.SettingsAck
	var tags map[string]string
	apply := func(f *link.Settings) {
		p.apply(f, nil, func(m map[string]string) { tags = m }, func(a *link.SettingsAck) { acks = append(acks, *a) })
	}
	apply(&link.Settings{Version: 3, IdleText: strp("Closed today"), BacklightOffAfter: intp(60), NoticeSeconds: intp(7), LogLevel: "debug",
		Tags: map[string]string{"site": "cafe"}})
	if len(acks) != 1 || acks[0] != (link.SettingsAck{Version: 3}) {
		t.Fatalf("acks %+v", acks)
	}
	k := p.kiosk()
	if k.IdleText != "Closed today" || k.IdleAfter != 90*time.Second || k.BacklightOffAfter != time.Minute || k.NoticeSeconds != 7 {
		t.Fatalf("kiosk %+v", k)
	}
	if s.level.Level() != slog.LevelDebug || !s.log.Enabled(context.Background(), slog.LevelDebug) || tags["site"] != "cafe" || p.tags()["site"] != "cafe" {
		t.Fatalf("level %v, tags %v", s.level.Level(), tags)
	}
	// Refused: the ack names the field; nothing changes.
	for _, bad := range []struct {
		f    link.Settings
		want string
	}{
		{link.Settings{Version: 4, IdleText: strp(strings.Repeat("x", link.MaxIdleText+1))}, "idle_text: is 257 bytes"},
		{link.Settings{Version: 4, Tags: map[string]string{"bad key": "x"}}, `tags: key "bad key"`},
		{link.Settings{Version: 4, IdleSeconds: intp(link.MaxSettingsSeconds + 1)}, "idle_seconds: is 604801 seconds, at most 604800"},
	} {
		acks = nil
		apply(&bad.f)
		if len(acks) != 1 || acks[0].Version != 4 || !strings.HasPrefix(acks[0].Error, bad.want) {
			t.Errorf("%+v: acks %+v, want an error %q", bad.f, acks, bad.want)
		}
	}
	if p.version() != 3 || p.kiosk().IdleText != "Closed today" {
		t.Fatalf("a refusal changed the settings: version %d", p.version())
	}
	// The next start has them before it connects.
	s2, _ := testSetup(t, dir, Config{IdleText: strp("own text"), LogLevel: slog.LevelInfo})
	if s2.settings.version() != 3 || s2.settings.kiosk().IdleText != "Closed today" || s2.level.Level() != slog.LevelDebug || s2.settings.tags()["site"] != "cafe" {
		t.Fatalf("after a restart: version %d kiosk %+v level %v", s2.settings.version(), s2.settings.kiosk(), s2.level.Level())
	}
	// Settings without a field give the device its own value back.
	acks = nil
	apply(&link.Settings{Version: 5})
	if k := p.kiosk(); k.IdleText != "own text" || k.BacklightOffAfter != 0 || s.level.Level() != slog.LevelInfo || tags["site"] != "lobby" {
		t.Fatalf("empty settings: kiosk %+v level %v tags %v", k, s.level.Level(), tags)
	}
	if !strings.Contains(logs.String(), "pushed settings applied") {
		t.Errorf("log: %s", logs.String())
	}
}

// A state dir that cannot be written: the settings are applied in
// memory and acked, and the reason is logged. A settings.json that does
// not parse is logged at start and not used.
func TestSettingsUnwritableStateDir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "state")
	if err := os.WriteFile(dir, []byte("a file in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, logs := testSetup(t, dir, Config{})
	var acks []link.SettingsAck
	s.settings.apply(&link.Settings{Version: 2, IdleText: strp("Hi")}, nil, func(map[string]string) {}, func(a *link.SettingsAck) { acks = append(acks, *a) })
	if len(acks) != 1 || acks[0].Error != "" || s.settings.version() != 2 || s.settings.kiosk().IdleText != "Hi" {
		t.Fatalf("acks %+v, version %d", acks, s.settings.version())
	}
	if !strings.Contains(logs.String(), "applied in memory, not kept in the state dir") {
		t.Fatalf("the reason is not logged:\n%s", logs.String())
	}

	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, settingsFileName), []byte(`{"version": 2, "idle_text": "x", "colour": "red"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, logs = testSetup(t, dir, Config{})
	if s.settings.version() != 0 || !strings.Contains(logs.String(), `unknown field \"colour\"`) {
		t.Fatalf("a bad file: version %d, log:\n%s", s.settings.version(), logs.String())
	}
}

func TestParseSettings(t *testing.T) {
	f, err := parseSettings([]byte(`{"version": 4, "idle_text": "Hi\nthere", "idle_seconds": 0, "log_level": "warn", "tags": {"a": "b"}}`))
	if err != nil || f.Version != 4 || *f.IdleText != "Hi\nthere" || *f.IdleSeconds != 0 || f.Tags["a"] != "b" {
		t.Fatalf("%+v %v", f, err)
	}
	for _, tc := range []struct{ in, want string }{
		{``, "line 1"},
		{`[]`, "want a JSON object, got array"},
		{`{"version": 1, "idle_text": "a", "idle_text": "b"}`, `key "idle_text" given twice`},
		{`{"version": 1, "tags": {"a": "b", "a": "c"}}`, `key "a" given twice`},
		{`{"version": 1, "extra": 1}`, `unknown field "extra"`},
		{`{"version": 1, "Idle_Text": "x"}`, `unknown field "Idle_Text"`},
		{`{"version": 0}`, "version: must be a whole number from 1"},
		{`{"version": 1, "notice_seconds": -1}`, "notice_seconds: must not be negative"},
		{`{"version": 1, "log_level": "loud"}`, "log_level: must be"},
		{`{"version": 1, "idle_text": "a\u0007"}`, "idle_text: must be text without control characters"},
		{`{"version": 1} {}`, "line 1"},
		{`{"version": 1, "idle_text": "` + strings.Repeat("x", maxSettingsBytes) + `"}`, "more than 65536"},
		{"{\"version\": 1, \"idle_text\": \"\xff\"}", "not valid UTF-8"},
	} {
		if _, err := parseSettings([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParseSettings(f *testing.F) {
	f.Add([]byte(`{"version": 4, "idle_text": "Hi", "idle_seconds": 5, "backlight_off_after": 60, "notice_seconds": 9, "log_level": "warn", "tags": {"a": "b"}}`))
	f.Add([]byte(`{"version": 1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseSettings(b)
		if err != nil {
			return
		}
		// What parses is what keep writes, and parses to the same.
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := parseSettings(again)
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip: %+v -> %s -> %+v, %v", s, again, s2, err)
		}
	})
}

// lcdDevice is termd as run() puts it together (its settings loaded
// from the state dir before connect, its fleet handlers, runFleet), on
// the emulated 20x4 HD44780 instead of the board's bus.
type lcdDevice struct {
	bus    *lcdemu.Bus
	client *link.Client
	stop   func()
}

func startLCDDevice(t *testing.T, url, stateDir, peer string, tags map[string]string) *lcdDevice {
	t.Helper()
	s, _ := testSetup(t, stateDir, Config{Tags: tags, LogLevel: slog.LevelWarn})
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: 4, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	lcd, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: 4, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	client, err := link.NewClient(link.ClientConfig{URL: url, PeerID: peer, DeviceName: peer, StateDir: stateDir, Logger: s.log,
		Capabilities: append(append(link.DefaultCapabilities(), link.CapNotice), s.fleetCaps()...),
		Tags:         s.settings.tags(), SettingsVersion: s.settings.version(),
		RetryInitial: 50 * time.Millisecond, RetryMax: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d := &device.Daemon{Client: client, View: &device.LCDView{Screen: lcd}, Inputs: make(chan device.Input), Logger: s.log, Kiosk: s.settings.kiosk()}
	fh := &fleetHandlers{}
	s.setFleetHandlers(fh, client, d, url, "")
	ctx, cancel := context.WithCancel(context.Background())
	fleetDone, runDone := make(chan struct{}), make(chan error, 1)
	go func() { defer close(fleetDone); runFleet(ctx, client, fh) }()
	go func() { runDone <- d.Run(ctx) }()
	dev := &lcdDevice{bus: bus, client: client}
	stopped := false
	dev.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("daemon %s: %v", peer, err)
		}
		<-fleetDone
	}
	t.Cleanup(dev.stop)
	return dev
}

// glass waits until the LCD shows want (runs of spaces folded).
func (d *lcdDevice) glass(t *testing.T, want string) {
	t.Helper()
	waitGlass(t, d.bus, regexp.MustCompile(regexp.QuoteMeta(want)))
}

// apiDo calls the settings API of a loopback server (no tokens: the
// local operator).
func apiDo(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &out)
	if out == nil {
		out = map[string]any{"raw": string(b)}
	}
	return resp.StatusCode, out
}

// waitPeer waits until GET .../peers/{peer}/settings satisfies ok.
func waitPeer(t *testing.T, base, peer string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	var v map[string]any
	testwait.UntilOK(t, "peer "+peer+"'s settings as wanted", func() error {
		var status int
		if status, v = apiDo(t, "GET", base+"/api/channels/terminal-dev/peers/"+peer+"/settings", ""); status == http.StatusOK && ok(v) {
			return nil
		}
		return fmt.Errorf("HTTP %d %v", status, v)
	})
	return v
}

func appliedIs(v float64) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["applied_version"] == v && m["current"] == true }
}

// End to end, a real termserver and termd's settings path on the
// emulated LCD: the idle text set for a tag shows on the device's idle
// screen without a restart, and the registry shows the version applied;
// a device offline during a change gets it when it connects; termd
// restarted shows its settings before it connects (and says their
// version, so nothing is pushed again); bad values are refused naming
// the field; a peer's document that sets tags puts them in the registry
// once acked.
func TestSettingsEndToEnd(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, nil)
	base := "http://" + srv.Addr
	tags := map[string]string{"site": "lobby"}
	stateA, stateB := t.TempDir(), t.TempDir()
	a := startLCDDevice(t, srv.URL, stateA, "kiosk-a", tags)
	waitPeer(t, base, "kiosk-a", func(m map[string]any) bool { return m["online"] == true && m["listens"] == true })

	status, out := apiDo(t, "PUT", base+"/api/channels/terminal-dev/settings/tags/site/lobby", `{"idle_text": "Lobby opens 9am", "idle_seconds": 1}`)
	if status != http.StatusOK || out["version"] != 1.0 {
		t.Fatalf("PUT: %d %v", status, out)
	}
	a.glass(t, "Lobby opens 9am")
	waitPeer(t, base, "kiosk-a", appliedIs(1))

	// kiosk-b is offline during the next change; it gets it on connect.
	status, out = apiDo(t, "PUT", base+"/api/channels/terminal-dev/settings/tags/site/lobby", `{"idle_text": "Closed today", "idle_seconds": 1}`)
	if status != http.StatusOK || out["version"] != 2.0 {
		t.Fatalf("PUT: %d %v", status, out)
	}
	a.glass(t, "Closed today")
	b := startLCDDevice(t, srv.URL, stateB, "kiosk-b", tags)
	b.glass(t, "Closed today")
	waitPeer(t, base, "kiosk-b", appliedIs(2))
	waitPeer(t, base, "kiosk-a", appliedIs(2))

	// Restarted with no server to reach: the idle screen has the settings
	// from before.
	a.stop()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "ws://" + dead.Addr().String() + "/api/channels/terminal-dev/ws"
	dead.Close()
	a2 := startLCDDevice(t, deadURL, stateA, "kiosk-a", tags)
	a2.glass(t, "Closed today")
	a2.stop()
	// Back with the server: its connect says version 2, nothing is sent again.
	a3 := startLCDDevice(t, srv.URL, stateA, "kiosk-a", tags)
	waitPeer(t, base, "kiosk-a", func(m map[string]any) bool { return m["online"] == true && m["current"] == true })
	a3.glass(t, "Closed today")

	// Bad values: 400 naming the field; nothing changes.
	for body, field := range map[string]string{`{"idle_seconds": -1}`: "idle_seconds", `{"log_level": "loud"}`: "log_level", `{"idle_txt": "x"}`: "idle_txt"} {
		status, out := apiDo(t, "PUT", base+"/api/channels/terminal-dev/settings/tags/site/lobby", body)
		if status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), field) {
			t.Errorf("PUT %s: %d %v, want 400 naming %s", body, status, out, field)
		}
	}
	// A peer's document sets kiosk-b's tags: the registry has them once
	// it acked, and its next connect says them.
	status, out = apiDo(t, "PUT", base+"/api/channels/terminal-dev/settings/peers/kiosk-b", `{"tags": {"site": "cafe", "floor": "2"}}`)
	if status != http.StatusOK || out["version"] != 3.0 || out["pushed"] != 2.0 {
		t.Fatalf("PUT peer: %d %v", status, out)
	}
	v := waitPeer(t, base, "kiosk-b", func(m map[string]any) bool {
		tags, _ := m["tags"].(map[string]any)
		return m["current"] == true && tags["site"] == "cafe" && tags["floor"] == "2"
	})
	if !reflect.DeepEqual(v["sources"], []any{"peer"}) {
		t.Errorf("kiosk-b's settings come from %v, want its peer document only (it left site=lobby)", v["sources"])
	}
	// The lobby's idle text no longer applies to it.
	testwait.UntilOK(t, "kiosk-b to stop showing the lobby's idle text", func() error {
		if g := b.bus.Text(); strings.Contains(strings.Join(g, " "), "Closed today") {
			return fmt.Errorf("it shows:\n%s", strings.Join(g, "\n"))
		}
		return nil
	})
	b.stop()
	waitPeer(t, base, "kiosk-b", func(m map[string]any) bool { return m["online"] == false })
	startLCDDevice(t, srv.URL, stateB, "kiosk-b", map[string]string{"site": "lobby"}) // its own tags, on the command line
	v = waitPeer(t, base, "kiosk-b", func(m map[string]any) bool { return m["online"] == true })
	if tags, _ := v["tags"].(map[string]any); tags["site"] != "cafe" || v["current"] != true {
		t.Errorf("kiosk-b restarted connects with tags %v (current %v), want the pushed site=cafe", v["tags"], v["current"])
	}
}
