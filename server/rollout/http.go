package rollout

import (
	"errors"
	"net/http"

	"termlink/release"
	"termlink/server/httpapi"
)

// maxBody bounds a rollout request's body: a list of MaxDevices peers.
const maxBody = 2 << 20

// Routes registers the rollout routes (writes take the operator role,
// reads the viewer role: the guard's rule by method):
//
//	POST /api/channels/{channel_id}/rollouts                              start one (Request) -> 201
//	GET  /api/channels/{channel_id}/rollouts[?version=V]                  the channel's rollouts, newest first
//	GET  /api/channels/{channel_id}/rollouts/{rollout_id}                 one, with each device's state
//	POST /api/channels/{channel_id}/rollouts/{rollout_id}/pause
//	POST /api/channels/{channel_id}/rollouts/{rollout_id}/resume          {"retry": true}: the failed devices again
//	POST /api/channels/{channel_id}/rollouts/{rollout_id}/abort
func (m *Manager) Routes(mux httpapi.Mux) {
	mux.HandleFunc("POST /api/channels/{channel_id}/rollouts", m.serveCreate)
	mux.HandleFunc("GET /api/channels/{channel_id}/rollouts", m.serveList)
	mux.HandleFunc("GET /api/channels/{channel_id}/rollouts/{rollout_id}", m.serveGet)
	mux.HandleFunc("POST /api/channels/{channel_id}/rollouts/{rollout_id}/pause", m.serveAction(func(ch, id, by string, _ bool) (Rollout, error) {
		return m.Pause(ch, id, by)
	}))
	mux.HandleFunc("POST /api/channels/{channel_id}/rollouts/{rollout_id}/resume", m.serveAction(m.Resume))
	mux.HandleFunc("POST /api/channels/{channel_id}/rollouts/{rollout_id}/abort", m.serveAction(func(ch, id, by string, _ bool) (Rollout, error) {
		return m.Abort(ch, id, by)
	}))
}

func answer(w http.ResponseWriter, err error) {
	var e *Error
	if errors.As(err, &e) {
		httpapi.WriteError(w, e.Status, e.Msg)
		return
	}
	httpapi.WriteError(w, http.StatusInternalServerError, err.Error())
}

func (m *Manager) serveCreate(w http.ResponseWriter, r *http.Request) {
	var q Request
	if err := httpapi.Decode(r, maxBody, &q); err != nil {
		httpapi.DecodeError(w, err)
		return
	}
	ro, err := m.Create(r.PathValue("channel_id"), q, httpapi.OperatorOf(r).Name)
	if err != nil {
		answer(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusCreated, ro)
}

func (m *Manager) serveList(w http.ResponseWriter, r *http.Request) {
	ch := r.PathValue("channel_id")
	if !m.channels[ch] {
		answer(w, refuse(404, "no channel %q is configured", ch))
		return
	}
	v := r.URL.Query().Get("version")
	if v != "" {
		if err := release.CheckVersion(v); err != nil {
			httpapi.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"rollouts": m.List(ch, v)})
}

func (m *Manager) serveGet(w http.ResponseWriter, r *http.Request) {
	ro, err := m.Get(r.PathValue("channel_id"), r.PathValue("rollout_id"))
	if err != nil {
		answer(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, ro)
}

// serveAction serves an operator action on one rollout; its body is
// empty or {"retry": bool} (resume's).
func (m *Manager) serveAction(act func(channelID, id, by string, retry bool) (Rollout, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Retry bool `json:"retry,omitempty"`
		}
		if err := httpapi.Decode(r, 4<<10, &body); err != nil {
			httpapi.DecodeError(w, err)
			return
		}
		ro, err := act(r.PathValue("channel_id"), r.PathValue("rollout_id"), httpapi.OperatorOf(r).Name, body.Retry)
		if err != nil {
			answer(w, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, ro)
	}
}
