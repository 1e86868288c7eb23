package kiosk_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"termlink/device"
	"termlink/internal/testwait"
)

// The device page's mirror shows the newest screen even when the page's
// GET of the device was answered before the screen changed and reached
// the page after the live event that carried the change (the console drew
// the GET's older screen over the newer one, and nothing redrew it until
// the screen changed again: the cause of a TestConsoleInChromium failure
// seen once in six make test runs). The page holds the GET's answer
// back until the live event of the kiosk's screen change (text typed:
// no event, so no other GET) is drawn.
func TestConsoleMirrorKeepsTheNewerScreen(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	addr := startServer(t)
	lobby := startKiosk(t, addr, "kiosk-lobby", map[string]string{"site": "lobby"})
	b := startBrowser(t, chromium)
	b.must("opening the console", chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.must("logging in", chromedp.SendKeys(`#token`, adminToken, chromedp.ByQuery), chromedp.Click(`#login-button`, chromedp.ByQuery))
	b.waitFor("the live stream is connected", `document.getElementById('stream-state').textContent === 'live'`)
	b.waitFor("the kiosk is online", peerRow("kiosk-lobby", true))

	// The device page's GET of the peer resolves when the test calls
	// releaseGets, after its answer came.
	b.must("holding the peer GET", chromedp.Evaluate(`(() => {
		const orig = window.fetch;
		let release;
		const released = new Promise((ok) => { release = ok; });
		window.releaseGets = () => release();
		window.fetch = async (url, opts) => {
			const r = await orig(url, opts);
			if (/\/peers\/kiosk-lobby$/.test(String(url))) {
				window.heldGets = (window.heldGets || 0) + 1;
				await released;
				window.heldGets -= 1;
			}
			return r;
		};
		return true;
	})()`, nil))
	b.must("opening kiosk-lobby's page", clickListed(`[data-peer-id="kiosk-lobby"] a`))
	b.waitFor("the page's GET is held", `window.heldGets === 1`)
	// Typing changes the screen and nothing else: no event, no new GET.
	const text = "mirror me"
	select {
	case lobby.inputs <- device.Input{Kind: device.InputEdit, Text: text}:
	case <-time.After(waitLong):
		t.Fatal("the kiosk took no input")
	}
	testwait.UntilOK(t, "the typed text on the kiosk", func() error {
		if !strings.Contains(lobby.glass(), text) {
			return fmt.Errorf("it shows:\n%s", lobby.bus.Render())
		}
		return nil
	})
	b.waitFor("the live event drew the typed text", `Array.from(document.querySelectorAll('#lcd [data-testid=lcd-row]')).some(r => r.textContent.includes('`+text+`'))`)
	b.must("releasing the held GET", chromedp.Evaluate(`window.releaseGets(), true`, nil))
	b.waitFor("the held GET is answered", `window.heldGets === 0`)
	// The screen does not change any more: the mirror must show it.
	testwait.UntilOK(t, "the console's mirror showing the LCD's screen, not an older one", func() error {
		rows, _, err := b.mirror()
		if err != nil {
			t.Fatal(err)
		}
		if !sameScreen(lobby.bus.Text(), rows) {
			return fmt.Errorf("mirror: %q\nglass:  %q", rows, lobby.bus.Text())
		}
		return nil
	})
}
