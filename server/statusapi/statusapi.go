// Package statusapi is what the server says of itself over HTTP:
// /api/status, /api/channels, /api/whoami (the console's role-aware
// controls), /healthz and /metrics.
package statusapi

import (
	"context"
	"net/http"
	"time"

	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/metrics"
)

// Capabilities are what a channel can do, as the spec lists them.
type Capabilities struct {
	ReceiveText          bool `json:"receive_text"`
	SendText             bool `json:"send_text"`
	PersistentConnection bool `json:"persistent_connection"`
	Progress             bool `json:"progress"`
	Cancel               bool `json:"cancel"`
}

// ChannelStatus is one channel in /api/status and /api/channels.
type ChannelStatus struct {
	ChannelID        string       `json:"channel_id"`
	Kind             string       `json:"kind"`
	Mode             string       `json:"mode"`
	DisplayName      string       `json:"display_name"`
	Enabled          bool         `json:"enabled"`
	State            string       `json:"state"`
	AccountID        string       `json:"account_id"`
	LastEventAt      *time.Time   `json:"last_event_at"`
	WebsocketURL     string       `json:"websocket_url"`
	Capabilities     Capabilities `json:"capabilities"`
	ConnectedPeers   int          `json:"connected_peers"`
	Agent            string       `json:"agent"`
	HeartbeatSeconds int          `json:"heartbeat_seconds"`
	MaxMessageChars  int          `json:"max_message_chars"`
	TokensRequired   bool         `json:"tokens_required"`

	ClientCertRequired bool `json:"client_cert_required"` // mutual TLS (clientCA)
}

// Channel is one configured channel as the status reads it.
type Channel struct {
	ID      string
	Config  config.Channel
	Events  *events.Log
	Adapter interface{ ConnectedPeers() int } // nil: disabled
}

// Deps are what the status reads.
type Deps struct {
	Channels func() []Channel // in order
	Load     func() (running, waiting int)
	Health   func() (ok bool, reason string) // the store of record's
	Cluster  func(ctx context.Context) any   // nil: a single server
	Metrics  *metrics.Registry
	Login    bool // the server has admin tokens
	Started  time.Time
}

// Routes registers the status routes.
func Routes(mux httpapi.Mux, d Deps) {
	mux.HandleFunc("GET /api/channels", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"channels": d.channels(r)})
	})
	mux.HandleFunc("GET /api/status", d.serveStatus)
	mux.HandleFunc("GET /api/whoami", func(w http.ResponseWriter, r *http.Request) {
		// Who the guard let through: the admin token's name and role, and
		// whether a login (a token) was needed at all ("login": false when
		// the server has no admin tokens and answers its own machine).
		op := httpapi.OperatorOf(r)
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"name": op.Name, "role": op.Role.String(), "login": d.Login})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ok, reason := d.Health(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(reason + "\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		d.Metrics.WriteText(w)
	})
}

func (d Deps) channels(r *http.Request) []ChannelStatus {
	scheme := "ws"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "wss"
	}
	chs := d.Channels()
	out := make([]ChannelStatus, 0, len(chs))
	for _, ch := range chs {
		c := ch.Config
		st := ChannelStatus{
			ChannelID: ch.ID, Kind: c.Kind, Mode: c.Mode, DisplayName: c.DisplayName,
			Enabled: c.Enabled, State: "disabled", AccountID: c.AccountID,
			WebsocketURL: scheme + "://" + r.Host + "/api/channels/" + ch.ID + "/ws",
			Capabilities: Capabilities{ReceiveText: true, SendText: true, PersistentConnection: true, Progress: true, Cancel: true},
			Agent:        c.Agent, HeartbeatSeconds: c.Config.HeartbeatSeconds,
			MaxMessageChars: c.Config.MaxMessageChars, TokensRequired: c.Config.Tokens.Enabled(),
		}
		st.ClientCertRequired = c.Config.ClientCA != ""
		if at := ch.Events.LastAt(); !at.IsZero() {
			st.LastEventAt = &at
		}
		if ch.Adapter != nil {
			st.State = "running"
			st.ConnectedPeers = ch.Adapter.ConnectedPeers()
		}
		out = append(out, st)
	}
	return out
}

func (d Deps) serveStatus(w http.ResponseWriter, r *http.Request) {
	running, waiting := d.Load()
	chs := d.channels(r)
	peers := 0
	for _, c := range chs {
		peers += c.ConnectedPeers
	}
	status, problem := "ok", ""
	if ok, reason := d.Health(); !ok {
		status, problem = "degraded", reason
	}
	body := map[string]any{
		"status":          status,
		"problem":         problem,
		"started_at":      d.Started.UTC().Format(time.RFC3339),
		"uptime_seconds":  int64(time.Since(d.Started).Seconds()),
		"connected_peers": peers,
		"runs_running":    running,
		"runs_waiting":    waiting,
		"channels":        chs,
	}
	if d.Cluster != nil {
		body["cluster"] = d.Cluster(r.Context())
	}
	httpapi.WriteJSON(w, http.StatusOK, body)
}
