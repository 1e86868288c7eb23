package fleet

import "termlink/server/registry"

// HealthCounts counts the fake's peers as the registry does.
func (f *fakeRegistry) HealthCounts(string) map[string]int {
	out := map[string]int{registry.HealthReporting: 0}
	for _, p := range f.peers {
		if p.Online && p.Health != nil {
			out[registry.HealthReporting]++
			for _, c := range p.Health.Conditions {
				out[c]++
			}
		}
	}
	return out
}

// HealthByTag counts the fake's peers by tag as the registry does,
// without its cap.
func (f *fakeRegistry) HealthByTag(_ string, keys []string, _ int) []registry.HealthTagCount {
	var out []registry.HealthTagCount
	for _, k := range keys {
		byValue := map[string]map[string]int{}
		for _, p := range f.peers {
			v, ok := p.Tags[k]
			if !ok || !p.Authenticated {
				continue
			}
			if byValue[v] == nil {
				byValue[v] = map[string]int{registry.HealthReporting: 0}
			}
			if p.Online && p.Health != nil {
				byValue[v][registry.HealthReporting]++
				for _, c := range p.Health.Conditions {
					byValue[v][c]++
				}
			}
		}
		for v, counts := range byValue {
			out = append(out, registry.HealthTagCount{Key: k, Value: v, Counts: counts})
		}
	}
	return out
}
