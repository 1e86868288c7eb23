package identity

import (
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/throttle"
)

// Channel is one configured channel as the identity routes see it.
type Channel struct {
	ID       string
	Enabled  bool // false: configured, but off
	Config   config.ChannelConfig
	Bindings Bindings    // the channel's learnt credentials
	Events   *events.Log // where refusals, bindings and requests are told
}

// Options build a Service.
type Options struct {
	Channels map[string]Channel // by id
	Codes    Codes              // nil: NewLocalCodes()
	Log      *slog.Logger       // nil: slog.Default()
	// Gate admits what a device without credentials makes the service
	// write (the server's one gate, Runtime.outside; nil: all of it).
	Gate *throttle.Gate
}

// Service serves the identity routes: the bindings API and enrollment.
type Service struct {
	// Now is the enrollment clock (time.Now; a test sets its own before
	// the Service serves).
	Now func() time.Time

	channels map[string]Channel
	codes    Codes
	log      *slog.Logger
	gate     *throttle.Gate

	// codeLimit charges each code asked for, badPollLimit each unknown
	// device code polled, per source network (this Service's).
	codeLimit, badPollLimit *netLimiter

	mu        sync.Mutex
	evicted   int       // codes dropped at the cap since capWarned
	capWarned time.Time // when the log last said so
}

// New returns the Service of opt's channels.
func New(opt Options) *Service {
	s := &Service{Now: time.Now, channels: opt.Channels, codes: opt.Codes, log: opt.Log, gate: opt.Gate,
		codeLimit:    newNetLimiter(NetCodeBurst, NetCodeEvery),
		badPollLimit: newNetLimiter(NetBadPollBurst, netBadPollEvery)}
	if s.codes == nil {
		s.codes = NewLocalCodes()
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// Routes registers the identity routes on mux, behind the server's guard:
// the bindings API (GET for viewers, DELETE for operators), the device's
// two enroll endpoints (device routes: no admin token) and the operator's
// enrollment routes.
func (s *Service) Routes(mux httpapi.Mux) {
	mux.HandleFunc("GET /api/channels/{channel_id}/bindings", s.getBindings)
	mux.HandleFunc("DELETE /api/channels/{channel_id}/bindings/{peer_id}", s.deleteBinding)
	httpapi.HandleClass(mux, enrollPattern, httpapi.DeviceRoute, s.startEnroll)
	httpapi.HandleClass(mux, enrollTokenPattern, httpapi.DeviceRoute, s.pollEnroll)
	mux.HandleFunc("GET /api/enrollments", s.listEnrollments) // viewers may see codes; approving takes an operator
	mux.HandleFunc("POST /api/enrollments/{code}/approve", s.approveEnroll)
	mux.HandleFunc("DELETE /api/enrollments/{code}", s.denyEnroll)
}

// BindingView is a binding as the API shows it: the token's digest cut to
// a fingerprint.
type BindingView struct {
	PeerID      string            `json:"peer_id"`
	Source      string            `json:"source"`
	Fingerprint string            `json:"token_fingerprint"` // first 12 hex digits of the token's SHA-256
	BoundAt     time.Time         `json:"bound_at"`
	Remote      string            `json:"remote,omitempty"`
	Name        string            `json:"name,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	ApprovedBy  string            `json:"approved_by,omitempty"`
}

func (s *Service) credChannel(w http.ResponseWriter, r *http.Request) (Channel, bool) {
	id := r.PathValue("channel_id")
	ch, ok := s.channels[id]
	if !ok || ch.Bindings == nil {
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(id)+" is configured")
		return ch, false
	}
	return ch, true
}

func (s *Service) getBindings(w http.ResponseWriter, r *http.Request) {
	ch, ok := s.credChannel(w, r)
	if !ok {
		return
	}
	out := []BindingView{}
	for _, b := range ch.Bindings.List() {
		fp := b.Digest
		if len(fp) > 12 {
			fp = fp[:12]
		}
		out = append(out, BindingView{PeerID: b.PeerID, Source: b.Source, Fingerprint: fp, BoundAt: b.BoundAt, Remote: b.Remote, Name: b.Name,
			Tags: b.Tags, ApprovedBy: b.ApprovedBy})
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"channel_id": ch.ID, "bindings": out})
}

func (s *Service) deleteBinding(w http.ResponseWriter, r *http.Request) {
	ch, ok := s.credChannel(w, r)
	if !ok {
		return
	}
	peer := r.PathValue("peer_id")
	b, err := ch.Bindings.Reset(peer)
	switch {
	case err != nil:
		s.log.Error("resetting a binding not kept", "channel_id", ch.ID, "peer_id", peer, "err", err)
		httpapi.WriteError(w, http.StatusInternalServerError, "the binding was removed in memory but not on disk: "+err.Error())
		return
	case b == nil:
		httpapi.WriteError(w, http.StatusNotFound, "peer_id "+strconv.Quote(peer)+" has no binding on channel "+ch.ID)
		return
	}
	op := httpapi.OperatorOf(r)
	ch.Events.Add(events.Event{Event: evCredentialReset, PeerID: peer,
		Detail: "binding reset by operator " + op.Name + " (" + b.Source + "): the peer's token no longer binds it"})
	s.log.Info("device binding reset", "channel_id", ch.ID, "peer_id", peer, "source", b.Source, "operator", op.Name)
	w.WriteHeader(http.StatusNoContent)
}
