package server

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/registry"
)

// Enrollment by pairing code (issue 14; the shape of RFC 8628's device
// grant). A device with no token POSTs to the channel's enroll endpoint
// (no credentials) and gets a short code and a device code; it shows the
// code on its screen and polls .../enroll/token with the device code. An
// operator approves the code (POST /api/enrollments/{code}/approve); the
// server makes a device token, binds its digest to the peer in the
// workspace (credentials.go) and hands the token to the device's next
// poll, once. Codes expire, are single use, and both asking for codes and
// guessing them are rate-limited per remote address.

const (
	enrollPattern      = "POST /api/channels/{channel_id}/enroll"
	enrollTokenPattern = "POST /api/channels/{channel_id}/enroll/token"

	defaultCodeSeconds = 600
	pollInterval       = 2 // seconds between a device's polls
	maxPending         = 1000
	maxEnrollBody      = 4 << 10
)

// deviceOpen reports whether a route takes no admin token: the device
// WebSocket and the enroll endpoints (auth.go's guard).
func deviceOpen(pattern string) bool {
	return pattern == wsPattern || pattern == enrollPattern || pattern == enrollTokenPattern
}

// pending is one code asked for and not yet collected.
type pending struct {
	code, channelID   string
	deviceDigest      config.Digest
	peerID, name      string // suggested by the device; set by the approval
	remote            string
	requested, expiry time.Time
	approved          bool
	approvedBy        string
	token             string // from approval until the device collects it
}

type enrollments struct {
	mu       sync.Mutex
	byCode   map[string]*pending
	byDevice map[config.Digest]*pending
	// codeLimit charges each code asked for; guessLimit each failed
	// approval or unknown device code, per remote address.
	codeLimit, guessLimit *addrLimiter
	now                   func() time.Time
}

func newEnrollments() *enrollments {
	return &enrollments{byCode: map[string]*pending{}, byDevice: map[config.Digest]*pending{},
		codeLimit:  newAddrLimiter(5, 12*time.Second),
		guessLimit: newAddrLimiter(5, 12*time.Second),
		now:        time.Now}
}

// sweepLocked drops what expired.
func (e *enrollments) sweepLocked(now time.Time) {
	for c, p := range e.byCode {
		if now.After(p.expiry) {
			delete(e.byCode, c)
			delete(e.byDevice, p.deviceDigest)
		}
	}
}

func (e *enrollments) dropLocked(p *pending) {
	delete(e.byCode, p.code)
	delete(e.byDevice, p.deviceDigest)
}

// addrLimiter is a token bucket per remote address: burst at once, then
// one per interval.
type addrLimiter struct {
	mu       sync.Mutex
	burst    float64
	interval time.Duration
	buckets  map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newAddrLimiter(burst int, interval time.Duration) *addrLimiter {
	return &addrLimiter{burst: float64(burst), interval: interval, buckets: map[string]*bucket{}}
}

func (l *addrLimiter) refillLocked(addr string, now time.Time) *bucket {
	b := l.buckets[addr]
	if b == nil {
		if len(l.buckets) >= 10000 { // forget full buckets first
			for a, o := range l.buckets {
				if now.Sub(o.last) > time.Duration(l.burst)*l.interval {
					delete(l.buckets, a)
				}
			}
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[addr] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+float64(now.Sub(b.last))/float64(l.interval))
	b.last = now
	return b
}

// allow reports whether addr has a token left (without taking it), and
// else how long until it has.
func (l *addrLimiter) allow(addr string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refillLocked(addr, now)
	if b.tokens >= 1 {
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.interval))
}

// take takes a token if there is one.
func (l *addrLimiter) take(addr string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refillLocked(addr, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.interval))
}

func tooMany(w http.ResponseWriter, retry time.Duration, what string) {
	secs := max(int(math.Ceil(retry.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeJSON(w, http.StatusTooManyRequests, enroll.ErrorResponse{Error: "rate_limited",
		Description: fmt.Sprintf("%s; try again in %d s", what, secs)})
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// enrollRoutes registers the enrollment routes; the device's two take no
// admin token (deviceOpen), the operator's need the operator role.
func (s *Server) enrollRoutes(mux interface {
	HandleFunc(string, func(http.ResponseWriter, *http.Request))
}) {
	s.enroll = newEnrollments()
	mux.HandleFunc(enrollPattern, s.startEnroll)
	mux.HandleFunc(enrollTokenPattern, s.pollEnroll)
	mux.HandleFunc("GET /api/enrollments", s.listEnrollments) // viewers may see codes; approving takes an operator
	mux.HandleFunc("POST /api/enrollments/{code}/approve", s.approveEnroll)
}

func (s *Server) enrollChannel(w http.ResponseWriter, r *http.Request) *channel {
	id := r.PathValue("channel_id")
	ch := s.rt.channels[id]
	switch {
	case ch == nil:
		writeError(w, http.StatusNotFound, "no channel "+strconv.Quote(id)+" is configured")
	case ch.adapter == nil:
		writeError(w, http.StatusServiceUnavailable, "channel "+strconv.Quote(id)+" is disabled")
	case !ch.cfg.Config.Enrollment:
		writeError(w, http.StatusNotFound, "enrollment is off on channel "+strconv.Quote(id)+" (set \"enrollment\": true in its config)")
	default:
		return ch
	}
	return nil
}

// enrollGate begins both device routes: the channel (nil: answered
// already), then the remote address's rate limit (limit takes a token or
// only checks there is one); tooMuch starts the 429's text.
func (s *Server) enrollGate(w http.ResponseWriter, r *http.Request, limit func(string, time.Time) (bool, time.Duration), tooMuch string) (*channel, string, time.Time) {
	addr, now := remoteHost(r), s.enroll.now()
	ch := s.enrollChannel(w, r)
	if ch == nil {
		return nil, addr, now
	}
	if ok, retry := limit(addr, now); !ok {
		tooMany(w, retry, tooMuch+addr)
		return nil, addr, now
	}
	return ch, addr, now
}

// decodeBody reads an optional JSON body into v.
func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxEnrollBody+1))
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if len(b) > maxEnrollBody {
		return fmt.Errorf("the body is longer than %d bytes", maxEnrollBody)
	}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("the body is not the JSON object expected: %v", err)
	}
	return nil
}

func randomSecret(prefix string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func (s *Server) startEnroll(w http.ResponseWriter, r *http.Request) {
	e := s.enroll
	ch, _, now := s.enrollGate(w, r, e.codeLimit.take, "too many pairing codes asked for from ")
	if ch == nil {
		return
	}
	var req enroll.StartRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "enroll: "+err.Error())
		return
	}
	if req.PeerID != "" && !idRE.MatchString(req.PeerID) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("enroll: peer_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + - (starting with a letter or digit)", req.PeerID))
		return
	}
	deviceCode, err := randomSecret("")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "enroll: no randomness: "+err.Error())
		return
	}
	ttl := time.Duration(ch.cfg.Config.EnrollmentCodeSeconds) * time.Second
	if ttl <= 0 {
		ttl = defaultCodeSeconds * time.Second
	}
	e.mu.Lock()
	e.sweepLocked(now)
	if len(e.byCode) >= maxPending {
		e.mu.Unlock()
		w.Header().Set("Retry-After", "60")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("enroll: %d pairing codes are waiting for approval already; try again later", maxPending))
		return
	}
	var code string
	for code == "" || e.byCode[code] != nil {
		if code, err = enroll.NewCode(); err != nil {
			e.mu.Unlock()
			writeError(w, http.StatusInternalServerError, "enroll: "+err.Error())
			return
		}
	}
	p := &pending{code: code, channelID: ch.id, deviceDigest: config.DigestOf(deviceCode), peerID: req.PeerID, name: req.DeviceName,
		remote: r.RemoteAddr, requested: now, expiry: now.Add(ttl)}
	e.byCode[code], e.byDevice[p.deviceDigest] = p, p
	e.mu.Unlock()

	ch.events.Add(events.Event{Event: evEnrollmentRequested, PeerID: req.PeerID,
		Detail: fmt.Sprintf("pairing code asked for (remote=%s device_name=%q); approve it with POST /api/enrollments/{code}/approve", r.RemoteAddr, req.DeviceName)})
	s.log.Info("pairing code issued", "channel", ch.id, "remote", r.RemoteAddr, "peer_id", req.PeerID, "expires_in", ttl.String())
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	writeJSON(w, http.StatusOK, enroll.Grant{Code: code, DeviceCode: deviceCode, VerificationURI: scheme + "://" + r.Host + "/",
		ExpiresIn: int(ttl / time.Second), Interval: pollInterval})
}

func (s *Server) pollEnroll(w http.ResponseWriter, r *http.Request) {
	e := s.enroll
	ch, addr, now := s.enrollGate(w, r, e.guessLimit.allow, "too many unknown device codes or pairing codes from ")
	if ch == nil {
		return
	}
	var req enroll.TokenRequest
	if err := decodeBody(r, &req); err != nil || req.DeviceCode == "" {
		writeJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: "invalid_request", Description: "send {\"device_code\": ...} from the enroll answer"})
		return
	}
	d := config.DigestOf(req.DeviceCode)
	e.mu.Lock()
	p := e.byDevice[d]
	switch {
	case p == nil || p.channelID != ch.id:
		e.mu.Unlock()
		e.guessLimit.take(addr, now)
		writeJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: enroll.Invalid, Description: "unknown device code (already used, or never issued): ask for a new pairing code"})
	case now.After(p.expiry):
		e.dropLocked(p)
		e.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: enroll.Expired, Description: "the pairing code expired before an operator approved it: ask for a new one"})
	case !p.approved:
		e.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: enroll.Pending, Description: "waiting for an operator to approve code " + p.code})
	default:
		e.dropLocked(p) // single use: the token is handed over once
		tok, peer := p.token, p.peerID
		p.token = ""
		e.mu.Unlock()
		s.log.Info("device token collected by the enrolled device", "channel", ch.id, "peer_id", peer, "remote", r.RemoteAddr)
		writeJSON(w, http.StatusOK, enroll.TokenResponse{Token: tok, PeerID: peer, ChannelID: ch.id})
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

// pendingView is a pending code as GET /api/enrollments shows it.
type pendingView struct {
	Code        string    `json:"code"`
	ChannelID   string    `json:"channel_id"`
	PeerID      string    `json:"peer_id,omitempty"`
	DeviceName  string    `json:"device_name,omitempty"`
	Remote      string    `json:"remote"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	Approved    bool      `json:"approved"`
}

func (s *Server) listEnrollments(w http.ResponseWriter, _ *http.Request) {
	e := s.enroll
	e.mu.Lock()
	e.sweepLocked(e.now())
	out := make([]pendingView, 0, len(e.byCode))
	for _, p := range e.byCode {
		out = append(out, pendingView{Code: p.code, ChannelID: p.channelID, PeerID: p.peerID, DeviceName: p.name, Remote: p.remote,
			RequestedAt: p.requested.UTC(), ExpiresAt: p.expiry.UTC(), Approved: p.approved})
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].RequestedAt.Before(out[j].RequestedAt) })
	writeJSON(w, http.StatusOK, map[string]any{"enrollments": out})
}

// approveRequest is the body of POST /api/enrollments/{code}/approve.
type approveRequest struct {
	PeerID string            `json:"peer_id"`
	Name   string            `json:"name"`
	Tags   map[string]string `json:"tags"`
}

func (s *Server) approveEnroll(w http.ResponseWriter, r *http.Request) {
	e, addr := s.enroll, remoteHost(r)
	now := e.now()
	if ok, retry := e.guessLimit.allow(addr, now); !ok {
		tooMany(w, retry, "too many wrong pairing codes from "+addr)
		return
	}
	fail := func(status int, msg string) {
		e.guessLimit.take(addr, now)
		writeError(w, status, msg)
	}
	code, err := enroll.ParseCode(r.PathValue("code"))
	if err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	var req approveRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "approve: "+err.Error())
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.byCode[code]
	switch {
	case p == nil:
		fail(http.StatusNotFound, "no pending pairing code "+code+": mistyped, already used, or expired (GET /api/enrollments lists the pending ones)")
		return
	case now.After(p.expiry):
		e.dropLocked(p)
		fail(http.StatusGone, "pairing code "+code+" expired at "+p.expiry.UTC().Format(time.RFC3339)+"; the device asks for a new one")
		return
	case p.approved:
		fail(http.StatusConflict, "pairing code "+code+" is already approved (for peer_id "+p.peerID+"); codes are single use")
		return
	}
	peer := req.PeerID
	if peer == "" {
		peer = p.peerID
	}
	switch {
	case peer == "":
		writeError(w, http.StatusBadRequest, "approve: give \"peer_id\": the device suggested none")
		return
	case !idRE.MatchString(peer):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("approve: peer_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + - (starting with a letter or digit)", peer))
		return
	}
	if err := checkTags(req.Tags); err != nil {
		writeError(w, http.StatusBadRequest, "approve: "+err.Error())
		return
	}
	ch := s.rt.channels[p.channelID]
	if _, exact := ch.cfg.Config.Tokens.Exact(peer); exact {
		writeError(w, http.StatusConflict, "approve: peer_id "+peer+" has its own token in the config; choose another peer_id")
		return
	}
	token, err := randomSecret("tl_")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "approve: no randomness: "+err.Error())
		return
	}
	name := req.Name
	if name == "" {
		name = p.name
	}
	op := OperatorOf(r)
	b := &binding{PeerID: peer, Source: bindEnrolled, BoundAt: now.UTC(), Remote: p.remote, Name: name, Tags: req.Tags, ApprovedBy: op.Name}
	if err := ch.creds.enroll(config.DigestOf(token), b); err != nil {
		if errors.Is(err, errClaimed) {
			writeError(w, http.StatusConflict, "approve: "+err.Error())
			return
		}
		s.log.Error("enrolled token not kept", "channel", ch.id, "peer_id", peer, "err", err)
		writeError(w, http.StatusInternalServerError, "approve: the token could not be kept: "+err.Error())
		return
	}
	p.approved, p.peerID, p.token, p.approvedBy = true, peer, token, op.Name
	ch.events.Add(events.Event{Event: evCredentialBound, PeerID: peer,
		Detail: fmt.Sprintf("enrolled by operator %s with a pairing code (device remote=%s name=%q)", op.Name, p.remote, name)})
	s.log.Info("enrollment approved", "channel", ch.id, "peer_id", peer, "operator", op.Name, "device_remote", p.remote)
	writeJSON(w, http.StatusOK, map[string]any{"code": code, "channel_id": ch.id, "peer_id": peer, "name": name, "tags": req.Tags,
		"note": "the device collects its token on its next poll"})
}

// enrollmentOn reports whether any enabled channel takes enrollment (for
// the LAN advertisement's TXT record).
func (s *Server) enrollmentOn() bool {
	for _, ch := range s.cfg.Channels {
		if ch.Enabled && ch.Config.Enrollment {
			return true
		}
	}
	return false
}
