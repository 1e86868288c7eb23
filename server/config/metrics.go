package config

import (
	"slices"

	"termlink/server/registry"
)

// Metrics is the "metrics" block: what /metrics may show beyond its
// fixed series.
//
//	"metrics": {"healthTagKeys": ["site", "floor"]}
type Metrics struct {
	// HealthTagKeys are the device tag keys termserver_devices_health_by_tag
	// counts per value (of authenticated devices; at most
	// registry.MaxHealthTagValues values per key and channel, the rest
	// as "other"): at most registry.MaxHealthTagKeys, each a valid tag
	// key, none twice. None (the default): no such series.
	HealthTagKeys []string
}

// metrics decodes the "metrics" block.
func (w *walker) metrics(path string, n *node) Metrics {
	var m Metrics
	f := w.fields(path, n, "metrics")
	if f == nil {
		return m
	}
	if e, ok := f["healthTagKeys"]; ok {
		p := join(path, e.key)
		keys, ok := w.strList(p, e.val)
		if !ok {
			return m
		}
		if len(keys) > registry.MaxHealthTagKeys {
			w.errorf(p, "%d keys: at most %d (each adds up to %d values per channel to /metrics)", len(keys), registry.MaxHealthTagKeys, registry.MaxHealthTagValues)
			return m
		}
		good := true
		for i, k := range keys {
			switch err := registry.CheckTagKey(k); {
			case err != nil:
				w.errorf(index(p, i), "invalid tag key %s: %v", quote(k), err)
				good = false
			case slices.Contains(keys[:i], k):
				w.errorf(index(p, i), "tag key %s is given twice", quote(k))
				good = false
			}
		}
		if good {
			m.HealthTagKeys = keys
		}
	}
	return m
}
