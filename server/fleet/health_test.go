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
