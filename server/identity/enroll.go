package identity

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"time"

	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/registry"
	"termlink/server/throttle"
)

// Enrollment by pairing code (issue 14; the shape of RFC 8628's device
// grant). A device with no token POSTs to the channel's enroll endpoint
// (no credentials) and gets a short code and a device code; it shows the
// code on its screen and polls .../enroll/token with the device code. An
// operator approves the code (POST /api/enrollments/{code}/approve) or
// denies it (DELETE /api/enrollments/{code}); the server makes a device
// token, binds its digest to the peer (Bindings.Enroll) and hands the
// token to the device's next poll, once.
//
// Nobody without credentials can lock enrollment (issue 22):
//   - The operator routes take the operator's own authentication (the
//     server's guard) and no limit: what devices do never refuses an
//     operator.
//   - The device routes are limited per source network (IPv4 /24, IPv6
//     /64; an IPv4-mapped IPv6 address counts as IPv4): codes asked for,
//     unknown device codes polled, and codes pending at once. A network
//     past its budget gets 429; other networks are unaffected.
//   - A known device code is limited on its own: polled faster than half
//     its interval it answers slow_down (RFC 8628) and its interval grows.
//     The network's budget for unknown codes never refuses a known one,
//     so real devices behind a guessing neighbour keep polling.
//   - A code whose device stops polling (IdlePolls intervals) is dropped,
//     from the list and the console too; the global cap (MaxPending) when
//     full gives a network holding fewer codes room by dropping the oldest
//     unapproved code of the network holding the most.
//   - A device code dropped (expired, abandoned, evicted, denied) is
//     remembered (maxDropped) so its device's next poll says why
//     (expired_token: ask for a new code; access_denied) instead of
//     invalid_grant.
// Guessing stays infeasible: a device code is 256 random bits, and a
// pairing code (30 bits) is only taken by the operator's approval.

const (
	enrollPattern      = "POST /api/channels/{channel_id}/enroll"
	enrollTokenPattern = "POST /api/channels/{channel_id}/enroll/token"

	defaultCodeSeconds = 600
	NetCodeBurst       = 16 // codes one network may ask for at once,
	NetCodeEvery       = 4 * time.Second
	NetBadPollBurst    = 16 // unknown device codes one network may poll at once,
	netBadPollEvery    = 4 * time.Second
	maxEnrollBody      = 4 << 10
	maxEcho            = 80 // bytes of a path value an error repeats

	accessDenied = "access_denied" // RFC 8628 section 3.5
)

func tooMany(w http.ResponseWriter, retry time.Duration, what string) {
	secs := max(int(math.Ceil(retry.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	httpapi.WriteJSON(w, http.StatusTooManyRequests, enroll.ErrorResponse{Error: "rate_limited",
		Description: fmt.Sprintf("%s; try again in %d s", what, secs)})
}

func (s *Service) enrollChannel(w http.ResponseWriter, r *http.Request) (Channel, bool) {
	id := r.PathValue("channel_id")
	ch, ok := s.channels[id]
	switch {
	case !ok:
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(throttle.Cut(id, maxEcho))+" is configured")
	case !ch.Enabled:
		httpapi.WriteError(w, http.StatusServiceUnavailable, "channel "+strconv.Quote(id)+" is disabled")
	case !ch.Config.Enrollment:
		httpapi.WriteError(w, http.StatusNotFound, "enrollment is off on channel "+strconv.Quote(id)+" (set \"enrollment\": true in its config)")
	default:
		return ch, true
	}
	return ch, false
}

func randomSecret(prefix string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// peerIDRule is what a peer_id refused is told.
const peerIDRule = "must be 1-128 characters of A-Z a-z 0-9 . _ @ + - (starting with a letter or digit)"

func (s *Service) startEnroll(w http.ResponseWriter, r *http.Request) {
	ch, ok := s.enrollChannel(w, r)
	if !ok {
		return
	}
	now, network := s.Now(), sourceNet(r.RemoteAddr)
	if ok, retry := s.codeLimit.take(network, now); !ok {
		tooMany(w, retry, fmt.Sprintf("too many pairing codes asked for from %s (%d at once, then one every %s)", netName(network), NetCodeBurst, NetCodeEvery))
		return
	}
	var req enroll.StartRequest
	if err := httpapi.Decode(r, maxEnrollBody, &req); err != nil {
		httpapi.DecodeError(w, fmt.Errorf("enroll: %w", err))
		return
	}
	if req.PeerID != "" && !ValidPeerID(req.PeerID) {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("enroll: peer_id %q "+peerIDRule, req.PeerID))
		return
	}
	if len(req.DeviceName) > registry.MaxField {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("enroll: device_name must be at most %d bytes (this one has %d)", registry.MaxField, len(req.DeviceName)))
		return
	}
	deviceCode, err := randomSecret("")
	if err != nil {
		httpapi.WriteError(w, http.StatusInternalServerError, "enroll: no randomness: "+err.Error())
		return
	}
	ttl := time.Duration(ch.Config.EnrollmentCodeSeconds) * time.Second
	if ttl <= 0 {
		ttl = defaultCodeSeconds * time.Second
	}
	code, evicted, err := s.codes.Start(Pending{ChannelID: ch.ID, DeviceDigest: config.DigestOf(deviceCode), PeerID: req.PeerID, Name: req.DeviceName,
		Remote: r.RemoteAddr, Network: network, Requested: now, Expiry: now.Add(ttl), LastPoll: now, Interval: PollInterval * time.Second}, now)
	if evicted != nil {
		s.warnEvicted(now, evicted, network)
	}
	var netFull *NetFullError
	switch {
	case errors.As(err, &netFull):
		tooMany(w, IdlePolls*PollInterval*time.Second, fmt.Sprintf("enroll: %d pairing codes from %s are waiting for approval already (at most %d per network); approve or deny them, or wait until their devices stop polling", netFull.N, netName(network), MaxPendingPerNet))
		return
	case errors.Is(err, ErrFull):
		w.Header().Set("Retry-After", "60")
		httpapi.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("enroll: %d pairing codes are waiting for approval already, and %s holds as many as any other network; try again later", MaxPending, netName(network)))
		return
	case err != nil:
		httpapi.WriteError(w, http.StatusInternalServerError, "enroll: "+err.Error())
		return
	}

	// Anyone may ask for codes: their event and line go through the
	// gate, per network and per kind (the operator sees every code
	// pending in GET /api/enrollments, gated or not).
	detail := fmt.Sprintf("pairing code asked for (remote=%s device_name=%q); approve it with POST /api/enrollments/{code}/approve", r.RemoteAddr, req.DeviceName)
	if GateNet(s.gate, evEnrollmentRequested, r.RemoteAddr, detail) {
		ch.Events.Add(events.Event{Event: evEnrollmentRequested, PeerID: req.PeerID, Detail: detail})
		s.log.Info("pairing code issued", "channel", ch.ID, "remote", r.RemoteAddr, "peer_id", req.PeerID, "expires_in", ttl.String())
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	httpapi.WriteJSON(w, http.StatusOK, enroll.Grant{Code: code, DeviceCode: deviceCode, VerificationURI: scheme + "://" + r.Host + "/",
		ExpiresIn: int(ttl / time.Second), Interval: PollInterval})
}

// warnEvicted logs a code dropped at the cap: one line a minute at most,
// since a flood from many networks evicts on every request.
func (s *Service) warnEvicted(now time.Time, victim *Pending, network netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.evicted++; now.Sub(s.capWarned) >= time.Minute || now.Before(s.capWarned) {
		evicted := s.evicted
		s.evicted, s.capWarned = 0, now
		s.log.Warn("pairing codes at the cap: the oldest unapproved code of the network holding the most made room for another network",
			"cap", MaxPending, "dropped_since_last_warning", evicted, "last_dropped_from", netName(victim.Network), "for", netName(network))
	}
}

// droppedAnswer is the poll answer for a device code that left before
// its token was collected.
func droppedAnswer(why Drop, idle time.Duration) enroll.ErrorResponse {
	switch why {
	case DropDenied:
		return enroll.ErrorResponse{Error: accessDenied, Description: "an operator denied this pairing code"}
	case DropAbandoned:
		return enroll.ErrorResponse{Error: enroll.Expired, Description: fmt.Sprintf("the pairing code was dropped: it was not polled for %s; ask for a new one", idle)}
	case DropEvicted:
		return enroll.ErrorResponse{Error: enroll.Expired, Description: "the pairing code was dropped to make room (all are taken, most by the network this one came from); ask for a new one"}
	}
	return enroll.ErrorResponse{Error: enroll.Expired, Description: "the pairing code expired before an operator approved it: ask for a new one"}
}

func (s *Service) pollEnroll(w http.ResponseWriter, r *http.Request) {
	ch, ok := s.enrollChannel(w, r)
	if !ok {
		return
	}
	now, network := s.Now(), sourceNet(r.RemoteAddr)
	var req enroll.TokenRequest
	if err := httpapi.Decode(r, maxEnrollBody, &req); err != nil || req.DeviceCode == "" {
		httpapi.WriteJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: "invalid_request", Description: "send {\"device_code\": ...} from the enroll answer"})
		return
	}
	res := s.codes.Poll(ch.ID, config.DigestOf(req.DeviceCode), now)
	p := res.Pending
	switch res.Outcome {
	case PollDropped:
		httpapi.WriteJSON(w, http.StatusBadRequest, droppedAnswer(res.Dropped, IdlePolls*PollInterval*time.Second))
	case PollUnknown:
		// Only an unknown device code costs its network: a device
		// that lost its code pays once, then asks for a new one.
		if ok, retry := s.badPollLimit.take(network, now); !ok {
			tooMany(w, retry, fmt.Sprintf("too many unknown device codes polled from %s (%d at once, then one every %s)", netName(network), NetBadPollBurst, netBadPollEvery))
			return
		}
		httpapi.WriteJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: enroll.Invalid, Description: "unknown device code (already used, or never issued): ask for a new pairing code"})
	case PollToken:
		s.log.Info("device token collected by the enrolled device", "channel", ch.ID, "peer_id", p.PeerID, "remote", r.RemoteAddr)
		httpapi.WriteJSON(w, http.StatusOK, enroll.TokenResponse{Token: p.Token, PeerID: p.PeerID, ChannelID: ch.ID})
	case PollSlowDown:
		httpapi.WriteJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: enroll.SlowDown,
			Description: fmt.Sprintf("polled %s after the last poll; poll every %s from now on", res.Since.Round(time.Millisecond), p.Interval)})
	default:
		httpapi.WriteJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: enroll.Pending, Description: "waiting for an operator to approve code " + p.Code})
	}
}

// checkTags holds operator tags to what the registry takes from devices.
func checkTags(tags map[string]string) error {
	if len(tags) > registry.MaxTags {
		return fmt.Errorf("at most %d tags", registry.MaxTags)
	}
	kv := make([]string, 0, len(tags))
	for k, v := range tags {
		kv = append(kv, k+":"+v)
	}
	_, err := registry.ParseTagFilter(kv)
	return err
}

// PendingView is a pending code as GET /api/enrollments shows it.
type PendingView struct {
	Code        string    `json:"code"`
	ChannelID   string    `json:"channel_id"`
	PeerID      string    `json:"peer_id,omitempty"`
	DeviceName  string    `json:"device_name,omitempty"`
	Remote      string    `json:"remote"`
	Network     string    `json:"network"` // the source network it is limited by
	RequestedAt time.Time `json:"requested_at"`
	LastPollAt  time.Time `json:"last_poll_at"` // requested_at until its device polls
	ExpiresAt   time.Time `json:"expires_at"`
	Approved    bool      `json:"approved"`
}

func (s *Service) listEnrollments(w http.ResponseWriter, _ *http.Request) {
	list := s.codes.List(s.Now())
	out := make([]PendingView, 0, len(list))
	for _, p := range list {
		out = append(out, PendingView{Code: p.Code, ChannelID: p.ChannelID, PeerID: p.PeerID, DeviceName: p.Name, Remote: p.Remote,
			Network: p.Network.String(), RequestedAt: p.Requested.UTC(), LastPollAt: p.LastPoll.UTC(), ExpiresAt: p.Expiry.UTC(), Approved: p.Approved})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RequestedAt.Before(out[j].RequestedAt) })
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"enrollments": out})
}

// approveRequest is the body of POST /api/enrollments/{code}/approve.
type approveRequest struct {
	PeerID string            `json:"peer_id"`
	Name   string            `json:"name"`
	Tags   map[string]string `json:"tags"`
}

// apiError is an answer decided under the codes' lock.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// notPending answers a pairing code the operator typed that is not
// pending: 410 when it was dropped lately, with why; else 404.
func notPending(w http.ResponseWriter, e *NotPendingError) {
	code := e.Code
	switch {
	case !e.Gone:
		httpapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no pending pairing code %s: mistyped, already used, or gone long ago (GET /api/enrollments lists the pending ones)", code))
	case e.Why == DropExpired:
		httpapi.WriteError(w, http.StatusGone, "pairing code "+code+" expired; the device asks for a new one")
	case e.Why == DropAbandoned:
		httpapi.WriteError(w, http.StatusGone, fmt.Sprintf("pairing code %s was dropped: its device stopped polling (none for %d s); a device still waiting asks for a new one", code, IdlePolls*PollInterval))
	case e.Why == DropEvicted:
		httpapi.WriteError(w, http.StatusGone, "pairing code "+code+" was dropped to make room for a device of another network (all codes were taken); the device asks for a new one")
	default:
		httpapi.WriteError(w, http.StatusGone, "pairing code "+code+" was denied")
	}
}

// approveEnroll and denyEnroll are operator routes: the guard has
// authenticated the operator, and nothing a device does limits them.
func (s *Service) approveEnroll(w http.ResponseWriter, r *http.Request) {
	now := s.Now()
	code, err := enroll.ParseCode(r.PathValue("code"))
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var req approveRequest
	if err := httpapi.Decode(r, maxEnrollBody, &req); err != nil {
		httpapi.DecodeError(w, fmt.Errorf("approve: %w", err))
		return
	}
	op := httpapi.OperatorOf(r)
	var ch Channel
	var name string
	p, err := s.codes.Approve(code, now, func(p Pending) (Approval, error) {
		peer := req.PeerID
		if peer == "" {
			peer = p.PeerID
		}
		switch {
		case peer == "":
			return Approval{}, &apiError{http.StatusBadRequest, "approve: give \"peer_id\": the device suggested none"}
		case !ValidPeerID(peer):
			return Approval{}, &apiError{http.StatusBadRequest, fmt.Sprintf("approve: peer_id %q "+peerIDRule, peer)}
		}
		if err := checkTags(req.Tags); err != nil {
			return Approval{}, &apiError{http.StatusBadRequest, "approve: " + err.Error()}
		}
		if len(req.Name) > registry.MaxField {
			return Approval{}, &apiError{http.StatusBadRequest, fmt.Sprintf("approve: name must be at most %d bytes (this one has %d)", registry.MaxField, len(req.Name))}
		}
		ch = s.channels[p.ChannelID]
		if _, exact := ch.Config.Tokens.Exact(peer); exact {
			return Approval{}, &apiError{http.StatusConflict, "approve: peer_id " + peer + " has its own token in the config; choose another peer_id"}
		}
		token, err := randomSecret("tl_")
		if err != nil {
			return Approval{}, &apiError{http.StatusInternalServerError, "approve: no randomness: " + err.Error()}
		}
		name = req.Name
		if name == "" {
			name = p.Name
		}
		b := Binding{PeerID: peer, Source: BindEnrolled, BoundAt: now.UTC(), Remote: p.Remote, Name: name, Tags: req.Tags, ApprovedBy: op.Name}
		if err := ch.Bindings.Enroll(config.DigestOf(token), b); err != nil {
			if errors.Is(err, ErrClaimed) {
				return Approval{}, &apiError{http.StatusConflict, "approve: " + err.Error()}
			}
			s.log.Error("enrolled token not kept", "channel", ch.ID, "peer_id", peer, "err", err)
			return Approval{}, &apiError{http.StatusInternalServerError, "approve: the token could not be kept: " + err.Error()}
		}
		return Approval{PeerID: peer, Token: token, By: op.Name}, nil
	})
	var np *NotPendingError
	var ap *ApprovedError
	var ae *apiError
	switch {
	case errors.As(err, &np):
		notPending(w, np)
		return
	case errors.As(err, &ap):
		httpapi.WriteError(w, http.StatusConflict, "pairing code "+code+" is already approved (for peer_id "+ap.Pending.PeerID+"); codes are single use")
		return
	case errors.As(err, &ae):
		httpapi.WriteError(w, ae.status, ae.msg)
		return
	case errors.Is(err, ErrInProgress):
		httpapi.WriteError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		httpapi.WriteError(w, http.StatusInternalServerError, "approve: "+err.Error())
		return
	}
	ch.Events.Add(events.Event{Event: EvCredentialBound, PeerID: p.PeerID,
		Detail: fmt.Sprintf("enrolled by operator %s with a pairing code (device remote=%s name=%q)", op.Name, p.Remote, name)})
	s.log.Info("enrollment approved", "channel", ch.ID, "peer_id", p.PeerID, "operator", op.Name, "device_remote", p.Remote)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"code": code, "channel_id": ch.ID, "peer_id": p.PeerID, "name": name, "tags": req.Tags,
		"note": "the device collects its token on its next poll"})
}

// denyEnroll drops a pending code (DELETE /api/enrollments/{code}); its
// device's next poll answers access_denied.
func (s *Service) denyEnroll(w http.ResponseWriter, r *http.Request) {
	code, err := enroll.ParseCode(r.PathValue("code"))
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	p, err := s.codes.Deny(code, s.Now())
	var np *NotPendingError
	var ap *ApprovedError
	switch {
	case errors.As(err, &np):
		notPending(w, np)
		return
	case errors.As(err, &ap):
		httpapi.WriteError(w, http.StatusConflict, "pairing code "+code+" is approved already (peer_id "+ap.Pending.PeerID+"); revoke its token with DELETE /api/channels/"+ap.Pending.ChannelID+"/bindings/"+ap.Pending.PeerID)
		return
	case errors.Is(err, ErrInProgress):
		httpapi.WriteError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		httpapi.WriteError(w, http.StatusInternalServerError, "deny: "+err.Error())
		return
	}
	op := httpapi.OperatorOf(r)
	s.log.Info("enrollment denied", "channel", p.ChannelID, "code", code, "operator", op.Name, "device_remote", p.Remote)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"code": code, "channel_id": p.ChannelID, "denied": true,
		"note": "the device is told on its next poll (access_denied)"})
}
