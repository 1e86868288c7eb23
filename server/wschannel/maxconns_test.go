package wschannel

import (
	"testing"

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
		ws, n := MaxConnections(0, b), b.Floor(fdbudget.Sockets)
		if ws < 16 || ws+16 > int64(n) {
			t.Errorf("limit %d: WebSocket cap %d, sockets kept %d: the cap must leave room for HTTP requests", limit, ws, n)
		}
	}
	if ws := MaxConnections(0, fdbudget.New(1024)); ws != 754 {
		t.Errorf("WebSocket cap at nofile 1024: %d, want 754", ws)
	}
	b := fdbudget.New(1024)
	if ws := MaxConnections(5, b); ws != 5 {
		t.Fatalf("configured cap 5 gives %d", ws)
	}
}
