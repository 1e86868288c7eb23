package console_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"termlink/internal/testwait"
	"termlink/link"
)

// Issue 43: a device's health report on the console: the fleet list
// marks the conditions it shows (disk low, hot, throttled, crash looping,
// power loss), the device page shows the report.
func TestConsoleShowsHealth(t *testing.T) {
	chromium := chromiumPath(t)
	addr := startOperatorServer(t)
	base := "http://" + addr
	peer := "kiosk-sick"
	client, err := link.NewClient(link.ClientConfig{
		URL: "ws://" + addr + "/api/channels/" + channelID + "/ws", PeerID: peer, StateDir: t.TempDir(),
		Capabilities: append(link.DefaultCapabilities(), link.CapHealth),
		RetryInitial: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = client.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitOnline(t, base, peer)
	temp := int64(84_250)
	report := &link.Health{UptimeSeconds: 7300, Load1: 2.5, MemAvailable: 30 << 20, DiskFree: 3 << 20, DiskFreePercent: 2.5,
		TempMilliC: &temp, Throttled: []string{link.ThrottleUnderVoltage, link.ThrottleUnderVoltageOccurred},
		LastStop: link.StopCrash, LastStopDetail: "panic: runtime error: index out of range [3] with length 3", RestartsLastHour: 5, Reconnects: 2}
	// Online at the server comes before the client has taken its
	// connected frame: a report is refused not connected until then.
	testwait.Until(t, "the client to take its report", func() bool {
		err := client.Report(report)
		if err != nil && !errors.Is(err, link.ErrNotConnected) {
			t.Fatal(err)
		}
		return err == nil
	})
	testwait.Until(t, "the report in the registry", func() bool {
		_, body := operatorDo(t, http.MethodGet, base+"/api/channels/"+channelID+"/peers/"+peer, "")
		return strings.Contains(body, `"crash_looping"`)
	})

	b := startBrowser(t, chromium)
	b.login(base)
	b.waitAll("the fleet row's marks", map[string]string{
		"disk low":      `!!document.querySelector('[data-testid=mark-health][data-condition=disk_low]')`,
		"hot":           `!!document.querySelector('[data-testid=mark-health][data-condition=hot]')`,
		"throttled":     `!!document.querySelector('[data-testid=mark-health][data-condition=throttled]')`,
		"crash looping": `(document.querySelector('[data-testid=mark-health][data-condition=crash_looping]') || {}).textContent?.includes('index out of range')`,
	})
	b.screenshot("fleet-health-marks")
	b.must("opening the device", chromedp.Evaluate(`location.hash = '#/peer/`+channelID+`/`+peer+`'`, nil))
	b.waitAll("the device page's report", map[string]string{
		"conditions":  `(document.querySelector('[data-testid=peer-health]') || {dataset: {}}).dataset.conditions === 'disk_low hot throttled crash_looping'`,
		"temperature": `document.getElementById('peer-info').textContent.includes('84.3 °C')`,
		"free space":  `document.getElementById('peer-info').textContent.includes('3.0 MiB free (2.5%)')`,
		"last stop":   `document.getElementById('peer-info').textContent.includes('last stop: crash: panic: runtime error')`,
		"uptime":      `document.getElementById('peer-info').textContent.includes('up 2 h')`,
	})
	b.screenshot("device-health")
}
