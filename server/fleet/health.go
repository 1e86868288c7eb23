package fleet

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"termlink/link"
	"termlink/server/registry"
	"termlink/server/wschannel"
)

// HealthSetter is where a device's health report is kept (the
// registry; in cluster mode cluster.Devices, published to every node).
type HealthSetter interface {
	SetHealth(channelID, peerID string, gen uint64, h link.Health) error
}

// HealthFrames is the health frame's route (issue 43): from a connection
// that listed "health", paced as an answer frame, and at most one report
// per registry.HealthEvery per connection — one sooner is refused busy
// (an error frame through the server's gate, as every refusal is) and
// changes nothing. A report from a connection the device has replaced is
// dropped. The registry keeps the last one per device.
func HealthFrames(reg HealthSetter) []wschannel.FrameRoute {
	return []wschannel.FrameRoute{{Type: link.TypeHealth, Capability: link.CapHealth, Paced: true,
		Handle: func(from wschannel.FrameSource, fr link.Frame) error {
			switch err := reg.SetHealth(from.ChannelID, from.PeerID, from.Gen, *fr.(*link.Health)); {
			case err == nil, errors.Is(err, registry.ErrNotLive):
				return nil
			case errors.Is(err, registry.ErrHealthTooSoon):
				return &wschannel.FrameError{Code: link.CodeBusy, Msg: fmt.Sprintf("one health report per %s per connection", registry.HealthEvery)}
			default:
				return err
			}
		}}}
}

// registerHealth adds termserver_devices_health: per channel and
// condition (link.HealthConditions, and "reporting"), the online devices
// whose last report marks it; and, when the operator named tag keys
// (Deps.HealthTagKeys), termserver_devices_health_by_tag: the same per
// value of each of those keys, of authenticated devices only (as
// termserver_devices_online), at most registry.MaxHealthTagValues
// values per key and channel, the rest as tag_value="other". Bounded
// labels: never a device.
func (a *API) registerHealth() {
	a.registerHealthByTag()
	a.d.Metrics.NewGaugeSet("termserver_devices_health", "Devices online whose last health report marks a condition (disk_low, hot, throttled, crash_looping, power_loss), per channel; condition=\"reporting\" counts those online with a report.",
		[]string{"channel", "condition"}, func(emit func(int64, ...string)) {
			for _, ch := range a.d.Channels {
				counts := a.d.Registry.HealthCounts(ch.ID)
				conds := make([]string, 0, len(counts))
				for c := range counts {
					conds = append(conds, c)
				}
				sort.Strings(conds)
				for _, c := range conds {
					emit(int64(counts[c]), ch.ID, c)
				}
			}
		})
}

func (a *API) registerHealthByTag() {
	keys := a.d.HealthTagKeys
	if len(keys) == 0 {
		return
	}
	a.d.Metrics.NewGaugeSet("termserver_devices_health_by_tag", "Devices online whose last health report marks a condition (as termserver_devices_health), per channel and value of each tag key the configuration's metrics.healthTagKeys allows, over authenticated devices' tags; past 100 values of a key per channel, tag_value=\"other\".",
		[]string{"channel", "tag_key", "tag_value", "condition"}, func(emit func(int64, ...string)) {
			for _, ch := range a.d.Channels {
				for _, tc := range a.d.Registry.HealthByTag(ch.ID, keys, registry.MaxHealthTagValues) {
					for _, c := range slices.Sorted(maps.Keys(tc.Counts)) {
						emit(int64(tc.Counts[c]), ch.ID, tc.Key, tc.Value, c)
					}
				}
			}
		})
}
