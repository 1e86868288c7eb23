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
// to fallback (already a channel URL) or the URL saved in the state dir.
func resolveAuto(ctx context.Context, view device.View, log *slog.Logger, name, channel, fallback, stateDir string) (string, error) {
	discover.LibraryLog(log) // its log would land on a console display
	show := func(text string) {
		m := &device.Model{Overlay: device.Overlay{Kind: device.OverlayNotice, Text: text}}
		if err := view.Render(ctx, m, time.Now()); err != nil {
			log.Warn("display", "err", err)
		}
	}
	res, err := discover.Resolve(ctx, discover.Options{Name: name, Channel: channel, Fallback: fallback,
		StateDir: stateDir, Show: show, Logger: log})
	if err != nil {
		return "", err
	}
	return res.URL, nil
}
