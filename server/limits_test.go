package server

import (
	"testing"

	"termlink/server/fdbudget"
)

// The default WebSocket cap leaves sockets for plain HTTP requests.
func TestWebSocketCapBelowSocketBudget(t *testing.T) {
	b := fdbudget.New(1024)
	if ws, n := maxConnections(0, b), b.Max(fdbudget.Sockets); ws < 16 || ws >= int64(n) {
		t.Fatalf("WebSocket cap %d, sockets budget %d: the cap must leave room for HTTP requests", ws, n)
	}
	if ws := maxConnections(5, b); ws != 5 {
		t.Fatalf("configured cap 5 gives %d", ws)
	}
}
