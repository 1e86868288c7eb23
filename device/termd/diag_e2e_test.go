package termd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/boards"
	"termlink/device"
	"termlink/device/logring"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/servertest"
)

// termd's diag handling end to end: a real termserver, and termd as run()
// puts it together (openLog feeding the ring, the fleet handlers set by
// setFleetHandlers, runFleet, the daemon drawing on the emulated 16x2
// LCD through the real driver). The operator's GET .../logs returns
// lines termd logged (the link's "link up", the previous request's
// "diag answered"), and POST .../selftest a passing report.
func TestDiagEndToEnd(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, nil)
	profile, err := boards.Select("rpi-lcd1602-i2c", "")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	s := &setup{cfg: Config{StateDir: state, LogFile: filepath.Join(state, "termd.log"), Version: "1.0-diag"}, profile: profile, ring: logring.New(0)}
	s.log, s.level, s.closeLog = openLog(s.cfg, profile, nil, s.ring)
	defer s.closeLog()
	_, _, lcd, _ := emulatorDiag(t) // the emulated LCD and its driver
	client, err := link.NewClient(link.ClientConfig{URL: srv.URL, PeerID: "kiosk-diag", StateDir: state, Logger: s.log,
		Capabilities: append(link.DefaultCapabilities(), s.fleetCaps()...), Version: s.cfg.Version,
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d := &device.Daemon{Client: client, View: &device.LCDView{Screen: lcd}, Inputs: make(chan device.Input), Logger: s.log}
	fh := &fleetHandlers{}
	s.setFleetHandlers(fh, client, d, srv.URL, "")
	ctx, cancel := context.WithCancel(context.Background())
	ran, fleetDone := make(chan error, 1), make(chan struct{})
	go func() { ran <- d.Run(ctx) }()
	go func() { defer close(fleetDone); runFleet(ctx, client, fh) }()
	defer func() {
		cancel()
		<-fleetDone
		if err := <-ran; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()

	base := "http://" + srv.Addr + "/api/channels/terminal-dev/peers/kiosk-diag/"
	get := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var status int
	var body string
	testwait.UntilOK(t, "the device's logs through the server", func() error {
		if status, body = get("GET", "logs?bytes=4096"); status == http.StatusConflict || status == http.StatusNotFound { // not connected yet
			return fmt.Errorf("HTTP %d %s", status, body)
		}
		return nil
	})
	if status != 200 || !strings.Contains(body, `msg="link up"`) || len(body) > 4096 {
		t.Fatalf("logs: HTTP %d %s", status, body)
	}
	status, body = get("POST", "selftest")
	var st struct {
		OK   bool   `json:"ok"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal([]byte(body), &st); status != 200 || err != nil || !st.OK ||
		!strings.Contains(st.Text, "display       PASS    no write errors since termd started") || !strings.Contains(st.Text, "i2c-backpack  N/A     the board's I2C bus is not open") ||
		!strings.Contains(st.Text, "selftest: PASS (4 checks; 1 not applicable)") {
		t.Fatalf("selftest: HTTP %d %s %v", status, body, err)
	}
	if status, body = get("GET", "logs"); status != 200 || !strings.Contains(body, `msg="diag answered"`) || !strings.Contains(body, "kind=selftest bytes=") {
		t.Fatalf("logs after the self-test: HTTP %d %s", status, body)
	}
}
