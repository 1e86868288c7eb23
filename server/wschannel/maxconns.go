package wschannel

import "termlink/server/fdbudget"

// MaxConnections is the cap on open WebSockets (ServeUpgrade's maxConns):
// configured when > 0, else what the descriptor budget keeps for sockets
// whatever the agents and session files hold (its floor) less room for
// plain HTTP requests (a sixteenth, at least 16): 754 at nofile 1024. So
// /healthz and the API still answer when devices hold every WebSocket
// they may and the agents all they may. Past the cap a device gets 503
// before it costs anything; the connection guard (ConnGuard) refuses any
// connection the budget has no descriptor for.
func MaxConnections(configured int, fds *fdbudget.Budget) int64 {
	if configured > 0 {
		return int64(configured)
	}
	n := fds.Floor(fdbudget.Sockets)
	return int64(max(16, n-max(16, n/16)))
}
