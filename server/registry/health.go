package registry

import (
	"errors"
	"slices"
	"strings"
	"time"

	"termlink/link"
)

// Health is a device's last health report (issue 43: a device that
// listed "health" sends one at connect and about once a minute), with
// the conditions it marks (link.Health.Conditions: disk_low, hot,
// throttled, crash_looping, power_loss) and when it came. Kept, as a
// reconnect keeps it, and written with the device.
type Health struct {
	link.Health
	Conditions []string `json:"conditions"`
	At         string   `json:"at"`
}

// HealthEvery is how often a connection's health reports are taken:
// one per HealthEvery per connection, the next one refused
// (ErrHealthTooSoon).
const HealthEvery = 30 * time.Second

// Errors of SetHealth.
var (
	ErrHealthTooSoon = errors.New("one health report per 30 s per connection")
	ErrNotLive       = errors.New("not from the device's live connection")
)

// SetHealth keeps h as connection gen's device's last health report and
// tells subscribers. ErrHealthTooSoon: the connection's last report was
// taken less than HealthEvery ago; ErrNotLive: gen is not the device's
// live connection. Nothing changes then.
func (r *Registry) SetHealth(channelID, peerID string, gen uint64, h link.Health) error {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entryLocked(channelID, peerID)
	if e == nil || e.gen != gen || !e.online {
		return ErrNotLive
	}
	if e.healthGen == gen && now.Sub(e.healthAt) < HealthEvery && !now.Before(e.healthAt) {
		return ErrHealthTooSoon
	}
	kept := boundHealth(Health{Health: h, At: formatTime(now)})
	e.health, e.healthGen, e.healthAt = &kept, gen, now
	cs := r.channels[channelID]
	cs.resizeLocked(e)
	cs.markLocked(peerID, dirtyFull)
	r.publishLocked(cs, e)
	return nil
}

// boundHealth bounds a report the registry keeps (a stored one may not
// have passed the link's decoder): the crash's line to
// link.MaxStopDetailBytes, the flags to the known ones, the conditions
// made again from the figures.
func boundHealth(h Health) Health {
	h.LastStop = truncate(strings.ToValidUTF8(h.LastStop, "?"), 16)
	h.LastStopDetail = truncate(strings.ToValidUTF8(h.LastStopDetail, "?"), link.MaxStopDetailBytes)
	var flags []string
	for _, w := range h.Throttled {
		if slices.Contains(link.ThrottleWords, w) && !slices.Contains(flags, w) {
			flags = append(flags, w)
		}
	}
	h.Throttled = flags
	h.Conditions = h.Health.Conditions()
	h.At = truncate(strings.ToValidUTF8(h.At, "?"), MaxField)
	return h
}

// healthBytes is what a kept report adds to its device in its channel's
// byte budget: about its JSON.
func healthBytes(h *Health) int {
	if h == nil {
		return 0
	}
	n := 400 + encLen(h.LastStop) + encLen(h.LastStopDetail) + encLen(h.At)
	for _, w := range h.Throttled {
		n += encLen(w) + 1
	}
	for _, c := range h.Conditions {
		n += encLen(c) + 1
	}
	return n
}

// HealthCounts counts the channel's online devices whose last health
// report marks each condition (link.HealthConditions), and under
// "reporting" those online with a report at all. Bounded labels: the
// conditions, never a device.
func (r *Registry) HealthCounts(channelID string) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := newHealthCounts()
	if cs := r.channels[channelID]; cs != nil {
		for _, e := range cs.peers {
			countHealth(out, e.online, e.health)
		}
	}
	return out
}

// HealthCounts is Registry.HealthCounts over the peers put into the view.
func (v *View) HealthCounts(channelID string) map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := newHealthCounts()
	if vc := v.channels[channelID]; vc != nil {
		for _, p := range vc.peers {
			countHealth(out, p.Online, p.Health)
		}
	}
	return out
}

// HealthReporting is HealthCounts' key of the online devices with a
// report.
const HealthReporting = "reporting"

func newHealthCounts() map[string]int {
	out := make(map[string]int, len(link.HealthConditions)+1)
	out[HealthReporting] = 0
	for _, c := range link.HealthConditions {
		out[c] = 0
	}
	return out
}

func countHealth(out map[string]int, online bool, h *Health) {
	if !online || h == nil {
		return
	}
	out[HealthReporting]++
	for _, c := range h.Conditions {
		if _, ok := out[c]; ok {
			out[c]++
		}
	}
}
