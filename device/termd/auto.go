package termd

import (
	"context"
	"log/slog"
	"time"

	"termlink/device"
	"termlink/link/discover"
)

// resolveAuto finds the channel URL for --server auto: it browses the LAN
// for _termlink._tcp (showing what it does on the display), else falls back
// to fallback (already a channel URL) or the URL saved in the state dir;
// with neither, it browses again until a server answers or ctx ends.
func resolveAuto(ctx context.Context, view device.View, log *slog.Logger, name, channel, fallback, stateDir string) (string, error) {
	discover.LibraryLog(log) // its log would land on a console display
	show := func(text string) {
		m := &device.Model{Overlay: device.Overlay{Kind: device.OverlayNotice, Text: text}}
		if err := view.Render(ctx, m, time.Now()); err != nil {
			log.Warn("display", "err", err)
		}
	}
	wait := autoRetryInitial
	for {
		res, err := discover.Resolve(ctx, discover.Options{Name: name, Channel: channel, Fallback: fallback,
			StateDir: stateDir, Show: show, Logger: log})
		if err == nil {
			return res.URL, nil
		}
		if ctx.Err() != nil {
			return "", err
		}
		// Nothing answered, and neither a fallback nor a saved URL: the
		// server may not be up yet, or the LAN was slow to answer. A
		// device never gives up: browse again, less often each time.
		log.Warn("no termserver to use yet; browsing the LAN again", "err", err, "in", wait)
		show("no server; retry")
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, autoRetryMax)
	}
}

// The waits between browses when nothing answered and there is nothing
// to fall back to: 2 s, doubling up to 30 s (at most two log lines a
// minute).
var (
	autoRetryInitial = 2 * time.Second
	autoRetryMax     = 30 * time.Second
)
