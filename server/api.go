package server

import (
	"context"
	"net/http"
	"strconv"

	"termlink/server/config"
	"termlink/server/console"
	"termlink/server/httpapi"
	"termlink/server/statusapi"
	"termlink/server/wschannel"
)

// wsPattern is the device WebSocket route, the only /api/ route the guard
// leaves to its own (device token) authentication.
const wsPattern = "GET /api/channels/{channel_id}/ws"

// RequireRole wraps h so it answers only callers holding at least role
// (guard.Guard.RequireRole).
func (s *Server) RequireRole(role config.Role, h http.HandlerFunc) http.HandlerFunc {
	return s.guard.RequireRole(role, h)
}

// routes builds the mux behind the operator guard (package guard): every
// /api/* route but the device routes takes an admin token.
func (s *Server) routes() http.Handler {
	mux := s.routeMx
	mux.HandleClass(wsPattern, httpapi.DeviceRoute, s.serveWS)
	for _, c := range s.caps {
		c.Routes(mux)
	}
	d := statusapi.Deps{Load: s.router.Load, Health: s.rt.Records.Health, Metrics: &s.rt.Metrics.Reg, Login: s.cfg.Admin.Enabled(), Started: s.started,
		Channels: func() []statusapi.Channel {
			out := make([]statusapi.Channel, 0, len(s.rt.Order))
			for _, id := range s.rt.Order {
				ch := s.rt.Channels[id]
				out = append(out, statusapi.Channel{ID: id, Config: ch.Config, Events: ch.Events})
				if ch.Adapter != nil {
					out[len(out)-1].Adapter = ch.Adapter
				}
			}
			return out
		}}
	if st := s.rt.Records.Status; st != nil {
		d.Cluster = func(ctx context.Context) any { return st.Status(ctx) }
	}
	statusapi.Routes(mux, d)                       // /api/status, /api/channels, /api/whoami, /healthz, /metrics
	mux.Handle("GET /{$}", console.Handler())      // the web console (open: its files hold no data)
	mux.Handle("GET /console/", console.Handler()) // its scripts and styles
	return s.guard.Wrap(mux.ServeMux)
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("channel_id")
	ch := s.rt.Channels[id]
	switch {
	case ch == nil:
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(id)+" is configured")
	case ch.Adapter == nil:
		httpapi.WriteError(w, http.StatusServiceUnavailable, "channel "+strconv.Quote(id)+" is disabled")
	case s.refuses() != "":
		httpapi.WriteError(w, http.StatusServiceUnavailable, s.refuses())
	default:
		ch.Adapter.ServeUpgrade(w, r, wschannel.MaxConnections(s.cfg.MaxConnections, s.fds))
	}
}

// refuses says why this node takes no device connections ("": it takes
// them; only a store that keeps where devices are, record.Edge, may
// refuse them).
func (s *Server) refuses() string {
	if e := s.rt.Records.Edge; e != nil {
		return e.Refuses()
	}
	return ""
}
