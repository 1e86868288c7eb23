package termd

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"termlink/device/health"
	"termlink/link"
)

// Device health (issue 43): with Config.Boot set (cmd/termd reads the
// state dir's marks before Run), termd lists the capability "health" and
// reports its figures (package device/health) at each connect, then at
// most once a minute, and at once when a threshold is crossed (disk low,
// hot, throttled), never more than once per health.MinInterval on one
// connection.

// healthPoll is how often the reporter looks at the link (a new
// connection is reported within it); healthCollect how often it reads
// the board's figures between reports (a crossed threshold is seen
// within it).
const (
	healthPoll    = time.Second
	healthCollect = 10 * time.Second
)

// healthClient is what the reporter needs of the link's client.
type healthClient interface {
	Stats() link.ClientStats
	Report(link.Frame) error
}

// healthCaps is the capability the reporter adds to connect.
func (s *setup) healthCaps() []string {
	if s.cfg.Boot == nil {
		return nil
	}
	return []string{link.CapHealth}
}

// healthSources are where termd reads its figures: the real /proc and
// /sys, the state dir's file system, vcgencmd where the firmware's sysfs
// file is missing.
func (s *setup) healthSources() health.Sources {
	return health.Sources{StateDir: s.cfg.StateDir, Vcgencmd: health.VcgencmdThrottled}
}

// runHealth reports until ctx ends.
func runHealth(ctx context.Context, client healthClient, src health.Sources, boot health.Boot, log *slog.Logger) {
	if boot.Err != nil {
		log.Warn("health: the state dir's marks of the last stop", "err", boot.Err)
	}
	var sched health.Schedule
	var last health.Figures
	var collected time.Time
	var session int64           // the connection last collected for
	logged := map[string]bool{} // each problem once
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	for {
		now := time.Now()
		if st := client.Stats(); st.Sessions > 0 {
			if st.Sessions != session || now.Sub(collected) >= healthCollect {
				last, collected, session = health.Collect(src), now, st.Sessions
				for _, p := range last.Problems {
					if !logged[p] && len(logged) < 16 {
						logged[p] = true
						log.Warn("health: a figure could not be read", "problem", p)
					}
				}
			}
			h := report(last, boot, st)
			c := health.ConditionsOf(h)
			if sched.Due(now, st.Sessions, c) {
				switch err := client.Report(&h); {
				case err == nil:
					sched.Sent(now, st.Sessions, c)
				case errors.Is(err, link.ErrNotConnected): // again at the next poll
				default:
					log.Warn("health: report not sent", "err", err)
					sched.Sent(now, st.Sessions, c) // not again before the next interval
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// report is the health frame of figures f, this start's boot and the
// link's stats.
func report(f health.Figures, boot health.Boot, st link.ClientStats) link.Health {
	h := f.Health
	h.LastStop, h.LastStopDetail, h.RestartsLastHour = boot.LastStop, boot.LastStopDetail, boot.RestartsLastHour
	h.Reconnects = max(st.Sessions-1, 0)
	h.HeartbeatRTTMillis = min(st.HeartbeatRTT.Milliseconds(), link.MaxHeartbeatRTTMillis)
	return h
}
