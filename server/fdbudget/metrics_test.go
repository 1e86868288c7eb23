package fdbudget

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"termlink/server/metrics"
)

// /metrics says how many agent starts wait for their descriptors.
func TestFDMetricsAgentsWaiting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := New(1024)
		var reg metrics.Registry
		b.Export(&reg)
		agents := b.Pool(Agents)
		for agents.TryAcquire(PerAgent) {
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- agents.Acquire(ctx, PerAgent) }()
		synctest.Wait()
		var out strings.Builder
		reg.WriteText(&out)
		for _, want := range []string{"\ntermlink_fd_agents_waiting 1\n", "\ntermlink_fd_agents 138\n", "\ntermlink_fd_limit 1024\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("/metrics lacks %q:\n%s", strings.TrimSpace(want), out.String())
			}
		}
		cancel()
		<-done
	})
}
