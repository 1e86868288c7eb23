package kiosk_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"termlink/device"
)

// The device page's mirror shows the newest screen even when the page's
// GET of the device was answered before the screen changed and reached
// the page after the live event that carried the change (the console drew
// the GET's older screen over the newer one, and nothing redrew it until
// the screen changed again: the cause of a TestConsoleInChromium failure
// seen once in six make test runs). The browser holds the GET's answer
// back for two seconds while the kiosk's screen changes (text typed:
// no event, so no other GET).
func TestConsoleMirrorKeepsTheNewerScreen(t *testing.T) {
	chromium := chromiumPath(t)
	addr := startServer(t)
	lobby := startKiosk(t, addr, "kiosk-lobby", map[string]string{"site": "lobby"})
	b := startBrowser(t, chromium)
	b.must("opening the console", chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.must("logging in", chromedp.SendKeys(`#token`, adminToken, chromedp.ByQuery), chromedp.Click(`#login-button`, chromedp.ByQuery))
	b.waitFor("the live stream is connected", `document.getElementById('stream-state').textContent === 'live'`)
	b.waitFor("the kiosk is online", peerRow("kiosk-lobby", true))

	// The device page's GET of the peer resolves two seconds after its
	// answer came.
	b.must("slowing the peer GET", chromedp.Evaluate(`(() => {
		const orig = window.fetch;
		window.fetch = async (url, opts) => {
			const r = await orig(url, opts);
			if (/\/peers\/kiosk-lobby$/.test(String(url))) {
				window.heldGets = (window.heldGets || 0) + 1;
				await new Promise((ok) => setTimeout(ok, 2000));
				window.heldGets -= 1;
			}
			return r;
		};
		return true;
	})()`, nil))
	b.must("opening kiosk-lobby's page", chromedp.Click(`[data-peer-id="kiosk-lobby"] a`, chromedp.ByQuery))
	b.waitFor("the page's GET is held", `window.heldGets === 1`)
	// Typing changes the screen and nothing else: no event, no new GET.
	const text = "mirror me"
	select {
	case lobby.inputs <- device.Input{Kind: device.InputEdit, Text: text}:
	case <-time.After(waitLong):
		t.Fatal("the kiosk took no input")
	}
	deadline := time.Now().Add(waitLong)
	for !strings.Contains(lobby.glass(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("the kiosk never showed the typed text; it shows:\n%s", lobby.bus.Render())
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.waitFor("the live event drew the typed text", `Array.from(document.querySelectorAll('#lcd [data-testid=lcd-row]')).some(r => r.textContent.includes('`+text+`'))`)
	b.waitFor("the held GET is answered", `window.heldGets === 0`)
	// The screen does not change any more: the mirror must show it.
	for {
		rows, _, err := b.mirror()
		if err != nil {
			t.Fatal(err)
		}
		if sameScreen(lobby.bus.Text(), rows) {
			break
		}
		if time.Now().After(deadline.Add(waitLong)) {
			b.screenshot("mirror-stale")
			t.Fatalf("the console's mirror shows an older screen than the LCD:\nmirror: %q\nglass:  %q", rows, lobby.bus.Text())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
