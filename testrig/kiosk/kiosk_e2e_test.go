package kiosk_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"termlink/device"
	"termlink/display/hd44780"
	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/lcdemu"
)

const (
	adminToken = "e2e-operator-token-0123456789"
	channelID  = "terminal-dev"
	// waitLong bounds every wait for an event: testwait's deadline (a
	// loaded 2-core machine is slow, never that slow). No test asserts
	// on how long a wait took.
	waitLong = testwait.Deadline
)

// tabsAtOnce is how many tests drive the package's chromium at the same
// time: each has a server, its simulated devices and a tab or two; more
// on 2 cores only thrash.
const tabsAtOnce = 3

// tabSlots holds one token per test running.
var tabSlots = make(chan struct{}, tabsAtOnce)

// parallel runs a test in parallel with the package's others, at most
// tabsAtOnce at once whatever -parallel says (its slot is given back
// after every cleanup registered later).
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
	tabSlots <- struct{}{}
	t.Cleanup(func() { <-tabSlots })
}

func TestMain(m *testing.M) {
	flag.Parse()
	// go test's -parallel defaults to GOMAXPROCS, 2 on a 2-core
	// machine: these tests mostly wait on the browser and the servers.
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", fmt.Sprint(tabsAtOnce)); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	stopChromium()
	os.Exit(code)
}

// chromiumPath finds Debian's chromium; without it the test skips, or
// fails when CI_REQUIRE_TOOLS=1 (CI installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	msg := "chromium not found on PATH (Debian: apt-get install chromium): the real-browser test of the web console cannot run"
	if os.Getenv("CI_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg + " and CI_REQUIRE_TOOLS=1")
	}
	t.Skip(msg)
	return ""
}

// startServer runs termserver (servertest: channel terminal-dev, the echo
// agent) with the admin block as termserver --config reads it: one
// operator token, given as its sha256 digest.
func startServer(t *testing.T) (addr string) {
	t.Helper()
	sum := sha256.Sum256([]byte(adminToken))
	admin, err := config.Parse([]byte(`{
		"channels": {"terminal-dev": {"enabled": true, "kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "echo"}},
		"admin": {"tokens": [{"token": "sha256:` + hex.EncodeToString(sum[:]) + `", "role": "operator", "name": "e2e"}]}}`))
	if err != nil {
		t.Fatalf("admin config: %v", err)
	}
	return servertest.Start(t, func(c *config.Config) { c.Admin = admin.Admin }).Addr
}

// kiosk is one simulated device: termd's daemon with the real HD44780
// driver on the emulated 20x4 LCD and a link client listing notice and
// screen.
type kiosk struct {
	peerID string
	bus    *lcdemu.Bus
	inputs chan device.Input // the keypad, as termd's input layer hands it on
	cancel context.CancelFunc
	done   chan error
}

func startKiosk(t *testing.T, addr, peerID string, tags map[string]string) *kiosk {
	t.Helper()
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: 4, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	lcd, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: 4, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	client, err := link.NewClient(link.ClientConfig{
		URL:    "ws://" + addr + "/api/channels/" + channelID + "/ws",
		PeerID: peerID, DeviceName: "kiosk " + peerID, StateDir: t.TempDir(),
		Board: "emulated-2004", Version: "e2e", Tags: tags,
		Capabilities: append(link.DefaultCapabilities(), link.CapNotice, link.CapScreen),
		RetryInitial: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		Logger: testLogger(t, peerID),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &kiosk{peerID: peerID, bus: bus, inputs: make(chan device.Input), cancel: cancel, done: make(chan error, 1)}
	d := &device.Daemon{Client: client, View: &device.LCDView{Screen: lcd}, Inputs: k.inputs, Logger: testLogger(t, peerID)}
	go func() { k.done <- d.Run(ctx) }()
	t.Cleanup(func() { k.stop(t) })
	return k
}

// stop ends the daemon (it closes its connection cleanly); a second call
// does nothing.
func (k *kiosk) stop(t *testing.T) {
	t.Helper()
	if k.cancel == nil {
		return
	}
	k.cancel()
	k.cancel = nil
	select {
	case err := <-k.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("kiosk %s: %v", k.peerID, err)
		}
	case <-time.After(waitLong):
		t.Errorf("kiosk %s did not stop within %v", k.peerID, waitLong)
	}
}

// send types text on the kiosk and sends it to the agent.
func (k *kiosk) send(t *testing.T, text string) {
	t.Helper()
	select {
	case k.inputs <- device.Input{Kind: device.InputSend, Text: text}:
	case <-time.After(waitLong):
		t.Fatalf("kiosk %s took no input within %v", k.peerID, waitLong)
	}
}

// glass is what the emulated LCD shows, rows joined by spaces with runs of
// spaces folded (a notice may wrap across rows).
func (k *kiosk) glass() string {
	return strings.Join(strings.Fields(strings.Join(k.bus.Text(), " ")), " ")
}

func testLogger(t *testing.T, who string) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("who", who)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// browser is one tab of the package's headless chromium, in a browser
// context of its own (cookies, storage and cache of its own, as a fresh
// profile would have), driven over the DevTools protocol.
type browser struct {
	t      *testing.T
	ctx    context.Context
	shots  string
	output *syncbuf.Buffer
}

// chromiumProc is the package's one headless chromium: started by the
// first test that needs it (again if it died), stopped by TestMain.
// Starting chromium takes seconds on a loaded 2-core machine; a tab in
// a new browser context takes a fraction of one.
var chromiumProc struct {
	mu   sync.Mutex
	ctx  context.Context // the browser's own context; done when it died
	stop func()          // closes it and removes its profile
	out  *syncbuf.Buffer
}

// sharedChromium returns the running chromium's context, starting it
// when none runs.
func sharedChromium(execPath string) (context.Context, *syncbuf.Buffer, error) {
	c := &chromiumProc
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx != nil && c.ctx.Err() == nil {
		return c.ctx, c.out, nil
	}
	if c.stop != nil {
		c.stop()
	}
	out := &syncbuf.Buffer{Max: 1 << 20}
	// A fresh profile, removed after chromium has exited (its helper
	// processes may still write to it for a moment, so not a TempDir).
	profile, err := os.MkdirTemp("", "kiosk-e2e-chromium-")
	if err != nil {
		return nil, nil, err
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(execPath),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), // root in a container: chromium's sandbox cannot start
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), // containers' /dev/shm is often 64 MB: chromium's tabs crash in it
		// Several tests' tabs at once: none is throttled as a tab in
		// the background would be.
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		// A name rebound to the loopback for the DNS rebinding test
		// (TestCrossOriginPageCannotActAsOperator); no other test uses it.
		chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1100),
		chromedp.CombinedOutput(out),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "could not unmarshal event") {
			fmt.Fprintln(out, "chromedp: "+msg) // (events newer than chromedp's protocol tables are not errors)
		}
	}))
	stop := func() {
		_ = chromedp.Cancel(ctx) // closes the browser, waits for it
		cancelCtx()
		cancelAlloc()
		_ = testwait.Poll(context.Background(), 10*time.Second, func() error { return os.RemoveAll(profile) })
	}
	// The first Run starts chromium; it must get the browser's own
	// context (cancelling a derived one would close its first tab).
	// chromedp bounds the start itself (20 s for DevTools to answer).
	if err := chromedp.Run(ctx); err != nil {
		stop()
		return nil, nil, fmt.Errorf("starting chromium %s: %w\n%s", execPath, err, out.String())
	}
	c.ctx, c.stop, c.out = ctx, stop, out
	return ctx, out, nil
}

// stopChromium stops the package's chromium, if it runs.
func stopChromium() {
	c := &chromiumProc
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		c.stop()
		c.stop, c.ctx = nil, nil
	}
}

// startBrowser opens a tab in a new browser context of the package's
// chromium (starting it if need be), 1280 x 1100 CSS pixels, closed
// when the test ends.
func startBrowser(t *testing.T, execPath string) *browser {
	t.Helper()
	return startBrowserSized(t, execPath, 1280, 1100)
}

// startBrowserSized is startBrowser with a window (the page's viewport)
// of width x height CSS pixels.
func startBrowserSized(t *testing.T, execPath string, width, height int) *browser {
	t.Helper()
	// chromium's windows are at least 500 px wide: what --window-size
	// gave these tests when they asked for 400.
	width = max(width, 500)
	parent, out, err := sharedChromium(execPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := chromedp.NewContext(parent, chromedp.WithNewBrowserContext())
	t.Cleanup(func() {
		if err := chromedp.Cancel(ctx); err != nil { // closes the tab and its browser context
			t.Logf("closing the tab: %v", err)
		}
		cancel()
	})
	b := &browser{t: t, ctx: ctx, shots: t.ArtifactDir(), output: out}
	// The first Run opens the tab; it must get the tab's own context.
	// The page is given the focus, as the window in front has it.
	if err := chromedp.Run(ctx, chromedp.EmulateViewport(int64(width), int64(height)), emulation.SetFocusEmulationEnabled(true)); err != nil {
		t.Fatalf("opening a tab in chromium: %v\n%s", err, out.String())
	}
	t.Logf("screenshots go to %s (kept with go test -artifacts)", b.shots)
	t.Cleanup(func() {
		if t.Failed() {
			b.screenshot("failure")
			var page string
			_ = b.run("dumping the page", chromedp.Evaluate(`document.body ? document.body.innerText : ''`, &page))
			t.Logf("page text at failure:\n%s\nchromium output:\n%s", page, out.String())
		}
	})
	return b
}

// run runs actions with the test's bound on waiting.
func (b *browser) run(what string, actions ...chromedp.Action) error {
	ctx, cancel := context.WithTimeout(b.ctx, waitLong)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (b *browser) must(what string, actions ...chromedp.Action) {
	b.t.Helper()
	if err := b.run(what, actions...); err != nil {
		b.t.Fatal(err)
	}
}

// waitFor polls a JavaScript expression in the page until it is true.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	var ok bool
	b.must("waiting until "+what, chromedp.Poll(expr, &ok, chromedp.WithPollingTimeout(waitLong), chromedp.WithPollingInterval(100*time.Millisecond)))
}

func (b *browser) screenshot(name string) {
	var png []byte
	if err := b.run("screenshot "+name, chromedp.CaptureScreenshot(&png)); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.saveShot(name, png)
}

// saveShot keeps a screenshot with the test's artifacts.
func (b *browser) saveShot(name string, png []byte) {
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: %s", path)
}

// mirror is the console's LCD mirror, one string per row.
func (b *browser) mirror() ([]string, string, error) {
	var rows []string
	var light string
	err := b.run("reading the LCD mirror",
		chromedp.Evaluate(`Array.from(document.querySelectorAll('#lcd [data-testid=lcd-row]')).map(r => r.textContent)`, &rows),
		chromedp.Evaluate(`document.getElementById('lcd').dataset.backlight || ''`, &light))
	return rows, light, err
}

// sameScreen: the mirror shows what the glass shows, cell by cell
// (trailing blanks aside; a custom CGRAM glyph, ⓪-⑦ on the glass, may be
// drawn otherwise).
func sameScreen(glass, mirror []string) bool {
	if len(glass) != len(mirror) {
		return false
	}
	for i := range glass {
		g, m := []rune(strings.TrimRight(glass[i], " ")), []rune(strings.TrimRight(mirror[i], " "))
		if len(g) != len(m) {
			return false
		}
		for j := range g {
			if g[j] != m[j] && !strings.ContainsRune("⓪①②③④⑤⑥⑦", g[j]) {
				return false
			}
		}
	}
	return true
}

// setValue sets a form control's value as typing would (chromedp's
// SetValue refuses some inputs).
func setValue(sel, value string) chromedp.Action {
	return chromedp.Evaluate(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q; e.dispatchEvent(new Event('input', {bubbles: true})); return true })()`, sel, value), nil)
}

// clickListed clicks the element sel names once it exists, finding and
// clicking it in one task of the page's event loop. For items of lists
// the console re-draws as the fleet changes (peer rows, notices,
// rollouts): chromedp.Click finds a node, then clicks it by id, and a
// re-draw in between leaves it clicking a node that is gone ("Could not
// find node with given id", stress run 21). For every button of a page
// that still fills in too: chromedp.Click clicks where the node was,
// and a section drawn above it meanwhile takes the click (the diag
// buttons at 400 px, stress run 41). Only the login page, drawn once,
// is clicked by position.
func clickListed(sel string) chromedp.Action {
	var clicked bool
	return chromedp.Poll(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel),
		&clicked, chromedp.WithPollingTimeout(waitLong), chromedp.WithPollingInterval(100*time.Millisecond))
}

// eventShown: the live event list has an event of that name for peer.
func eventShown(name, peer string) string {
	return fmt.Sprintf(`Array.from(document.querySelectorAll('#events [data-event=%q]')).some(e => e.textContent.includes(%q))`, name, "peer "+peer)
}

func peerRow(peerID string, online bool) string {
	return fmt.Sprintf(`!!document.querySelector('[data-testid=peer-row][data-peer-id=%q][data-online="%t"]')`, peerID, online)
}

// TestConsoleInChromium is issue 13's real-browser test: an operator logs
// in to the console, sees both kiosks online, sends a notice to one tag,
// sees it on that kiosk's LCD and in the console's mirror of it (and not
// on the other kiosk), and sees a stopped kiosk go offline.
func TestConsoleInChromium(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	addr := startServer(t)
	base := "http://" + addr

	// The API is closed without the token (so the console's login is what opens it).
	resp, err := http.Get(base + "/api/channels")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/channels without a token: status %d, want 401", resp.StatusCode)
	}

	lobby := startKiosk(t, addr, "kiosk-lobby", map[string]string{"site": "lobby"})
	shop := startKiosk(t, addr, "kiosk-shop", map[string]string{"site": "shop"})

	b := startBrowser(t, chromium)

	// A wrong token is refused, plainly.
	b.must("opening the console", chromedp.Navigate(base+"/"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.must("logging in with a wrong token", chromedp.SendKeys(`#token`, "not-the-token", chromedp.ByQuery), chromedp.Click(`#login-button`, chromedp.ByQuery))
	b.waitFor("the wrong token is refused, in the API's words", `document.getElementById('login-error').textContent.includes('the bearer token is not a configured admin token')`)
	b.screenshot("00-login-refused")

	// Log in; both kiosks are online.
	b.must("logging in", setValue(`#token`, ""), chromedp.SendKeys(`#token`, adminToken, chromedp.ByQuery),
		chromedp.Click(`#login-button`, chromedp.ByQuery))
	b.waitFor("the fleet is shown", `!document.getElementById('fleet-view').hidden`)
	b.waitFor("the live stream is connected", `document.getElementById('stream-state').textContent === 'live'`)
	b.waitFor("both kiosks are online", peerRow("kiosk-lobby", true)+" && "+peerRow("kiosk-shop", true))
	// They connected before the login: their events come from the recent ones.
	b.waitFor("the event list shows both connections", eventShown("terminal_connected", "kiosk-lobby")+" && "+eventShown("terminal_connected", "kiosk-shop"))
	var stored string
	b.must("reading sessionStorage", chromedp.Evaluate(`sessionStorage.getItem('termlink.console.token') + '|' + (localStorage.length)`, &stored))
	if stored != adminToken+"|0" {
		t.Errorf("token storage: sessionStorage|localStorage.length = %q, want the token in sessionStorage only", stored)
	}
	b.screenshot("01-fleet")

	// The lobby kiosk's user talks to the agent (its page shows the conversation).
	lobby.send(t, "where is room 4")

	// Send a notice to the tag site:lobby.
	const text = "Lobby closes 18h"
	b.must("sending a notice to site:lobby",
		clickListed(`[data-testid=target-tag]`),
		chromedp.SendKeys(`#notice-tag`, "site:lobby", chromedp.ByQuery),
		chromedp.SendKeys(`#notice-text`, text, chromedp.ByQuery),
		setValue(`#notice-form [name=display_seconds]`, "120"),
		clickListed(`#notice-send`))
	b.waitFor("the console confirms the notice", `/queued for 1 device \(1 online\)/.test(document.getElementById('notice-result').textContent)`)
	b.screenshot("02-notice-sent")

	// The lobby kiosk's glass shows it.
	testwait.UntilOK(t, "the notice on kiosk-lobby's LCD", func() error {
		if !strings.Contains(lobby.glass(), text) {
			return fmt.Errorf("it shows:\n%s", lobby.bus.Render())
		}
		return nil
	})
	t.Logf("kiosk-lobby's LCD:\n%s", lobby.bus.Render())

	// The console's mirror of that kiosk shows the same screen.
	b.must("opening kiosk-lobby's page", clickListed(`[data-peer-id="kiosk-lobby"] a`))
	b.waitFor("the device page is shown", `!document.getElementById('peer-view').hidden`)
	var light string
	testwait.UntilOK(t, "the console's mirror of kiosk-lobby showing the notice as the LCD does", func() error {
		var rows []string
		var err error
		rows, light, err = b.mirror()
		if err != nil {
			t.Fatal(err)
		}
		glass := lobby.bus.Text()
		if !strings.Contains(strings.Join(strings.Fields(strings.Join(rows, " ")), " "), text) || !sameScreen(glass, rows) {
			return fmt.Errorf("mirror: %q\nglass:  %q", rows, glass)
		}
		return nil
	})
	if want := map[bool]string{true: "on", false: "off"}[lobby.bus.State().Backlight]; light != want && light != "dim" {
		t.Errorf("mirror backlight %q, the LCD's is %q", light, want)
	}
	b.waitFor("the page shows the conversation", `Array.from(document.querySelectorAll('#conversation [data-role=user]')).some(e => e.textContent.includes('where is room 4')) && !!document.querySelector('#conversation [data-role=assistant]')`)
	b.screenshot("03-lobby-mirror")

	// Only the tag's kiosk got it.
	if g := shop.glass(); strings.Contains(g, text) {
		t.Errorf("kiosk-shop (site:shop) shows the notice sent to site:lobby:\n%s", shop.bus.Render())
	}

	// Stop the shop kiosk: the console shows it offline.
	b.must("back to the fleet", clickListed(`#back`))
	shop.stop(t)
	b.waitFor("kiosk-shop goes offline", peerRow("kiosk-shop", false)+" && "+peerRow("kiosk-lobby", true))
	b.waitFor("the live events show it leaving", eventShown("terminal_disconnected", "kiosk-shop"))
	b.screenshot("04-shop-offline")

	// A notice for the offline kiosk waits in its mailbox, listed on its
	// page, until the operator withdraws it.
	const later = "Shop opens 9h"
	b.must("sending a notice from kiosk-shop's page",
		clickListed(`[data-peer-id="kiosk-shop"] a`),
		chromedp.WaitVisible(`#peer-notice-text`, chromedp.ByQuery),
		chromedp.SendKeys(`#peer-notice-text`, later, chromedp.ByQuery),
		clickListed(`#peer-notice-form button[type=submit]`))
	b.waitFor("the console confirms it is queued for the offline kiosk", `/queued for 1 device \(0 online\)/.test(document.querySelector('#peer-notice-form .result').textContent)`)
	pending := fmt.Sprintf(`Array.from(document.querySelectorAll('[data-testid=peer-notice][data-state=pending]')).some(e => e.textContent.includes(%q))`, later)
	b.waitFor("the notice is listed as pending", pending)
	b.screenshot("05-shop-pending")
	b.must("withdrawing it", clickListed(`[data-testid=peer-notice][data-state=pending] button`))
	b.waitFor("the notice is gone from the page", "!("+pending+")")
	b.screenshot("06-shop-withdrawn")
	req, err := http.NewRequest(http.MethodGet, base+"/api/channels/"+channelID+"/peers/kiosk-shop/notices", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var left struct {
		Notices []struct {
			Text string `json:"text"`
		} `json:"notices"`
	}
	err = json.NewDecoder(resp.Body).Decode(&left)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(left.Notices) != 0 {
		t.Errorf("kiosk-shop's pending notices after the withdraw: status %d, %+v, %v; want none", resp.StatusCode, left.Notices, err)
	}
}

// Without admin tokens the API answers loopback clients only, and the
// console opened on the server's own machine needs no login (as
// termrig demo --kiosk runs it).
func TestConsoleWithoutTokens(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	srv := servertest.Start(t, nil)
	startKiosk(t, srv.Addr, "kiosk-1", map[string]string{"site": "lab"})
	b := startBrowser(t, chromium)
	b.must("opening the console", chromedp.Navigate("http://"+srv.Addr+"/"))
	b.waitFor("the fleet is shown without a login", `!document.getElementById('fleet-view').hidden && document.getElementById('login-view').hidden`)
	b.waitFor("the kiosk is online", peerRow("kiosk-1", true))
	b.screenshot("fleet-without-tokens")
}

// A device asking to be paired (enrollment by code) is listed in the
// console, the operator approves it there with a peer id and tags, and
// the device then collects its token with its device code, for that
// peer id.
func TestConsoleApprovesPairing(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	srv := servertest.Start(t, func(c *config.Config) {
		ch := c.Channels[channelID]
		ch.Config.Enrollment = true
		c.Channels[channelID] = ch
	})
	base := "http://" + srv.Addr
	post := func(path string, body any, into any) int {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(base+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if into != nil {
			if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
				t.Fatalf("POST %s: %v", path, err)
			}
		}
		return resp.StatusCode
	}
	var grant enroll.Grant
	if st := post("/api/channels/"+channelID+"/enroll", map[string]string{"device_name": "lobby-pi"}, &grant); st != http.StatusOK || grant.Code == "" {
		t.Fatalf("enroll: status %d, %+v", st, grant)
	}
	// The device polls while it waits, as a real one does (the server
	// drops a code nobody polls for 3 intervals), every interval the
	// grant says, until the operator approves it: its first poll after
	// the approval collects the token, and the console then drops the
	// code from its list, result line and all (under load that came
	// before the test had read the line: the test was wrong). So its
	// last poll comes just before the approval, and it collects after
	// the console said it is approved (an approved code is kept until
	// collected).
	endpoint := base + "/api/channels/" + channelID + "/enroll"
	interval := time.Duration(grant.Interval) * time.Second
	poll := func() error {
		if st, answer := pollToken(endpoint, grant.DeviceCode); st != http.StatusBadRequest || answer != enroll.Pending {
			return fmt.Errorf("polling before the approval: HTTP %d %q, want %s", st, answer, enroll.Pending)
		}
		return nil
	}
	stopPolls, pollsDone := make(chan struct{}), make(chan error, 1)
	var lastPoll time.Time // the poller's; read after pollsDone
	go func() {
		lastPoll = time.Now() // the grant
		for {
			select {
			case <-stopPolls:
				pollsDone <- nil
				return
			case <-time.After(time.Until(lastPoll.Add(interval))):
			}
			err := poll()
			lastPoll = time.Now()
			if err != nil {
				pollsDone <- err
				return
			}
		}
	}()
	b := startBrowser(t, chromium)
	b.must("opening the console", chromedp.Navigate(base+"/"))
	item := fmt.Sprintf(`[data-testid=pairing-request][data-code=%q]`, grant.Code)
	b.waitFor("the pairing request is listed", fmt.Sprintf(`!!document.querySelector(%q)`, item))
	b.screenshot("pairing-listed")
	close(stopPolls)
	if err := <-pollsDone; err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(lastPoll.Add(interval))) // the device's poll interval
	if err := poll(); err != nil {
		t.Fatal(err)
	}
	// One task of the page's event loop: the poll just made re-draws the
	// pairing list when the console hears of it, and a click by node id
	// (chromedp.Click) once landed on a node that draw had replaced
	// ("Could not find node with given id", stress run 21).
	b.must("approving it as lobby-1", chromedp.Evaluate(fmt.Sprintf(`(() => {
		const it = document.querySelector(%q);
		for (const [id, v] of [['pair-peer', 'lobby-1'], ['pair-tags', 'site:hq']]) {
			const e = it.querySelector('[data-testid=' + id + ']');
			e.value = v;
			e.dispatchEvent(new Event('input', {bubbles: true}));
		}
		it.querySelector('[data-testid=pair-approve]').click();
		return true
	})()`, item), nil))
	b.waitFor("the console says it is approved", fmt.Sprintf(`/Approved as lobby-1/.test(document.querySelector(%q).textContent)`, item+` [data-testid=pair-result]`))
	b.screenshot("pairing-approved")
	wctx, stopWaiting := context.WithTimeout(context.Background(), waitLong)
	defer stopWaiting()
	if tr, err := (enroll.Client{Endpoint: endpoint}).Wait(wctx, grant); err != nil || tr.Token == "" || tr.PeerID != "lobby-1" {
		t.Fatalf("collecting the token: %v, peer %q, token given %v; want lobby-1", err, tr.PeerID, tr.Token != "")
	}
	b.waitFor("the collected code leaves the list", fmt.Sprintf(`!document.querySelector(%q)`, item))
}

// pollToken is one poll of a device for its token at the enroll
// endpoint: the status and the error code of the answer ("" with the
// token).
func pollToken(endpoint, deviceCode string) (int, string) {
	body, _ := json.Marshal(enroll.TokenRequest{DeviceCode: deviceCode})
	resp, err := http.Post(endpoint+"/token", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var answer enroll.ErrorResponse
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	return resp.StatusCode, answer.Error
}
