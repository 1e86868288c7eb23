package kiosk_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"termlink/testrig/fleetsim"
)

// The fleet page lists the channel's rollouts: a rollout that paused
// itself says which device failed and why, and an operator resumes it
// there until it is done; a viewer sees it without the controls. At
// 1280 and 400 px wide, nothing leaves the window.
func TestConsoleRollouts(t *testing.T) {
	parallel(t)
	chromium, addr, base := startReleaseServer(t)
	startSims(t, addr, fleetsim.Options{N: 3, Fail: []string{"sim-001"}, FailReason: "no heartbeat within the gate"})
	if status, msg := operatorDo(t, "POST", base+"/api/channels/"+channelID+"/rollouts", `{"version":"v2","all":true,"canary":1}`); status != http.StatusCreated {
		t.Fatalf("create: HTTP %d %s", status, msg)
	}

	// A viewer: the paused rollout and why, no controls.
	b := startBrowserSized(t, chromium, 1280, 1000)
	b.login(base, viewerToken)
	b.waitFor("the paused rollout", `(() => { const li = document.querySelector('[data-testid=rollout]');
		return li && li.dataset.state === 'paused' && li.textContent.includes('sim-001 rolled back: no heartbeat within the gate') })()`)
	var buttons int
	b.must("counting its controls", chromedp.Evaluate(`document.querySelectorAll('[data-testid=rollout] button:not([data-testid=rollout-toggle])').length`, &buttons))
	if buttons != 0 {
		t.Errorf("a viewer is offered %d rollout controls", buttons)
	}

	for i, width := range widths {
		t.Run(fmt.Sprintf("%dpx", width), func(t *testing.T) {
			b := startBrowserSized(t, chromium, width, 1000)
			b.login(base, adminToken)
			if i == 0 {
				b.waitFor("the paused rollout", `(() => { const li = document.querySelector('[data-testid=rollout]');
					return li && li.dataset.state === 'paused' && li.textContent.includes('sim-001 rolled back') &&
						!!li.querySelector('[data-testid=rollout-resume]') && !!li.querySelector('[data-testid=rollout-abort]') })()`)
				b.checkFits("the paused rollout")
				b.screenshot(fmt.Sprintf("%dpx-rollout-paused", width))
				b.must("resuming it", clickListed(`[data-testid=rollout-resume]`))
			}
			b.waitFor("the rollout done", `(() => { const li = document.querySelector('[data-testid=rollout]');
				return li && li.dataset.state === 'done' && li.textContent.includes('2 installed, 1 rolled back') && !li.querySelector('button:not([data-testid=rollout-toggle])') })()`)
			b.checkFits("the finished rollout")
			b.screenshot(fmt.Sprintf("%dpx-rollout-done", width))
		})
	}
}
