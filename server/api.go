package server

import (
	"net/http"
	"strconv"
	"time"

	"termlink/server/config"
	"termlink/server/console"
	"termlink/server/httpapi"
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
// /api/* route but the device WebSocket takes an admin token.
func (s *Server) routes() http.Handler {
	mux := &routeMux{ServeMux: http.NewServeMux(), classes: s.routeClasses}
	defer func() { s.patterns = mux.patterns }()
	mux.HandleClass(wsPattern, httpapi.DeviceRoute, s.serveWS)
	s.rt.fleet.api.Routes(mux) // events, live stream, peers, cancel (package fleet)
	mux.HandleFunc("GET /api/channels", s.serveChannels)
	mux.HandleFunc("GET /api/status", s.serveStatus)
	mux.HandleFunc("GET /api/whoami", s.serveWhoami) // the console's role-aware controls
	s.rt.notices.Routes(mux)                         // package notices
	s.identityRoutes(mux)                            // bindings and enrollment (identity.go)
	s.releases.Routes(mux)                           // signed termd releases (package releases)
	s.diag.Routes(mux)                               // logs and self-tests on demand (package diag)
	s.settings.Routes(mux)                           // settings pushed to devices (package settings)
	s.deviceReleaseRoutes(mux)                       // devices' downloads (devicedownload.go)
	s.rollouts.Routes(mux)                           // staged rollouts (package rollout)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ok, reason := s.rt.health(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(reason + "\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.rt.metrics.reg.WriteText(w)
	})
	mux.Handle("GET /{$}", console.Handler())      // the web console (open: its files hold no data)
	mux.Handle("GET /console/", console.Handler()) // its scripts and styles
	return s.guard.Wrap(mux.ServeMux)
}

// routeMux is a ServeMux that remembers its patterns (for the test that
// every guarded route refuses a request without a token) and the class
// each route declared (httpapi.HandleClass), which the guard reads.
type routeMux struct {
	*http.ServeMux
	patterns []string
	classes  map[string]httpapi.RouteClass
}

func (m *routeMux) HandleClass(pattern string, c httpapi.RouteClass, h func(http.ResponseWriter, *http.Request)) {
	m.classes[pattern] = c
	m.HandleFunc(pattern, h)
}

// routeIs reports whether a route declared class c (the guard asks it
// once routes has registered them all, before any request is served).
func (s *Server) routeIs(c httpapi.RouteClass) func(pattern string) bool {
	return func(pattern string) bool {
		rc, ok := s.routeClasses[pattern]
		return ok && rc == c
	}
}

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, h)
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("channel_id")
	ch := s.rt.channels[id]
	switch {
	case ch == nil:
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(id)+" is configured")
	case ch.adapter == nil:
		httpapi.WriteError(w, http.StatusServiceUnavailable, "channel "+strconv.Quote(id)+" is disabled")
	case s.refuses() != "":
		httpapi.WriteError(w, http.StatusServiceUnavailable, s.refuses())
	default:
		ch.adapter.ServeUpgrade(w, r, wschannel.MaxConnections(s.cfg.MaxConnections, s.fds))
	}
}

// refuses says why this node takes no device connections ("": it takes
// them; only a store that keeps where devices are, record.Edge, may
// refuse them).
func (s *Server) refuses() string {
	if e := s.rt.records.Edge; e != nil {
		return e.Refuses()
	}
	return ""
}

// ChannelCapabilities are what a channel can do, as the spec lists them.
type ChannelCapabilities struct {
	ReceiveText          bool `json:"receive_text"`
	SendText             bool `json:"send_text"`
	PersistentConnection bool `json:"persistent_connection"`
	Progress             bool `json:"progress"`
	Cancel               bool `json:"cancel"`
}

// ChannelStatus is one channel in /api/status and /api/channels.
type ChannelStatus struct {
	ChannelID        string              `json:"channel_id"`
	Kind             string              `json:"kind"`
	Mode             string              `json:"mode"`
	DisplayName      string              `json:"display_name"`
	Enabled          bool                `json:"enabled"`
	State            string              `json:"state"`
	AccountID        string              `json:"account_id"`
	LastEventAt      *time.Time          `json:"last_event_at"`
	WebsocketURL     string              `json:"websocket_url"`
	Capabilities     ChannelCapabilities `json:"capabilities"`
	ConnectedPeers   int                 `json:"connected_peers"`
	Agent            string              `json:"agent"`
	HeartbeatSeconds int                 `json:"heartbeat_seconds"`
	MaxMessageChars  int                 `json:"max_message_chars"`
	TokensRequired   bool                `json:"tokens_required"`

	ClientCertRequired bool `json:"client_cert_required"` // mutual TLS (clientCA)
}

func (s *Server) channelStatuses(r *http.Request) []ChannelStatus {
	scheme := "ws"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "wss"
	}
	out := make([]ChannelStatus, 0, len(s.rt.order))
	for _, id := range s.rt.order {
		ch := s.rt.channels[id]
		st := ChannelStatus{
			ChannelID: id, Kind: ch.cfg.Kind, Mode: ch.cfg.Mode, DisplayName: ch.cfg.DisplayName,
			Enabled: ch.cfg.Enabled, State: "disabled", AccountID: ch.cfg.AccountID,
			WebsocketURL: scheme + "://" + r.Host + "/api/channels/" + id + "/ws",
			Capabilities: ChannelCapabilities{ReceiveText: true, SendText: true, PersistentConnection: true, Progress: true, Cancel: true},
			Agent:        ch.cfg.Agent, HeartbeatSeconds: ch.cfg.Config.HeartbeatSeconds,
			MaxMessageChars: ch.cfg.Config.MaxMessageChars, TokensRequired: ch.cfg.Config.Tokens.Enabled(),
		}
		st.ClientCertRequired = ch.cfg.Config.ClientCA != ""
		if at := ch.events.LastAt(); !at.IsZero() {
			st.LastEventAt = &at
		}
		if ch.adapter != nil {
			st.State = "running"
			st.ConnectedPeers = ch.adapter.ConnectedPeers()
		}
		out = append(out, st)
	}
	return out
}

func (s *Server) serveChannels(w http.ResponseWriter, r *http.Request) {
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"channels": s.channelStatuses(r)})
}

func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	running, waiting := s.router.Load()
	chs := s.channelStatuses(r)
	peers := 0
	for _, c := range chs {
		peers += c.ConnectedPeers
	}
	status, problem := "ok", ""
	if ok, reason := s.rt.health(); !ok {
		status, problem = "degraded", reason
	}
	body := map[string]any{
		"status":          status,
		"problem":         problem,
		"started_at":      s.started.UTC().Format(time.RFC3339),
		"uptime_seconds":  int64(time.Since(s.started).Seconds()),
		"connected_peers": peers,
		"runs_running":    running,
		"runs_waiting":    waiting,
		"channels":        chs,
	}
	if st := s.rt.records.Status; st != nil {
		body["cluster"] = st.Status(r.Context())
	}
	httpapi.WriteJSON(w, http.StatusOK, body)
}

// serveWhoami says who the guard let through: the admin token's name and
// role, and whether a login (a token) was needed at all ("login": false
// when the server has no admin tokens and answers its own machine).
func (s *Server) serveWhoami(w http.ResponseWriter, r *http.Request) {
	op := httpapi.OperatorOf(r)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"name": op.Name, "role": op.Role.String(), "login": s.cfg.Admin.Enabled()})
}
