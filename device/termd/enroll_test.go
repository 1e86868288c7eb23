package termd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"termlink/device"
	"termlink/display/hd44780"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/lcdemu"
)

var codeOnGlass = regexp.MustCompile(`Pair: ([2-9A-HJ-NP-Z]{3}-[2-9A-HJ-NP-Z]{3})`)

// waitGlass waits until the emulated LCD shows something matching re.
func waitGlass(t *testing.T, bus *lcdemu.Bus, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	testwait.UntilOK(t, fmt.Sprintf("the LCD to show %s", re), func() error {
		g := strings.Join(bus.Text(), "\n")
		if m = re.FindStringSubmatch(g); m == nil {
			return fmt.Errorf("it shows:\n%s", g)
		}
		return nil
	})
	return m
}

// A fresh device with no token shows a pairing code on its (emulated)
// 16x2 LCD; the test reads the code from the glass and approves it
// through the operator API; the device keeps its token (0600 in a 0700
// state dir) and, run as termd runs it, is online with it and answered.
func TestEnrollOnTheLCD(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, func(c *config.Config) {
		ch := c.Channels["terminal-dev"]
		ch.Config.Enrollment = true
		c.Channels["terminal-dev"] = ch
	})
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: 2, Cols: 16})
	if err != nil {
		t.Fatal(err)
	}
	lcd, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: 2, Cols: 16})
	if err != nil {
		t.Fatal(err)
	}
	view := &device.LCDView{Screen: lcd}
	state := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(context.Background(), 2*testwait.Deadline)
	defer cancel()
	var logs bytes.Buffer // read once enrollDevice has returned
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	type result struct {
		token, peer string
		err         error
	}
	done := make(chan result, 1)
	go func() {
		tok, peer, err := enrollDevice(ctx, srv.URL, "", state, "termd-fresh", "Lobby", view, log)
		done <- result{tok, peer, err}
	}()
	m := waitGlass(t, bus, codeOnGlass)
	// The second row may still be on its way to the glass (cell by cell
	// over I2C: under qemu the first row was seen alone once).
	waitGlass(t, bus, regexp.MustCompile(regexp.QuoteMeta(srv.Addr)))
	code := m[1]
	resp, err := http.Post("http://"+srv.Addr+"/api/enrollments/"+code+"/approve", "application/json",
		strings.NewReader(`{"peer_id": "lobby-7", "name": "Lobby"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("approve %s: HTTP %d", code, resp.StatusCode)
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the device did not receive its token")
	}
	if r.err != nil || r.peer != "lobby-7" || r.token == "" {
		t.Fatalf("enrollDevice: peer %q err %v", r.peer, r.err)
	}
	if strings.Contains(logs.String(), r.token) || !strings.Contains(logs.String(), code) {
		t.Fatalf("termd's log shows the token, or not the code:\n%s", logs.String())
	}
	waitGlass(t, bus, regexp.MustCompile(`Enrolled as`))
	for p, want := range map[string]os.FileMode{state: 0o700, filepath.Join(state, enroll.TokenFileName): 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v %v, want mode %v", p, fi, err, want)
		}
	}
	tok, err := loadToken("", state) // what the next start finds
	if err != nil || tok != r.token {
		t.Fatalf("loadToken: %v (same token: %v)", err, tok == r.token)
	}

	// Online with its own token: the daemon on the same LCD, a message, the reply.
	client, err := link.NewClient(link.ClientConfig{URL: srv.URL, PeerID: r.peer, Token: tok, DeviceName: "Lobby", StateDir: state,
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	inputs := make(chan device.Input, 1)
	drawn := &onlineView{View: view}
	d := &device.Daemon{Client: client, View: drawn, Inputs: inputs, Hello: "Enrolled as " + r.peer} // as run() does
	dctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- d.Run(dctx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	// "Enrolled as" stays over the screen for a few seconds, online
	// (a draw with the link up shows it), and then the pairing code is
	// gone.
	testwait.Until(t, "a draw with the link up", drawn.online.Load)
	if g := strings.Join(bus.Text(), "\n"); !strings.Contains(g, "Enrolled as") {
		t.Fatalf("online, the LCD no longer says it enrolled:\n%s", g)
	}
	waitGlass(t, bus, regexp.MustCompile(`ok`))
	if g := strings.Join(bus.Text(), "\n"); strings.Contains(g, "Pair") {
		t.Fatalf("the pairing code stays after approval:\n%s", g)
	}
	inputs <- device.Input{Kind: device.InputSend, Text: "hi"}
	waitGlass(t, bus, regexp.MustCompile(`You said`))
}

// onlineView notes when a completed draw drew the link up.
type onlineView struct {
	device.View
	online atomic.Bool
}

func (v *onlineView) Render(ctx context.Context, m *device.Model, now time.Time) error {
	err := v.View.Render(ctx, m, now)
	if m.Link == link.StateConnected {
		v.online.Store(true)
	}
	return err
}
