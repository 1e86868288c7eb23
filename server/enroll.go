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
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"time"

	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/registry"
)

// Enrollment by pairing code (issue 14; the shape of RFC 8628's device
// grant). A device with no token POSTs to the channel's enroll endpoint
// (no credentials) and gets a short code and a device code; it shows the
// code on its screen and polls .../enroll/token with the device code. An
// operator approves the code (POST /api/enrollments/{code}/approve) or
// denies it (DELETE /api/enrollments/{code}); the server makes a device
// token, binds its digest to the peer in the workspace (credentials.go)
// and hands the token to the device's next poll, once.
//
// Nobody without credentials can lock enrollment (issue 22):
//   - The operator routes take the operator's own authentication (auth.go)
//     and no limit: what devices do never refuses an operator.
//   - The device routes are limited per source network (IPv4 /24, IPv6
//     /64; an IPv4-mapped IPv6 address counts as IPv4): codes asked for,
//     unknown device codes polled, and codes pending at once. A network
//     past its budget gets 429; other networks are unaffected.
//   - A known device code is limited on its own: polled faster than half
//     its interval it answers slow_down (RFC 8628) and its interval grows.
//     The network's budget for unknown codes never refuses a known one,
//     so real devices behind a guessing neighbour keep polling.
//   - A code whose device stops polling (idlePolls intervals) is dropped,
//     from the list and the console too; the global cap (maxPending) when
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
	pollInterval       = 2 // seconds between a device's polls
	idlePolls          = 3 // a code not polled for this many intervals is dropped
	slowDownStep       = 5 * time.Second
	maxPending         = 1000 // codes waiting, all networks
	maxPendingPerNet   = 16   // codes waiting from one /24 or /64
	netCodeBurst       = 16   // codes one network may ask for at once,
	netCodeEvery       = 4 * time.Second
	netBadPollBurst    = 16 // unknown device codes one network may poll at once,
	netBadPollEvery    = 4 * time.Second
	maxDropped         = 2048 // dropped device codes remembered
	maxNetBuckets      = 10000
	maxEnrollBody      = 4 << 10

	accessDenied = "access_denied" // RFC 8628 section 3.5
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
	network           netip.Prefix // sourceNet(remote)
	requested, expiry time.Time
	lastPoll          time.Time     // requested until the first poll
	polled            bool          // lastPoll is a poll
	interval          time.Duration // grows by slowDownStep with each slow_down
	approved          bool
	approvedBy        string
	token             string // from approval until the device collects it
}

// Why a code left before its device collected its token.
const (
	dropCollected = iota // the token was handed over: no answer kept
	dropExpired
	dropAbandoned
	dropEvicted
	dropDenied
)

// droppedRef is a dropped code in the ring of those remembered.
type droppedRef struct {
	deviceDigest config.Digest
	code         string
}

type enrollments struct {
	mu       sync.Mutex
	byCode   map[string]*pending
	byDevice map[config.Digest]*pending
	perNet   map[netip.Prefix]int // codes in byCode per source network
	// dropped and droppedCodes remember why recent codes left, by device
	// code and by pairing code (a ring of maxDropped).
	dropped      map[config.Digest]int
	droppedCodes map[string]int
	droppedRing  []droppedRef
	droppedNext  int
	// codeLimit charges each code asked for, badPollLimit each unknown
	// device code polled, per source network.
	codeLimit, badPollLimit *netLimiter
	evicted                 int       // codes dropped at the cap since capWarned
	capWarned               time.Time // when the log last said so
	now                     func() time.Time
}

func newEnrollments() *enrollments {
	return &enrollments{byCode: map[string]*pending{}, byDevice: map[config.Digest]*pending{}, perNet: map[netip.Prefix]int{},
		dropped: map[config.Digest]int{}, droppedCodes: map[string]int{}, droppedRing: make([]droppedRef, 0, maxDropped),
		codeLimit:    newNetLimiter(netCodeBurst, netCodeEvery),
		badPollLimit: newNetLimiter(netBadPollBurst, netBadPollEvery),
		now:          time.Now}
}

// idleAfter is how long p may go unpolled before it is dropped.
func (p *pending) idleAfter() time.Duration { return idlePolls * p.interval }

// sweepLocked drops what expired, and unapproved codes whose device
// stopped polling. (An approved code waits for its device until it
// expires: its token is bound already.)
func (e *enrollments) sweepLocked(now time.Time) {
	for _, p := range e.byCode {
		switch {
		case now.After(p.expiry):
			e.dropLocked(p, dropExpired)
		case !p.approved && now.Sub(p.lastPoll) > p.idleAfter():
			e.dropLocked(p, dropAbandoned)
		}
	}
}

func (e *enrollments) addLocked(p *pending) {
	e.byCode[p.code], e.byDevice[p.deviceDigest] = p, p
	e.perNet[p.network]++
}

func (e *enrollments) dropLocked(p *pending, why int) {
	if e.byCode[p.code] != p {
		return
	}
	delete(e.byCode, p.code)
	delete(e.byDevice, p.deviceDigest)
	if e.perNet[p.network]--; e.perNet[p.network] <= 0 {
		delete(e.perNet, p.network)
	}
	if why == dropCollected {
		return
	}
	p.token = ""
	if len(e.droppedRing) < maxDropped {
		e.droppedRing = append(e.droppedRing, droppedRef{p.deviceDigest, p.code})
	} else {
		old := e.droppedRing[e.droppedNext]
		delete(e.dropped, old.deviceDigest)
		delete(e.droppedCodes, old.code)
		e.droppedRing[e.droppedNext] = droppedRef{p.deviceDigest, p.code}
		e.droppedNext = (e.droppedNext + 1) % maxDropped
	}
	e.dropped[p.deviceDigest], e.droppedCodes[p.code] = why, why
}

// evictableLocked returns the code to drop so that network may have one
// while all maxPending are taken: the oldest unapproved code of the
// network holding the most, if that is more than network holds; else nil.
func (e *enrollments) evictableLocked(network netip.Prefix) *pending {
	mine := e.perNet[network]
	var victim *pending
	for _, p := range e.byCode {
		n := e.perNet[p.network]
		if p.approved || n <= mine {
			continue
		}
		if victim == nil || n > e.perNet[victim.network] || n == e.perNet[victim.network] && p.requested.Before(victim.requested) {
			victim = p
		}
	}
	return victim
}

// sourceNet is the network a remote address ("ip:port") is limited by:
// its IPv4 /24 or IPv6 /64 (an IPv4-mapped IPv6 address counts as IPv4,
// a zone is ignored). An address that does not parse gives the invalid
// Prefix, one network for all such.
func sourceNet(remote string) netip.Prefix {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p
}

func netName(p netip.Prefix) string {
	if !p.IsValid() {
		return "an address that is not IP"
	}
	return "network " + p.String()
}

// netLimiter is a token bucket per source network: burst at once, then
// one per interval. It tracks at most maxNetBuckets networks: past that
// it forgets the refilled ones, then any.
type netLimiter struct {
	mu       sync.Mutex
	burst    float64
	interval time.Duration
	buckets  map[netip.Prefix]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newNetLimiter(burst int, interval time.Duration) *netLimiter {
	return &netLimiter{burst: float64(burst), interval: interval, buckets: map[netip.Prefix]*bucket{}}
}

func (l *netLimiter) refillLocked(n netip.Prefix, now time.Time) *bucket {
	b := l.buckets[n]
	if b == nil {
		if len(l.buckets) >= maxNetBuckets {
			for k, o := range l.buckets { // forget full buckets first
				if now.Sub(o.last) >= time.Duration(l.burst)*l.interval {
					delete(l.buckets, k)
				}
			}
			for k := range l.buckets { // then any
				if len(l.buckets) < maxNetBuckets {
					break
				}
				delete(l.buckets, k)
			}
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[n] = b
	}
	if now.After(b.last) {
		b.tokens = math.Min(l.burst, b.tokens+float64(now.Sub(b.last))/float64(l.interval))
		b.last = now
	}
	return b
}

// take takes a token of network n if there is one, and else reports how
// long until there is.
func (l *netLimiter) take(n netip.Prefix, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refillLocked(n, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.interval))
}

func tooMany(w http.ResponseWriter, retry time.Duration, what string) {
	secs := max(int(math.Ceil(retry.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	httpapi.WriteJSON(w, http.StatusTooManyRequests, enroll.ErrorResponse{Error: "rate_limited",
		Description: fmt.Sprintf("%s; try again in %d s", what, secs)})
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
	mux.HandleFunc("DELETE /api/enrollments/{code}", s.denyEnroll)
}

func (s *Server) enrollChannel(w http.ResponseWriter, r *http.Request) *channel {
	id := r.PathValue("channel_id")
	ch := s.rt.channels[id]
	switch {
	case ch == nil:
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(id)+" is configured")
	case ch.adapter == nil:
		httpapi.WriteError(w, http.StatusServiceUnavailable, "channel "+strconv.Quote(id)+" is disabled")
	case !ch.cfg.Config.Enrollment:
		httpapi.WriteError(w, http.StatusNotFound, "enrollment is off on channel "+strconv.Quote(id)+" (set \"enrollment\": true in its config)")
	default:
		return ch
	}
	return nil
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
	ch := s.enrollChannel(w, r)
	if ch == nil {
		return
	}
	now, network := e.now(), sourceNet(r.RemoteAddr)
	if ok, retry := e.codeLimit.take(network, now); !ok {
		tooMany(w, retry, fmt.Sprintf("too many pairing codes asked for from %s (%d at once, then one every %s)", netName(network), netCodeBurst, netCodeEvery))
		return
	}
	var req enroll.StartRequest
	if err := decodeBody(r, &req); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, "enroll: "+err.Error())
		return
	}
	if req.PeerID != "" && !idRE.MatchString(req.PeerID) {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("enroll: peer_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + - (starting with a letter or digit)", req.PeerID))
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
	ttl := time.Duration(ch.cfg.Config.EnrollmentCodeSeconds) * time.Second
	if ttl <= 0 {
		ttl = defaultCodeSeconds * time.Second
	}
	e.mu.Lock()
	e.sweepLocked(now)
	if n := e.perNet[network]; n >= maxPendingPerNet {
		e.mu.Unlock()
		tooMany(w, idlePolls*pollInterval*time.Second, fmt.Sprintf("enroll: %d pairing codes from %s are waiting for approval already (at most %d per network); approve or deny them, or wait until their devices stop polling", n, netName(network), maxPendingPerNet))
		return
	}
	if len(e.byCode) >= maxPending {
		victim := e.evictableLocked(network)
		if victim == nil {
			e.mu.Unlock()
			w.Header().Set("Retry-After", "60")
			httpapi.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("enroll: %d pairing codes are waiting for approval already, and %s holds as many as any other network; try again later", maxPending, netName(network)))
			return
		}
		e.dropLocked(victim, dropEvicted)
		// One line a minute at most: a flood from many networks evicts
		// on every request.
		if e.evicted++; now.Sub(e.capWarned) >= time.Minute || now.Before(e.capWarned) {
			evicted := e.evicted
			e.evicted, e.capWarned = 0, now
			defer s.log.Warn("pairing codes at the cap: the oldest unapproved code of the network holding the most made room for another network",
				"cap", maxPending, "dropped_since_last_warning", evicted, "last_dropped_from", netName(victim.network), "for", netName(network))
		}
	}
	var code string
	for code == "" || e.byCode[code] != nil {
		if code, err = enroll.NewCode(); err != nil {
			e.mu.Unlock()
			httpapi.WriteError(w, http.StatusInternalServerError, "enroll: "+err.Error())
			return
		}
	}
	p := &pending{code: code, channelID: ch.id, deviceDigest: config.DigestOf(deviceCode), peerID: req.PeerID, name: req.DeviceName,
		remote: r.RemoteAddr, network: network, requested: now, expiry: now.Add(ttl), lastPoll: now, interval: pollInterval * time.Second}
	e.addLocked(p)
	e.mu.Unlock()

	ch.events.Add(events.Event{Event: evEnrollmentRequested, PeerID: req.PeerID,
		Detail: fmt.Sprintf("pairing code asked for (remote=%s device_name=%q); approve it with POST /api/enrollments/{code}/approve", r.RemoteAddr, req.DeviceName)})
	s.log.Info("pairing code issued", "channel", ch.id, "remote", r.RemoteAddr, "peer_id", req.PeerID, "expires_in", ttl.String())
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	httpapi.WriteJSON(w, http.StatusOK, enroll.Grant{Code: code, DeviceCode: deviceCode, VerificationURI: scheme + "://" + r.Host + "/",
		ExpiresIn: int(ttl / time.Second), Interval: pollInterval})
}

// droppedAnswer is the poll answer for a device code that left before
// its token was collected.
func droppedAnswer(why int, idle time.Duration) enroll.ErrorResponse {
	switch why {
	case dropDenied:
		return enroll.ErrorResponse{Error: accessDenied, Description: "an operator denied this pairing code"}
	case dropAbandoned:
		return enroll.ErrorResponse{Error: enroll.Expired, Description: fmt.Sprintf("the pairing code was dropped: it was not polled for %s; ask for a new one", idle)}
	case dropEvicted:
		return enroll.ErrorResponse{Error: enroll.Expired, Description: "the pairing code was dropped to make room (all are taken, most by the network this one came from); ask for a new one"}
	}
	return enroll.ErrorResponse{Error: enroll.Expired, Description: "the pairing code expired before an operator approved it: ask for a new one"}
}

func (s *Server) pollEnroll(w http.ResponseWriter, r *http.Request) {
	e := s.enroll
	ch := s.enrollChannel(w, r)
	if ch == nil {
		return
	}
	now, network := e.now(), sourceNet(r.RemoteAddr)
	var req enroll.TokenRequest
	if err := decodeBody(r, &req); err != nil || req.DeviceCode == "" {
		httpapi.WriteJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: "invalid_request", Description: "send {\"device_code\": ...} from the enroll answer"})
		return
	}
	d := config.DigestOf(req.DeviceCode)
	e.mu.Lock()
	e.sweepLocked(now)
	p := e.byDevice[d]
	if p == nil || p.channelID != ch.id {
		why, gone := e.dropped[d]
		e.mu.Unlock()
		switch {
		case gone:
			httpapi.WriteJSON(w, http.StatusBadRequest, droppedAnswer(why, idlePolls*pollInterval*time.Second))
		default:
			// Only an unknown device code costs its network: a device
			// that lost its code pays once, then asks for a new one.
			if ok, retry := e.badPollLimit.take(network, now); !ok {
				tooMany(w, retry, fmt.Sprintf("too many unknown device codes polled from %s (%d at once, then one every %s)", netName(network), netBadPollBurst, netBadPollEvery))
				return
			}
			httpapi.WriteJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: enroll.Invalid, Description: "unknown device code (already used, or never issued): ask for a new pairing code"})
		}
		return
	}
	since := now.Sub(p.lastPoll)
	fast := p.polled && since < p.interval/2
	p.lastPoll, p.polled = now, true
	switch {
	case p.approved:
		e.dropLocked(p, dropCollected) // single use: the token is handed over once
		tok, peer := p.token, p.peerID
		p.token = ""
		e.mu.Unlock()
		s.log.Info("device token collected by the enrolled device", "channel", ch.id, "peer_id", peer, "remote", r.RemoteAddr)
		httpapi.WriteJSON(w, http.StatusOK, enroll.TokenResponse{Token: tok, PeerID: peer, ChannelID: ch.id})
	case fast: // this code's own limit (RFC 8628 section 3.5)
		p.interval += slowDownStep
		interval := p.interval
		e.mu.Unlock()
		httpapi.WriteJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: enroll.SlowDown,
			Description: fmt.Sprintf("polled %s after the last poll; poll every %s from now on", since.Round(time.Millisecond), interval)})
	default:
		e.mu.Unlock()
		httpapi.WriteJSON(w, http.StatusBadRequest, enroll.ErrorResponse{Error: enroll.Pending, Description: "waiting for an operator to approve code " + p.code})
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
	Network     string    `json:"network"` // the source network it is limited by
	RequestedAt time.Time `json:"requested_at"`
	LastPollAt  time.Time `json:"last_poll_at"` // requested_at until its device polls
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
			Network: p.network.String(), RequestedAt: p.requested.UTC(), LastPollAt: p.lastPoll.UTC(), ExpiresAt: p.expiry.UTC(), Approved: p.approved})
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].RequestedAt.Before(out[j].RequestedAt) })
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"enrollments": out})
}

// approveRequest is the body of POST /api/enrollments/{code}/approve.
type approveRequest struct {
	PeerID string            `json:"peer_id"`
	Name   string            `json:"name"`
	Tags   map[string]string `json:"tags"`
}

// notPendingLocked answers a pairing code the operator typed that is not
// pending: 410 when it was dropped lately, with why; else 404.
func (e *enrollments) notPendingLocked(w http.ResponseWriter, code string) {
	why, gone := e.droppedCodes[code]
	switch {
	case !gone:
		httpapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no pending pairing code %s: mistyped, already used, or gone long ago (GET /api/enrollments lists the pending ones)", code))
	case why == dropExpired:
		httpapi.WriteError(w, http.StatusGone, "pairing code "+code+" expired; the device asks for a new one")
	case why == dropAbandoned:
		httpapi.WriteError(w, http.StatusGone, fmt.Sprintf("pairing code %s was dropped: its device stopped polling (none for %d s); a device still waiting asks for a new one", code, idlePolls*pollInterval))
	case why == dropEvicted:
		httpapi.WriteError(w, http.StatusGone, "pairing code "+code+" was dropped to make room for a device of another network (all codes were taken); the device asks for a new one")
	default:
		httpapi.WriteError(w, http.StatusGone, "pairing code "+code+" was denied")
	}
}

// approveEnroll and denyEnroll are operator routes: the guard has
// authenticated the operator, and nothing a device does limits them.
func (s *Server) approveEnroll(w http.ResponseWriter, r *http.Request) {
	e := s.enroll
	now := e.now()
	code, err := enroll.ParseCode(r.PathValue("code"))
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var req approveRequest
	if err := decodeBody(r, &req); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, "approve: "+err.Error())
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sweepLocked(now)
	p := e.byCode[code]
	switch {
	case p == nil:
		e.notPendingLocked(w, code)
		return
	case p.approved:
		httpapi.WriteError(w, http.StatusConflict, "pairing code "+code+" is already approved (for peer_id "+p.peerID+"); codes are single use")
		return
	}
	peer := req.PeerID
	if peer == "" {
		peer = p.peerID
	}
	switch {
	case peer == "":
		httpapi.WriteError(w, http.StatusBadRequest, "approve: give \"peer_id\": the device suggested none")
		return
	case !idRE.MatchString(peer):
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("approve: peer_id %q must be 1-128 characters of A-Z a-z 0-9 . _ @ + - (starting with a letter or digit)", peer))
		return
	}
	if err := checkTags(req.Tags); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, "approve: "+err.Error())
		return
	}
	if len(req.Name) > registry.MaxField {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("approve: name must be at most %d bytes (this one has %d)", registry.MaxField, len(req.Name)))
		return
	}
	ch := s.rt.channels[p.channelID]
	if _, exact := ch.cfg.Config.Tokens.Exact(peer); exact {
		httpapi.WriteError(w, http.StatusConflict, "approve: peer_id "+peer+" has its own token in the config; choose another peer_id")
		return
	}
	token, err := randomSecret("tl_")
	if err != nil {
		httpapi.WriteError(w, http.StatusInternalServerError, "approve: no randomness: "+err.Error())
		return
	}
	name := req.Name
	if name == "" {
		name = p.name
	}
	op := httpapi.OperatorOf(r)
	b := &binding{PeerID: peer, Source: bindEnrolled, BoundAt: now.UTC(), Remote: p.remote, Name: name, Tags: req.Tags, ApprovedBy: op.Name}
	if err := ch.creds.enroll(config.DigestOf(token), b); err != nil {
		if errors.Is(err, errClaimed) {
			httpapi.WriteError(w, http.StatusConflict, "approve: "+err.Error())
			return
		}
		s.log.Error("enrolled token not kept", "channel", ch.id, "peer_id", peer, "err", err)
		httpapi.WriteError(w, http.StatusInternalServerError, "approve: the token could not be kept: "+err.Error())
		return
	}
	p.approved, p.peerID, p.token, p.approvedBy = true, peer, token, op.Name
	ch.events.Add(events.Event{Event: evCredentialBound, PeerID: peer,
		Detail: fmt.Sprintf("enrolled by operator %s with a pairing code (device remote=%s name=%q)", op.Name, p.remote, name)})
	s.log.Info("enrollment approved", "channel", ch.id, "peer_id", peer, "operator", op.Name, "device_remote", p.remote)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"code": code, "channel_id": ch.id, "peer_id": peer, "name": name, "tags": req.Tags,
		"note": "the device collects its token on its next poll"})
}

// denyEnroll drops a pending code (DELETE /api/enrollments/{code}); its
// device's next poll answers access_denied.
func (s *Server) denyEnroll(w http.ResponseWriter, r *http.Request) {
	e := s.enroll
	code, err := enroll.ParseCode(r.PathValue("code"))
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	e.mu.Lock()
	e.sweepLocked(e.now())
	p := e.byCode[code]
	switch {
	case p == nil:
		e.notPendingLocked(w, code)
		e.mu.Unlock()
		return
	case p.approved:
		e.mu.Unlock()
		httpapi.WriteError(w, http.StatusConflict, "pairing code "+code+" is approved already (peer_id "+p.peerID+"); revoke its token with DELETE /api/channels/"+p.channelID+"/bindings/"+p.peerID)
		return
	}
	e.dropLocked(p, dropDenied)
	e.mu.Unlock()
	op := httpapi.OperatorOf(r)
	s.log.Info("enrollment denied", "channel", p.channelID, "code", code, "operator", op.Name, "device_remote", p.remote)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"code": code, "channel_id": p.channelID, "denied": true,
		"note": "the device is told on its next poll (access_denied)"})
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
