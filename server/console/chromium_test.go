package console_test

// The console in a real browser: Debian's headless Chromium driven with
// chromedp against a real termserver (servertest) and a device speaking
// the real link protocol. The fleet's end-to-end browser tests live in
// testrig/kiosk; these are the console's own layout and form checks.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/servertest"
	"termlink/testrig/fleetsim"
)

const (
	operatorToken = "console-test-operator-token-0123"
	channelID     = "terminal-dev"
)

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
	msg := "chromium not found on PATH (Debian: apt-get install chromium): the console's real-browser tests cannot run"
	if os.Getenv("CI_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg + " and CI_REQUIRE_TOOLS=1")
	}
	t.Skip(msg)
	return ""
}

// startOperatorServer runs termserver (channel terminal-dev, the echo
// agent) with one operator token, given as its sha256 digest.
func startOperatorServer(t *testing.T) (addr string) {
	t.Helper()
	sum := sha256.Sum256([]byte(operatorToken))
	admin, err := config.Parse([]byte(`{
		"channels": {"terminal-dev": {"enabled": true, "kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "echo"}},
		"admin": {"tokens": [{"token": "sha256:` + hex.EncodeToString(sum[:]) + `", "role": "operator", "name": "console-test"}]}}`))
	if err != nil {
		t.Fatalf("admin config: %v", err)
	}
	return servertest.Start(t, func(c *config.Config) { c.Admin = admin.Admin }).Addr
}

// operatorDo is an operator's API call: the status and the body.
func operatorDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// browser is a tab of a headless chromium of the test's own, closed (and
// its profile removed) when the test ends.
type browser struct {
	t   *testing.T
	ctx context.Context
	out *syncbuf.Buffer
}

func startBrowser(t *testing.T, execPath string) *browser {
	t.Helper()
	out := &syncbuf.Buffer{Max: 1 << 20}
	// A fresh profile, removed after chromium has exited (its helper
	// processes may still write to it for a moment, so not a TempDir).
	profile, err := os.MkdirTemp("", "console-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(execPath),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), // root in a container: chromium's sandbox cannot start
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// No scrollbar takes from the layout: the page is exactly as wide
		// as the viewport when nothing widens it.
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1000),
		chromedp.CombinedOutput(out),
	)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "could not unmarshal event") {
			fmt.Fprintln(out, "chromedp: "+msg) // (events newer than chromedp's protocol tables are not errors)
		}
	}))
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx) // closes the browser, waits for it
		cancel()
		cancelAlloc()
		_ = testwait.Poll(context.Background(), 10*time.Second, func() error { return os.RemoveAll(profile) })
	})
	b := &browser{t: t, ctx: ctx, out: out}
	// The first Run starts chromium (chromedp bounds its start) and must
	// get the browser's own context.
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("starting chromium %s: %v\n%s", execPath, err, out.String())
	}
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

// run runs actions with testwait's bound on waiting.
func (b *browser) run(what string, actions ...chromedp.Action) error {
	ctx, cancel := context.WithTimeout(b.ctx, testwait.Deadline)
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
	b.must("waiting until "+what, chromedp.Poll(expr, &ok, chromedp.WithPollingTimeout(testwait.Deadline), chromedp.WithPollingInterval(50*time.Millisecond)))
}

// viewport makes the page width x height CSS pixels (a phone's width
// too: emulated, not the window's, which chromium keeps 500 px or more).
func (b *browser) viewport(width, height int) {
	b.t.Helper()
	b.must(fmt.Sprintf("a %dx%d viewport", width, height), emulation.SetDeviceMetricsOverride(int64(width), int64(height), 1, false))
	b.waitFor(fmt.Sprintf("the page is %d px wide", width), fmt.Sprintf(`window.innerWidth === %d`, width))
}

func (b *browser) login(base string) {
	b.t.Helper()
	b.must("opening the console", chromedp.Navigate(base+"/"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.must("logging in", chromedp.SendKeys(`#token`, operatorToken, chromedp.ByQuery), chromedp.Click(`#login-button`, chromedp.ByQuery))
}

// waitAll waits until every condition (name: JavaScript expression) is
// true, and names those that are not when it gives up.
func (b *browser) waitAll(what string, conds map[string]string) {
	b.t.Helper()
	var parts []string
	for name, expr := range conds {
		parts = append(parts, fmt.Sprintf("[%q, () => (%s)]", name, expr))
	}
	js := "[" + strings.Join(parts, ", ") + "].filter(([, f]) => !f()).map(([n]) => n)"
	testwait.UntilOK(b.t, what, func() error {
		var missing []string
		if err := b.run("reading the page", chromedp.Evaluate(js, &missing)); err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("not yet: %s", strings.Join(missing, ", "))
		}
		return nil
	})
}

func (b *browser) screenshot(name string) {
	var png []byte
	if err := b.run("screenshot "+name, chromedp.FullScreenshot(&png, 100)); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(b.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: %s (kept with go test -artifacts)", path)
}

// widthJS is the page's width as the browser lays it out, and what
// reaches past the window's right edge.
const widthJS = `(() => {
	const w = window.innerWidth;
	const wide = Array.from(document.querySelectorAll('body *')).filter(e => {
		const r = e.getBoundingClientRect();
		return r.width && r.height && !e.closest('.sr-only') && r.right > w + 0.5;
	}).slice(0, 8).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className ? '.' + String(e.className).replace(/ /g, '.') : '') +
		' right=' + Math.round(e.getBoundingClientRect().right));
	return {viewport: w, scrollWidth: document.documentElement.scrollWidth, wide};
})()`

type pageWidth struct {
	Viewport    int      `json:"viewport"`
	ScrollWidth int      `json:"scrollWidth"`
	Wide        []string `json:"wide"`
}

// checkWidth fails the test when the page is wider than its viewport,
// width px.
func (b *browser) checkWidth(width int, what string) {
	b.t.Helper()
	var w pageWidth
	b.must("measuring the page", chromedp.Evaluate(widthJS, &w))
	if w.Viewport != width {
		b.t.Fatalf("%s: the viewport is %d px wide, want %d", what, w.Viewport, width)
	}
	if w.ScrollWidth != w.Viewport || len(w.Wide) > 0 {
		b.t.Errorf("%s: the page is %d px wide in a %d px viewport; past its right edge: %s", what, w.ScrollWidth, w.Viewport, strings.Join(w.Wide, ", "))
	}
}

// longWord is n characters without a place to break.
func longWord(prefix string, n int) string {
	return prefix + strings.Repeat("x", n-len(prefix))
}

// longLog is a device's log as a newcomer's termd printed it: long
// key=value lines, and tokens (a path, a base64 blob) with no break in
// them.
func longLog(peer string) string {
	var sb strings.Builder
	for i := range 12 {
		fmt.Fprintf(&sb, "time=2025-01-02T03:04:%02d.000Z level=INFO msg=\"link up\" peer_id=%s", i, peer)
		for j := range 40 {
			fmt.Fprintf(&sb, " field_%d=value-%d", j, j)
		}
		sb.WriteString("\n")
		fmt.Fprintf(&sb, "level=WARN msg=\"blob\" data=%s\n", strings.Repeat("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo", 40))
	}
	return sb.String()
}

// startDevice connects a device that answers a log request with
// longLog. A plain one has ordinary fields, as in issue 40; a long one has
// every field as long as the server takes: a 128-character peer id, a
// long name, version and board, tags with 128-character values, a screen
// of long rows; it refuses the settings pushed to it with a long reason
// and fails an update with a long reason. It stops when the test ends.
func startDevice(t *testing.T, addr, peerID string, long bool) *link.Client {
	t.Helper()
	cfg := link.ClientConfig{
		URL:    "ws://" + addr + "/api/channels/" + channelID + "/ws",
		PeerID: peerID, DeviceName: "Lobby kiosk", StateDir: t.TempDir(),
		Board: "sim", Version: "v1.4.2", Platform: "linux/arm/6", Tags: map[string]string{"site": "lobby"},
		Capabilities: append(link.DefaultCapabilities(), link.CapNotice, link.CapScreen, link.CapDiag, link.CapSettings, link.CapUpdate),
		RetryInitial: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
	}
	if long {
		cfg.DeviceName, cfg.Board, cfg.Version = longWord("lobby-kiosk-name-", 120), longWord("board-", 60), longWord("v0.0.0-", link.MaxVersionBytes)
		cfg.Tags = map[string]string{
			"site":                 longWord("lobby-", 128),
			longWord("key-", 64):   longWord("value-", 128),
			"floor":                "2",
			longWord("other-", 60): strings.Repeat("a b ", 32),
		}
	}
	settingsError := "idle_text: " + longWord("the-display-cannot-show-", 300) + " " + strings.Repeat("and a long explanation ", 20)
	client, err := link.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = client.Run(ctx) }()
	go func() { // until the client stops: Fleet is closed
		defer wg.Done()
		for f := range client.Fleet() {
			switch q := f.(type) {
			case *link.Diag:
				res := &link.DiagResult{RequestID: q.RequestID, Kind: q.Kind, OK: true, Text: longLog(peerID)}
				if q.Kind != link.DiagLogs {
					res.Text = "selftest: PASS\n"
				}
				_ = client.Report(res)
			case *link.Settings:
				if !long {
					_ = client.Report(&link.SettingsAck{Version: q.Version})
					continue
				}
				_ = client.Report(&link.SettingsAck{Version: q.Version, Error: settingsError})
			case *link.Update:
				_ = client.Report(&link.UpdateStatus{UpdateID: q.UpdateID, Version: q.Version, Running: cfg.Version, State: link.UpdateFailed,
					Reason: "install: " + longWord("/var/lib/termlink/releases/", 400) + " " + strings.Repeat("could not be written ", 20)})
			}
		}
	}()
	t.Cleanup(func() { cancel(); _ = client.Close(); wg.Wait() })
	if long {
		client.SetScreen(link.Screen{Rows: []string{longWord("row-", 200), strings.Repeat("word ", 40)}})
	} else {
		client.SetScreen(link.Screen{Rows: []string{"Welcome", "press a key"}})
	}
	return client
}

// waitOnline waits until the server lists peer online on the channel.
func waitOnline(t *testing.T, base, peer string) {
	t.Helper()
	testwait.UntilOK(t, peer+" online", func() error {
		status, body := operatorDo(t, http.MethodGet, base+"/api/channels/"+channelID+"/peers/"+peer, "")
		var p struct{ Online bool }
		_ = json.Unmarshal([]byte(body), &p)
		if status != http.StatusOK || !p.Online {
			return fmt.Errorf("HTTP %d: %.300s", status, body)
		}
		return nil
	})
}

// Issue 40, row 3: pressing Log on a device page made the page 1,841 px
// wide at 400 px (1,913 px at 1280): the log's long lines widened every
// card and pushed the device's facts off-screen. A device's log of long
// lines and unbroken tokens stays in its card: the page is exactly as
// wide as the viewport at 400 and 1280 px before and after Log, and the
// device's facts stay on screen. So does every other card when all the
// device shows is as long as the server takes it (peer id, name, tags,
// version, a failed update of a long-named release and its reason, a
// refused settings push and its reason, a pending notice, the
// conversation, its events), and the fleet page with that device and its
// rollout, paused by its failure, with the rollout's devices open.
func TestConsoleLongContentFits(t *testing.T) {
	chromium := chromiumPath(t)
	addr := startOperatorServer(t)
	base := "http://" + addr
	plain := "kiosk-lobby"
	startDevice(t, addr, plain, false)
	peer := longWord("kiosk-", 128)
	client := startDevice(t, addr, peer, true)
	waitOnline(t, base, plain)
	waitOnline(t, base, peer)

	// What the device page shows of it besides its own fields: a refused
	// settings push (with long tags), a pending notice, a conversation, a
	// failed update.
	if status, body := operatorDo(t, http.MethodPut, base+"/api/channels/"+channelID+"/settings/peers/"+peer,
		`{"idle_text":"`+longWord("Welcome-", 200)+`","tags":{"site":"`+longWord("hall-", 128)+`"}}`); status/100 != 2 {
		t.Fatalf("pushing settings: HTTP %d %s", status, body)
	}
	if status, body := operatorDo(t, http.MethodPost, base+"/api/channels/"+channelID+"/peers/"+peer+"/notices",
		`{"text":"`+longWord("notice-", 900)+`"}`); status/100 != 2 {
		t.Fatalf("sending a notice: HTTP %d %s", status, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	if _, err := client.Send(ctx, longWord("question-", 1500)); err != nil {
		t.Fatalf("sending a message: %v", err)
	}
	release := longWord("v0.0.1-", 64)
	if _, err := fleetsim.Upload(ctx, base, operatorToken, t.TempDir(), release, "linux/arm/6", []byte("termd")); err != nil {
		t.Fatal(err)
	}
	if status, body := operatorDo(t, http.MethodPost, base+"/api/channels/"+channelID+"/rollouts",
		`{"version":"`+release+`","peers":["`+peer+`"],"canary":0}`); status != http.StatusCreated {
		t.Fatalf("starting a rollout: HTTP %d %s", status, body)
	}

	b := startBrowser(t, chromium)
	b.login(base)
	for _, width := range []int{400, 1280} {
		b.viewport(width, 900)

		// Issue 40's own case: an ordinary device, its long log.
		b.must("opening the plain device", chromedp.Evaluate(`location.hash = '#/peer/`+channelID+`/`+plain+`'`, nil))
		b.waitFor("its page", `document.getElementById('peer-title').textContent.startsWith('`+plain+`') &&
			document.getElementById('peer-info').textContent.includes('v1.4.2')`)
		b.checkWidth(width, fmt.Sprintf("%d px, an ordinary device's page", width))
		b.pressLog(width, "an ordinary device's page")
		b.screenshot(fmt.Sprintf("%dpx-plain-device-log", width))

		b.must("opening the fleet", chromedp.Evaluate(`location.hash = '#/'`, nil))
		b.waitFor("the fleet with the devices and the paused rollout", fmt.Sprintf(`document.getElementById('fleet-count').textContent === '2 of 2 online' &&
			!!document.querySelector('[data-testid=rollout][data-state=paused]') && !!document.querySelector('#rollout-version option[value=%q]')`, release))
		b.must("opening the rollout's devices", chromedp.Evaluate(`(() => { const t = document.querySelector('[data-testid=rollout][data-state=paused] [data-testid=rollout-toggle]');
			if (t.getAttribute('aria-expanded') !== 'true') t.click(); return true })()`, nil))
		b.waitFor("the rollout's devices", `!!document.querySelector('[data-testid=rollout-device][data-state=failed]')`)
		b.checkWidth(width, fmt.Sprintf("%d px, the fleet page", width))
		b.screenshot(fmt.Sprintf("%dpx-fleet", width))

		b.must("opening the long device", chromedp.Evaluate(`location.hash = '#/peer/`+channelID+`/`+peer+`'`, nil))
		b.waitAll("its page with every card filled", map[string]string{
			"the failed update":    `document.getElementById('peer-info').textContent.includes('failed')`,
			"the refused settings": `document.getElementById('settings-status').textContent.includes('refused')`,
			"the pending notice":   `!!document.querySelector('[data-testid=peer-notice]')`,
			"the conversation":     `!!document.querySelector('[data-testid=message]')`,
			"its events":           `document.querySelectorAll('#peer-events li').length > 0`,
			"its screen":           `document.getElementById('lcd').textContent.includes('row-')`,
		})
		b.checkWidth(width, fmt.Sprintf("%d px, the long device's page", width))
		b.pressLog(width, "the long device's page")
		b.screenshot(fmt.Sprintf("%dpx-long-device-log", width))
	}
}

// pressLog presses Log on the open device page and checks the page's width
// with the log shown: the log in its card, the device's facts on screen.
func (b *browser) pressLog(width int, what string) {
	b.t.Helper()
	b.must("asking for its log", chromedp.Evaluate(`document.getElementById('diag-logs').click()`, nil))
	b.waitFor("the log is shown", `!document.getElementById('diag-output').hidden &&
		document.getElementById('diag-output').textContent.includes('QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo') &&
		document.getElementById('diag-status').textContent.startsWith('The last ')`)
	b.checkWidth(width, fmt.Sprintf("%d px, %s with its log", width, what))
	var inside bool
	b.must("placing the log and the facts", chromedp.Evaluate(`(() => {
		const out = document.getElementById('diag-output').getBoundingClientRect();
		const card = document.getElementById('diag-output').closest('.card').getBoundingClientRect();
		const info = document.getElementById('peer-info').getBoundingClientRect();
		return out.left >= card.left && out.right <= card.right && info.left >= 0 && info.right <= window.innerWidth;
	})()`, &inside))
	if !inside {
		b.t.Errorf("%d px, %s: the log leaves its card or the device's facts leave the window", width, what)
	}
}

// Issue 40, deliver 3: the release selector for starting a rollout
// offers the newest release first and chooses it, by semantic version
// (1.10.0 after 1.9.0, a release after its release candidates), neither
// the first uploaded nor the first by name (which was chosen: a
// downgrade). A release chosen by the operator stays chosen when the list
// is read again.
func TestConsoleRolloutDefaultsToNewestRelease(t *testing.T) {
	chromium := chromiumPath(t)
	addr := startOperatorServer(t)
	base := "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	// Uploaded in this order: the newest is neither first nor last, by
	// upload or by name (by name: v0.9.0, v1.10.0, v1.10.0-rc.1, v1.2.0,
	// v1.9.0, vnext).
	uploads := []struct{ version, platform string }{
		{"v1.2.0", "linux/arm/6"},
		{"v1.10.0-rc.1", "linux/arm/6"},
		{"v1.10.0", "linux/arm/6"},
		{"v1.10.0", "linux/arm64"},
		{"v0.9.0", "linux/arm/6"},
		{"v1.9.0", "linux/arm/6"},
		{"vnext", "linux/arm/6"}, // not a version that orders: offered last
	}
	dir := t.TempDir()
	for _, u := range uploads {
		if _, err := fleetsim.Upload(ctx, base, operatorToken, dir, u.version, u.platform, []byte("termd "+u.version)); err != nil {
			t.Fatal(err)
		}
	}
	b := startBrowser(t, chromium)
	b.login(base)
	b.waitFor("the releases are offered", `document.querySelectorAll('#rollout-version option').length === 6`)
	var got struct {
		Value   string   `json:"value"`
		Options []string `json:"options"`
	}
	read := func() {
		b.must("reading the release selector", chromedp.Evaluate(`(() => {
			const sel = document.getElementById('rollout-version');
			return {value: sel.value, options: Array.from(sel.options).map(o => o.value)};
		})()`, &got))
	}
	read()
	if want := "v1.10.0"; got.Value != want {
		t.Errorf("the release selector chose %q, want the newest, %q (offered: %v)", got.Value, want, got.Options)
	}
	want := []string{"v1.10.0", "v1.10.0-rc.1", "v1.9.0", "v1.2.0", "v0.9.0", "vnext"}
	if strings.Join(got.Options, " ") != strings.Join(want, " ") {
		t.Errorf("the releases are offered as %v, want newest first: %v", got.Options, want)
	}
	var label string
	b.must("reading the chosen release's label", chromedp.Evaluate(`document.getElementById('rollout-version').selectedOptions[0].textContent`, &label))
	if label != "v1.10.0 (linux/arm/6, linux/arm64)" {
		t.Errorf("the chosen release reads %q, want %q", label, "v1.10.0 (linux/arm/6, linux/arm64)")
	}

	// The operator chooses an older one; a newer upload arrives and the
	// list is read again (as on any channel change): the choice stays.
	b.must("choosing v1.2.0", chromedp.Evaluate(`(() => { const s = document.getElementById('rollout-version'); s.value = 'v1.2.0';
		s.dispatchEvent(new Event('change', {bubbles: true})); return true })()`, nil))
	if _, err := fleetsim.Upload(ctx, base, operatorToken, dir, "v2.0.0", "linux/arm/6", []byte("termd v2.0.0")); err != nil {
		t.Fatal(err)
	}
	// The fleet page reads the releases when it is opened again.
	b.must("leaving the fleet page and coming back", chromedp.Evaluate(`location.hash = '#/peer/`+channelID+`/nobody'`, nil))
	b.waitFor("the device page", `!document.getElementById('peer-view').hidden`)
	b.must("opening the fleet page", chromedp.Evaluate(`location.hash = '#/'`, nil))
	b.waitFor("the new release is offered", `document.querySelectorAll('#rollout-version option').length === 7`)
	read()
	if got.Value != "v1.2.0" || got.Options[0] != "v2.0.0" {
		t.Errorf("after the operator chose v1.2.0 and v2.0.0 came: chosen %q, offered %v; want v1.2.0 still chosen, v2.0.0 first", got.Value, got.Options)
	}
	// A new page (a reload): the newest again.
	b.must("reloading", chromedp.Reload())
	b.waitFor("the releases are offered again", `document.querySelectorAll('#rollout-version option').length === 7`)
	read()
	if got.Value != "v2.0.0" {
		t.Errorf("after a reload the release selector chose %q, want the newest, v2.0.0", got.Value)
	}
}
