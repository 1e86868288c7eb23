package kiosk_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"termlink/device"
	"termlink/display"
	"termlink/display/console"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	console2 "termlink/server/console"
	"termlink/server/servertest"
)

// The console is checked at a desktop and a phone width.
var widths = []int{1280, 400}

const viewerToken = "e2e-viewer-token-0123456789"

// startRoleServer runs termserver with an operator and a viewer token.
func startRoleServer(t *testing.T) string {
	t.Helper()
	op, vw := sha256.Sum256([]byte(adminToken)), sha256.Sum256([]byte(viewerToken))
	admin, err := config.Parse([]byte(`{
		"channels": {"terminal-dev": {"enabled": true, "kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "echo"}},
		"admin": {"tokens": [
			{"token": "sha256:` + hex.EncodeToString(op[:]) + `", "role": "operator", "name": "otto"},
			{"token": "sha256:` + hex.EncodeToString(vw[:]) + `", "role": "viewer", "name": "vera"}]}}`))
	if err != nil {
		t.Fatalf("admin config: %v", err)
	}
	return servertest.Start(t, func(c *config.Config) { c.Admin = admin.Admin }).Addr
}

// holdingProxy passes everything to the server, but holds the live
// stream's request until release: the page is seen before its first data.
type holdingProxy struct {
	addr     string
	mu       sync.Mutex
	gate     chan struct{}
	held     int            // stream requests held at the gate now
	answered map[string]int // path -> requests answered since hold
}

func startHoldingProxy(t *testing.T, target string) *holdingProxy {
	t.Helper()
	u := &url.URL{Scheme: "http", Host: target}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // the event stream flows as it comes
	base := rp.Director
	rp.Director = func(r *http.Request) {
		base(r)
		r.Host = target // the server answers for its own address
		if r.Header.Get("Origin") != "" {
			r.Header.Set("Origin", "http://"+target)
		}
	}
	p := &holdingProxy{answered: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events/stream") {
			p.mu.Lock()
			gate := p.gate
			if gate != nil {
				p.held++
			}
			p.mu.Unlock()
			if gate != nil {
				select {
				case <-gate:
				case <-r.Context().Done():
				case <-time.After(waitLong):
				}
				p.mu.Lock()
				p.held--
				p.mu.Unlock()
				if r.Context().Err() != nil {
					return
				}
			}
			rp.ServeHTTP(w, r)
			return
		}
		rp.ServeHTTP(w, r)
		p.mu.Lock()
		p.answered[r.URL.Path]++
		p.mu.Unlock()
	}), ReadHeaderTimeout: waitLong}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		p.release()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // the held streams do not end by themselves
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("proxy: %v", err)
		}
	})
	return p
}

func (p *holdingProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = make(chan struct{})
	p.answered = map[string]int{}
}

// waitHeld waits until a page holds a stream request at the gate and
// has had the answers to requests for each of paths since hold.
func (p *holdingProxy) waitHeld(t *testing.T, paths ...string) {
	t.Helper()
	testwait.UntilOK(t, fmt.Sprintf("the live stream held and %v answered", paths), func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		var missing []string
		for _, path := range paths {
			if p.answered[path] == 0 {
				missing = append(missing, path)
			}
		}
		if p.held == 0 || len(missing) > 0 {
			return fmt.Errorf("%d held, not answered: %v", p.held, missing)
		}
		return nil
	})
}

func (p *holdingProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// startTextKiosk is a device with a text console (no LCD), as termd on
// the sim board runs: its screen mirror is plain rows. Its name is its id;
// extraCaps are listed in connect besides notice and screen.
func startTextKiosk(t *testing.T, addr, peerID string, extraCaps ...string) *link.Client {
	t.Helper()
	client, err := link.NewClient(link.ClientConfig{
		URL:    "ws://" + addr + "/api/channels/" + channelID + "/ws",
		PeerID: peerID, DeviceName: peerID, StateDir: t.TempDir(), Board: "sim", Version: "e2e",
		Capabilities: append(append(link.DefaultCapabilities(), link.CapNotice, link.CapScreen), extraCaps...),
		RetryInitial: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		Logger: testLogger(t, peerID),
	})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	con := console.New(struct {
		io.Reader
		io.Writer
	}{pr, io.Discard}, console.Opts{Width: 60, Height: 12, Logger: testLogger(t, peerID)})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = con.Run(ctx) }()
	d := &device.Daemon{Client: client, View: &device.ConsoleView{Console: con}, Inputs: make(chan device.Input), Logger: testLogger(t, peerID)}
	go func() { defer wg.Done(); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); pw.Close(); wg.Wait() })
	return client
}

// login logs in with token on the console at base.
func (b *browser) login(base, token string) {
	b.t.Helper()
	b.must("opening the console", chromedp.Navigate(base+"/"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.must("logging in", chromedp.SendKeys(`#token`, token, chromedp.ByQuery), chromedp.Click(`#login-button`, chromedp.ByQuery))
}

// fitsJS is true when nothing on the page reaches past the window's right
// edge (no sideways scrolling, nothing cut off).
const fitsJS = `(() => {
	const w = window.innerWidth;
	if (document.documentElement.scrollWidth > w) return false;
	return Array.from(document.querySelectorAll('body *')).every(e => {
		const r = e.getBoundingClientRect();
		return r.width === 0 || r.height === 0 || e.closest('.sr-only') || r.right <= w + 0.5;
	});
})()`

// offenders lists what reaches past the window's right edge.
func (b *browser) offenders() string {
	var out string
	_ = b.run("listing wide elements", chromedp.Evaluate(`Array.from(document.querySelectorAll('body *')).filter(e => {
		const r = e.getBoundingClientRect();
		return r.width && r.height && !e.closest('.sr-only') && r.right > window.innerWidth + 0.5;
	}).slice(0, 10).map(e => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).join(', ') + ' scrollWidth ' + document.documentElement.scrollWidth`, &out))
	return out
}

func (b *browser) checkFits(what string) {
	b.t.Helper()
	var ok bool
	b.must("measuring the page", chromedp.Evaluate(fitsJS, &ok))
	if !ok {
		b.t.Errorf("%s: the page is wider than the window: %s", what, b.offenders())
	}
}

// writeButtonsJS lists the visible, enabled controls that change
// something (send, withdraw, cancel, approve).
const writeButtonsJS = `Array.from(document.querySelectorAll('button, input[type=submit]')).filter(e => {
	const r = e.getBoundingClientRect();
	return r.width > 0 && r.height > 0 && !e.disabled && /send|withdraw|cancel|approve/i.test(e.textContent + ' ' + (e.getAttribute('aria-label') || ''));
}).map(e => e.textContent)`

// glassJS reads the mirror's canvas back: for each cell the 8 rows of 5
// dots, a dot lit when it is drawn dark.
const glassJS = `(() => {
	const c = document.querySelector('#lcd canvas');
	if (!c) return null;
	const d = +c.dataset.dot, pad = +c.dataset.pad, rows = +c.dataset.rows, cols = +c.dataset.cols;
	const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
	const out = [];
	for (let r = 0; r < rows; r++) {
		const row = [];
		for (let col = 0; col < cols; col++) {
			const cell = [];
			for (let y = 0; y < 8; y++) {
				let bits = 0;
				for (let x = 0; x < 5; x++) {
					const X = pad + col * 6 * d + x * d + 1, Y = pad + r * 9 * d + y * d + 1;
					const i = (Y * c.width + X) * 4;
					bits = (bits << 1) | (px[i] + px[i + 1] + px[i + 2] < 240 ? 1 : 0);
				}
				cell.push(bits);
			}
			row.push(cell);
		}
		out.push(row);
	}
	return {rows, cols, width: c.width, height: c.height, dot: d, pad, shownWidth: c.getBoundingClientRect().width, cells: out};
})()`

type glassRead struct {
	Rows, Cols, Width, Height, Dot, Pad int
	ShownWidth                          float64
	Cells                               [][][8]byte
}

// TestConsoleForOperators checks issue 23's console points at 1280 and
// 400 px: a loading state before the first data, the notice limit and the
// API's own error words, "Log out" after a login, a device page listing
// that device's events, the LCD drawn dot by dot with the ROM's glyphs at
// the glass's size, a text device's rows shown as text, and no name
// shown twice.
func TestConsoleForOperators(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	addr := startRoleServer(t)
	proxy := startHoldingProxy(t, addr)
	base := "http://" + proxy.addr
	lobby := startKiosk(t, addr, "kiosk-lobby", map[string]string{"site": "lobby"})
	startKiosk(t, addr, "kiosk-shop", map[string]string{"site": "shop"})
	startTextKiosk(t, addr, "terminal-dev")

	// The API's refusal of a long notice, as a client sees it.
	long := strings.Repeat("x", 1001)
	body, _ := json.Marshal(map[string]any{"text": long})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/channels/"+channelID+"/notices", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var refusal struct{ Error string }
	err = json.NewDecoder(resp.Body).Decode(&refusal)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusBadRequest || !strings.Contains(refusal.Error, "at most 1000") {
		t.Fatalf("the API on a 1001-character notice: HTTP %d %+v %v", resp.StatusCode, refusal, err)
	}
	a00 := console2.Glyphs(display.A00)

	for _, width := range widths {
		t.Run(fmt.Sprintf("%dpx", width), func(t *testing.T) {
			b := startBrowserSized(t, chromium, width, 1000)
			shot := func(name string) { b.screenshot(fmt.Sprintf("%dpx-%s", width, name)) }

			// Before the first data: loading, not "0 of 0 online".
			proxy.hold()
			b.login(base, adminToken)
			b.waitFor("the fleet view is open", `!document.getElementById('fleet-view').hidden`)
			// The page has drawn what it has: it asked for the live
			// stream (held), then had the answers to the fleet view's
			// other loads (pairing codes, rollouts, releases), the
			// releases drawn in the rollout form.
			proxy.waitHeld(t, "/api/enrollments", "/api/channels/"+channelID+"/rollouts", "/api/releases")
			b.waitFor("the releases listed in the rollout form", `document.getElementById('rollout-version').options.length > 0`)
			var before struct {
				Count, Empty, Stream, Events, Text string
			}
			b.must("reading the page before data", chromedp.Evaluate(`({count: document.getElementById('fleet-count').textContent,
				empty: document.getElementById('fleet-empty').hidden ? '' : document.getElementById('fleet-empty').textContent,
				stream: document.getElementById('stream-state').textContent,
				events: document.getElementById('events-note').hidden ? '' : document.getElementById('events-note').textContent,
				text: document.body.innerText})`, &before))
			if before.Count != "loading…" || before.Empty != "Loading the devices…" || before.Stream == "live" || before.Events != "Loading the events…" ||
				strings.Contains(before.Text, "0 of 0") || strings.Contains(before.Text, "No device has connected") {
				t.Errorf("before the first data: count %q, note %q, stream %q, events %q; want loading…, Loading the devices…, not live, Loading the events…", before.Count, before.Empty, before.Stream, before.Events)
			}
			shot("00-loading")
			proxy.release()
			b.waitFor("the fleet is loaded", `document.getElementById('fleet-count').textContent === '3 of 3 online' && document.getElementById('stream-state').textContent === 'live'`)
			b.waitFor("the events are loaded", eventShown("terminal_connected", "kiosk-lobby")+` && document.getElementById('events-note').hidden`)

			// A login was needed: Log out is there, inside the window.
			var logout bool
			b.must("finding Log out", chromedp.Evaluate(`(() => { const e = document.getElementById('logout'); const r = e.getBoundingClientRect();
				return !e.hidden && r.width > 0 && r.left >= 0 && r.right <= window.innerWidth })()`, &logout))
			if !logout {
				t.Errorf("Log out is hidden or cut off after a login")
			}
			// A name equal to the id is not shown twice.
			var twice bool
			b.must("reading names", chromedp.Evaluate(`/terminal-dev \(terminal-dev\)|terminal-dev — terminal-dev/.test(document.body.innerText) ||
				!!document.querySelector('[data-peer-id="terminal-dev"] td:first-child .sub')`, &twice))
			if twice {
				t.Errorf("terminal-dev is shown as its own name twice")
			}
			b.checkFits("the fleet")
			shot("01-fleet")

			// The notice box holds what the API takes, and shows the API's refusal word for word.
			var limit struct {
				Max   int
				Count string
			}
			b.must("filling the notice box past the limit",
				clickListed(`[data-testid=target-all]`),
				setValue(`#notice-text`, long),
				chromedp.Evaluate(`({max: document.getElementById('notice-text').maxLength, count: document.querySelector('[data-testid=notice-count]').textContent})`, &limit))
			if limit.Max != 1000 || limit.Count != "1001 of 1000 characters" {
				t.Errorf("notice box: maxlength %d, counter %q; want 1000 and \"1001 of 1000 characters\"", limit.Max, limit.Count)
			}
			b.must("sending it", clickListed(`#notice-send`))
			b.waitFor("the API's refusal is shown as it said it", fmt.Sprintf(`document.getElementById('notice-result').textContent === %q`, refusal.Error))
			b.checkFits("the refused notice")
			shot("02-notice-refused")

			// kiosk-lobby's page: its own events only, its glass dot by dot.
			b.must("opening kiosk-lobby's page", clickListed(`[data-peer-id="kiosk-lobby"] a`))
			b.waitFor("the device page is shown", `!document.getElementById('peer-view').hidden && document.getElementById('events-view').hidden`)
			b.waitFor("its events are listed", `Array.from(document.querySelectorAll('#peer-events [data-event=terminal_connected]')).some(e => e.textContent.includes('peer kiosk-lobby'))`)
			var others []string
			b.must("reading its events", chromedp.Evaluate(`Array.from(document.querySelectorAll('#peer-events [data-testid=event]')).map(e => e.textContent).filter(t => !t.includes('peer kiosk-lobby'))`, &others))
			if len(others) > 0 {
				t.Errorf("kiosk-lobby's page lists other devices' events: %q", others)
			}
			testwait.UntilOK(t, "the mirror drawing kiosk-lobby's glass with the ROM's glyphs", func() error {
				var g *glassRead
				b.must("reading the glass", chromedp.Evaluate(glassJS, &g))
				codes := lobby.bus.Codes()
				problem := ""
				switch {
				case g == nil:
					problem = "no canvas"
				case g.Rows != 4 || g.Cols != 20 || g.Width != 2*g.Pad+20*6*g.Dot-g.Dot || g.Height != 2*g.Pad+4*9*g.Dot-g.Dot:
					problem = fmt.Sprintf("glass %dx%d drawn %dx%d px, want 4x20 cells", g.Rows, g.Cols, g.Width, g.Height)
				default:
					lit := 0
					for r := range codes {
						for c, code := range codes[r] {
							want, ok := a00[code]
							if !ok {
								continue // a custom glyph
							}
							if g.Cells[r][c] != want {
								problem = fmt.Sprintf("cell %d,%d (code %#02x %q) drawn %x, the ROM's pattern is %x", r, c, code, display.A00.Rune(code), g.Cells[r][c], want)
							}
							for _, row := range want {
								lit += bitsOn(row)
							}
						}
					}
					if problem == "" && lit == 0 {
						problem = "the glass is blank"
					}
				}
				if problem != "" {
					return fmt.Errorf("%s\nglass:\n%s", problem, lobby.bus.Render())
				}
				if width < 500 && g.ShownWidth >= float64(g.Width) {
					t.Errorf("at %d px the glass is drawn %v px wide, not scaled to fit", width, g.ShownWidth)
				}
				return nil
			})
			b.checkFits("kiosk-lobby's page")
			shot("03-lobby")
			var lcdPNG []byte
			if err := b.run("screenshot of the glass", chromedp.Screenshot(`#lcd`, &lcdPNG, chromedp.ByQuery)); err == nil {
				b.saveShot(fmt.Sprintf("%dpx-04-glass", width), lcdPNG)
			}

			// The text device: its rows as text, no LCD, its name once.
			b.must("opening terminal-dev's page", chromedp.Navigate(base+"/#/peer/"+channelID+"/terminal-dev"))
			b.waitFor("its rows are shown as text", `document.getElementById('lcd').dataset.kind === 'text' && !document.querySelector('#lcd canvas') &&
				[...document.querySelectorAll('#lcd [data-testid=lcd-row]')].some(r => r.textContent.includes('online')) && document.getElementById('peer-title').textContent === 'terminal-dev'`)
			b.checkFits("terminal-dev's page")
			shot("05-text-device")
		})
	}
}

func bitsOn(b byte) int {
	n := 0
	for ; b != 0; b &= b - 1 {
		n++
	}
	return n
}

// TestConsoleForViewers: a viewer's console is read only (no control
// that would change something), says so, and has Log out.
func TestConsoleForViewers(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	addr := startRoleServer(t)
	base := "http://" + addr
	startKiosk(t, addr, "kiosk-lobby", map[string]string{"site": "lobby"})
	shop := startKiosk(t, addr, "kiosk-shop", map[string]string{"site": "shop"})
	waitOnline(t, base, "kiosk-shop")
	shop.stop(t)
	// The server has seen it leave (a notice posted before that is sent
	// to it, not kept pending).
	waitPeerOnline(t, base, "kiosk-shop", false)
	// A notice waits for the offline kiosk (an operator would withdraw it).
	body := strings.NewReader(`{"text": "Shop opens 9h"}`)
	req, _ := http.NewRequest(http.MethodPost, base+"/api/channels/"+channelID+"/peers/kiosk-shop/notices", body)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("queueing a notice: HTTP %d", resp.StatusCode)
	}
	for _, width := range widths {
		t.Run(fmt.Sprintf("%dpx", width), func(t *testing.T) {
			b := startBrowserSized(t, chromium, width, 1000)
			b.login(base, viewerToken)
			b.waitFor("the fleet is loaded", `document.getElementById('fleet-count').textContent === '1 of 2 online'`)
			var fleet struct {
				Writes   []string
				ReadOnly bool
				Whoami   string
				Logout   bool
			}
			b.must("reading the fleet page", chromedp.Evaluate(`({writes: `+writeButtonsJS+`,
				readOnly: !document.querySelector('[data-readonly]').hidden,
				whoami: document.getElementById('whoami').hidden ? '' : document.getElementById('whoami').textContent,
				logout: !document.getElementById('logout').hidden})`, &fleet))
			if len(fleet.Writes) > 0 || !fleet.ReadOnly || fleet.Whoami != "viewer: read only" || !fleet.Logout {
				t.Errorf("viewer's fleet page: write controls %q, read-only note %v, badge %q, Log out %v; want none, true, \"viewer: read only\", true",
					fleet.Writes, fleet.ReadOnly, fleet.Whoami, fleet.Logout)
			}
			b.checkFits("the viewer's fleet")
			b.screenshot(fmt.Sprintf("%dpx-viewer-fleet", width))
			b.must("opening kiosk-shop's page", clickListed(`[data-peer-id="kiosk-shop"] a`))
			b.waitFor("its pending notice is listed", `!!document.querySelector('[data-testid=peer-notice][data-state=pending]')`)
			var writes []string
			b.must("reading the device page", chromedp.Evaluate(writeButtonsJS, &writes))
			if len(writes) > 0 {
				t.Errorf("viewer's device page has write controls: %q", writes)
			}
			b.checkFits("the viewer's device page")
			b.screenshot(fmt.Sprintf("%dpx-viewer-device", width))
		})
	}
}

// TestConsoleNoLogin: with no admin tokens the console on the server's
// machine asks for no login, so it offers no Log out.
func TestConsoleNoLogin(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	srv := servertest.Start(t, nil)
	startKiosk(t, srv.Addr, "kiosk-1", nil)
	for _, width := range widths {
		t.Run(fmt.Sprintf("%dpx", width), func(t *testing.T) {
			b := startBrowserSized(t, chromium, width, 1000)
			b.must("opening the console", chromedp.Navigate("http://"+srv.Addr+"/"))
			b.waitFor("the fleet is loaded", `document.getElementById('fleet-count').textContent === '1 of 1 online'`)
			var st struct {
				Logout, Session bool
				Writes          []string
			}
			b.must("reading the header", chromedp.Evaluate(`({logout: !document.getElementById('logout').hidden,
				session: !document.getElementById('session').hidden, writes: `+writeButtonsJS+`})`, &st))
			if st.Logout || !st.Session || len(st.Writes) == 0 {
				t.Errorf("no-login console: Log out shown %v, session bar %v, write controls %q; want no Log out, the bar, the operator's controls", st.Logout, st.Session, st.Writes)
			}
			b.checkFits("the no-login fleet")
			b.screenshot(fmt.Sprintf("%dpx-no-login", width))
		})
	}
}

// waitOnline waits until the server lists peer online.
func waitOnline(t *testing.T, base, peer string) {
	t.Helper()
	waitPeerOnline(t, base, peer, true)
}

// waitPeerOnline waits until the server lists peer online (or offline).
func waitPeerOnline(t *testing.T, base, peer string, online bool) {
	t.Helper()
	testwait.UntilOK(t, fmt.Sprintf("%s online %v", peer, online), func() error {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/channels/"+channelID+"/peers/"+peer, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Online bool }
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if p.Online != online {
			return fmt.Errorf("HTTP %d: online %v", resp.StatusCode, p.Online)
		}
		return nil
	})
}
