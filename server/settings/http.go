package settings

import (
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"

	"termlink/link"
	"termlink/server/httpapi"
	"termlink/server/registry"
)

// Routes registers the settings API (the guard asks the viewer role for
// GET, the operator role for PUT and DELETE):
//
//	GET    /api/channels/{channel_id}/settings                        every document, the version
//	PUT    /api/channels/{channel_id}/settings/peers/{peer_id}         a peer's document (replaced whole)
//	DELETE /api/channels/{channel_id}/settings/peers/{peer_id}
//	PUT    /api/channels/{channel_id}/settings/tags/{key}/{value}      a tag's document
//	DELETE /api/channels/{channel_id}/settings/tags/{key}/{value}
//	GET    /api/channels/{channel_id}/peers/{peer_id}/settings         a device's effective settings, applied version, error
func (s *Store) Routes(mux httpapi.Mux) {
	mux.HandleFunc("GET /api/channels/{channel_id}/settings", s.serveList)
	mux.HandleFunc("PUT /api/channels/{channel_id}/settings/peers/{peer_id}", s.servePut)
	mux.HandleFunc("DELETE /api/channels/{channel_id}/settings/peers/{peer_id}", s.serveDelete)
	mux.HandleFunc("PUT /api/channels/{channel_id}/settings/tags/{key}/{value}", s.servePut)
	mux.HandleFunc("DELETE /api/channels/{channel_id}/settings/tags/{key}/{value}", s.serveDelete)
	mux.HandleFunc("GET /api/channels/{channel_id}/peers/{peer_id}/settings", s.servePeer)
}

// channelOf is the request's channel, or false once answered 404.
func (s *Store) channelOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("channel_id")
	if s.deps.Channel != nil && !s.deps.Channel(id) {
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(httpapi.TruncateUTF8(id, 100))+" is configured")
		return "", false
	}
	return id, true
}

// selectorOf is the document a write names, or false once answered 400.
func selectorOf(w http.ResponseWriter, r *http.Request) (Selector, bool) {
	if p := r.PathValue("peer_id"); p != "" {
		if err := CheckPeerID(p); err != nil {
			httpapi.WriteError(w, http.StatusBadRequest, "peer_id: "+err.Error())
			return Selector{}, false
		}
		return Selector{PeerID: p}, true
	}
	k, v := r.PathValue("key"), r.PathValue("value")
	if err := registry.CheckTag(k, v); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, "tag "+strconv.Quote(httpapi.TruncateUTF8(k+"="+v, 100))+": "+err.Error())
		return Selector{}, false
	}
	return Selector{Key: k, Value: v}, true
}

// docJSON is a document as the API lists it.
type docJSON struct {
	Tag    string `json:"tag,omitempty"`
	PeerID string `json:"peer_id,omitempty"`
	*Document
}

func (s *Store) serveList(w http.ResponseWriter, r *http.Request) {
	id, ok := s.channelOf(w, r)
	if !ok {
		return
	}
	snap := s.Channel(id)
	out := struct {
		ChannelID    string    `json:"channel_id"`
		Version      int64     `json:"version"`
		Documents    int       `json:"documents"`
		MaxDocuments int       `json:"max_documents"`
		Tags         []docJSON `json:"tags"`
		Peers        []docJSON `json:"peers"`
	}{ChannelID: id, Version: snap.Version, Documents: len(snap.Tags) + len(snap.Peers), MaxDocuments: s.opt.MaxDocuments,
		Tags: []docJSON{}, Peers: []docJSON{}}
	for tag, d := range snap.Tags {
		out.Tags = append(out.Tags, docJSON{Tag: tag, Document: d})
	}
	for peer, d := range snap.Peers {
		out.Peers = append(out.Peers, docJSON{PeerID: peer, Document: d})
	}
	sort.Slice(out.Tags, func(i, j int) bool { return out.Tags[i].Tag < out.Tags[j].Tag })
	sort.Slice(out.Peers, func(i, j int) bool { return out.Peers[i].PeerID < out.Peers[j].PeerID })
	httpapi.WriteJSON(w, http.StatusOK, out)
}

func (s *Store) servePut(w http.ResponseWriter, r *http.Request) {
	id, ok := s.channelOf(w, r)
	if !ok {
		return
	}
	sel, ok := selectorOf(w, r)
	if !ok {
		return
	}
	var f link.Settings
	if err := httpapi.Decode(r, MaxDocumentBytes, &f); err != nil {
		httpapi.DecodeError(w, err)
		return
	}
	if f.Version != 0 {
		httpapi.WriteError(w, http.StatusBadRequest, "version: the server sets it (the channel's settings version): leave it out")
		return
	}
	c, err := s.Put(r.Context(), id, sel, f, httpapi.OperatorOf(r).Name)
	if err != nil {
		writeErr(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, c)
}

func (s *Store) serveDelete(w http.ResponseWriter, r *http.Request) {
	id, ok := s.channelOf(w, r)
	if !ok {
		return
	}
	sel, ok := selectorOf(w, r)
	if !ok {
		return
	}
	c, err := s.Delete(r.Context(), id, sel, httpapi.OperatorOf(r).Name)
	if err != nil {
		writeErr(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, c)
}

// writeErr answers a change's error.
func writeErr(w http.ResponseWriter, err error) {
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		httpapi.WriteError(w, http.StatusBadRequest, fe.Error())
	case errors.Is(err, ErrNotFound):
		httpapi.WriteError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrFull):
		httpapi.WriteError(w, http.StatusInsufficientStorage, err.Error())
	case errors.Is(err, ErrTooLarge):
		httpapi.WriteError(w, http.StatusRequestEntityTooLarge, err.Error())
	case errors.Is(err, ErrBusy):
		httpapi.WriteError(w, http.StatusServiceUnavailable, err.Error())
	default:
		httpapi.WriteError(w, http.StatusInternalServerError, err.Error())
	}
}

// PeerView is a device's settings as GET .../peers/{peer_id}/settings
// shows them.
type PeerView struct {
	ChannelID string `json:"channel_id"`
	PeerID    string `json:"peer_id"`
	// Version is the channel's; Settings the device's effective ones
	// (built from Sources); AppliedVersion what it acked last, Error why
	// it refused a later one; Current: it applied Version.
	Version        int64             `json:"version"`
	Settings       link.Settings     `json:"settings"`
	Sources        []string          `json:"sources"`
	AppliedVersion int64             `json:"applied_version"`
	Error          string            `json:"error,omitempty"`
	Current        bool              `json:"current"`
	Known          bool              `json:"known"`  // in the device registry
	Online         bool              `json:"online"` // connected now
	Listens        bool              `json:"listens"`
	Tags           map[string]string `json:"tags"` // as the registry has them
}

func (s *Store) servePeer(w http.ResponseWriter, r *http.Request) {
	id, ok := s.channelOf(w, r)
	if !ok {
		return
	}
	peer := r.PathValue("peer_id")
	if err := CheckPeerID(peer); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, "peer_id: "+err.Error())
		return
	}
	var p registry.Peer
	known := false
	if s.deps.Registry != nil {
		p, known = s.deps.Registry.Get(id, peer)
	}
	snap := s.Channel(id)
	if !known && snap.Peers[peer] == nil {
		httpapi.WriteError(w, http.StatusNotFound, "channel "+id+" has no device "+strconv.Quote(peer)+" and no settings document for it")
		return
	}
	e := s.Effective(id, peer, p.Tags)
	if e.Sources == nil {
		e.Sources = []string{}
	}
	httpapi.WriteJSON(w, http.StatusOK, PeerView{ChannelID: id, PeerID: peer, Version: e.Settings.Version, Settings: e.Settings,
		Sources: e.Sources, AppliedVersion: p.SettingsVersion, Error: p.SettingsError,
		Current: e.Settings.Version > 0 && p.SettingsVersion == e.Settings.Version, Known: known, Online: p.Online,
		Listens: slices.Contains(p.Capabilities, link.CapSettings), Tags: p.Tags})
}
