package registry

import (
	"errors"
	"maps"
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
	if x := e.ex(); x.healthGen == gen && now.Sub(x.healthAt) < HealthEvery && !now.Before(x.healthAt) {
		return ErrHealthTooSoon
	}
	kept := boundHealth(Health{Health: h, At: formatTime(now)})
	x := e.extra()
	x.health, x.healthGen, x.healthAt = &kept, gen, now
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
			countHealth(out, e.online, e.ex().health)
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

// Bounds of HealthByTag's labels.
const (
	// MaxHealthTagKeys is how many tag keys may be health labels.
	MaxHealthTagKeys = 8
	// MaxHealthTagValues is how many values of one key get series of
	// their own per channel; the devices with the others are counted
	// under OtherTags.
	MaxHealthTagValues = 100
)

// CheckTagKey says what is wrong with a tag key (the rules of the keys
// the registry keeps), nil when none; for a key named in the
// configuration (health metric labels).
func CheckTagKey(k string) error { return checkTagKey(k) }

// HealthTagCount is one value of one tag key in HealthByTag: Counts are
// HealthCounts over the online devices with that tag.
type HealthTagCount struct {
	Key, Value string
	Counts     map[string]int
}

// HealthByTag counts the channel's online devices per health condition
// (as HealthCounts) for each value of each tag key in keys, over the
// tags of authenticated devices only, as Online does, so that anonymous
// devices cannot choose the label set; a value any such device holds,
// online or not, is listed (with zero counts when none of them is
// online). Past maxValues values of a key, the first maxValues in order
// get their own counts and the devices with the others are counted under
// Value OtherTags (with those whose value is "other"). Ordered by keys'
// order, then value, OtherTags last; never a device.
func (r *Registry) HealthByTag(channelID string, keys []string, maxValues int) []HealthTagCount {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := newHealthTagCounter(keys)
	if cs := r.channels[channelID]; cs != nil {
		for _, e := range cs.peers {
			c.add(e.online, e.dev.Authenticated, e.dev.Tags, e.ex().health)
		}
	}
	return c.result(maxValues)
}

// HealthByTag is Registry.HealthByTag over the peers put into the view.
func (v *View) HealthByTag(channelID string, keys []string, maxValues int) []HealthTagCount {
	v.mu.Lock()
	defer v.mu.Unlock()
	c := newHealthTagCounter(keys)
	if vc := v.channels[channelID]; vc != nil {
		for _, p := range vc.peers {
			c.add(p.Online, p.Authenticated, p.Tags, p.Health)
		}
	}
	return c.result(maxValues)
}

// healthTagCounter counts as HealthByTag says: per key, per value, the
// online devices marked by each condition (HealthCounts' keys).
type healthTagCounter struct {
	keys  []string
	byKey map[string]map[string]map[string]int
}

func newHealthTagCounter(keys []string) *healthTagCounter {
	c := &healthTagCounter{byKey: make(map[string]map[string]map[string]int, len(keys))}
	for _, k := range keys {
		if _, dup := c.byKey[k]; !dup {
			c.keys = append(c.keys, k)
			c.byKey[k] = map[string]map[string]int{}
		}
	}
	return c
}

func (c *healthTagCounter) add(online, authenticated bool, tags map[string]string, h *Health) {
	if !authenticated {
		return
	}
	for _, k := range c.keys {
		v, ok := tags[k]
		if !ok {
			continue
		}
		counts := c.byKey[k][v]
		if counts == nil {
			counts = newHealthCounts()
			c.byKey[k][v] = counts
		}
		countHealth(counts, online, h)
	}
}

func (c *healthTagCounter) result(maxValues int) []HealthTagCount {
	var out []HealthTagCount
	for _, k := range c.keys {
		var other map[string]int
		own := 0
		for _, v := range slices.Sorted(maps.Keys(c.byKey[k])) {
			counts := c.byKey[k][v]
			if own < maxValues && v != OtherTags {
				own++
				out = append(out, HealthTagCount{Key: k, Value: v, Counts: counts})
				continue
			}
			if other == nil {
				other = newHealthCounts()
			}
			for cond, n := range counts {
				other[cond] += n
			}
		}
		if other != nil {
			out = append(out, HealthTagCount{Key: k, Value: OtherTags, Counts: other})
		}
	}
	return out
}
