package server

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"termlink/server/fdbudget"
)

// The default WebSocket cap leaves sockets for plain HTTP requests, out
// of what the sockets keep whatever agents and session files hold: busy
// agents beside a full house of devices still leave /healthz its room
// (before, the cap was 830 at nofile 1024, past the sockets' 804).
func TestWebSocketCapBelowSocketBudget(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{fdbudget.MinLimit, 1024, 65536} {
		b := fdbudget.New(limit)
		ws, n := maxConnections(0, b), b.Floor(fdbudget.Sockets)
		if ws < 16 || ws+16 > int64(n) {
			t.Errorf("limit %d: WebSocket cap %d, sockets kept %d: the cap must leave room for HTTP requests", limit, ws, n)
		}
	}
	if ws := maxConnections(0, fdbudget.New(1024)); ws != 754 {
		t.Errorf("WebSocket cap at nofile 1024: %d, want 754", ws)
	}
	b := fdbudget.New(1024)
	if ws := maxConnections(5, b); ws != 5 {
		t.Fatalf("configured cap 5 gives %d", ws)
	}
}

// /metrics says how many agent starts wait for their descriptors.
func TestFDMetricsAgentsWaiting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := fdbudget.New(1024)
		m := newServerMetrics()
		m.fdSeries(b)
		agents := b.Pool(fdbudget.Agents)
		for agents.TryAcquire(fdbudget.PerAgent) {
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- agents.Acquire(ctx, fdbudget.PerAgent) }()
		synctest.Wait()
		var out strings.Builder
		m.reg.WriteText(&out)
		for _, want := range []string{"\ntermlink_fd_agents_waiting 1\n", "\ntermlink_fd_agents 138\n", "\ntermlink_fd_limit 1024\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("/metrics lacks %q:\n%s", strings.TrimSpace(want), out.String())
			}
		}
		cancel()
		<-done
	})
}
