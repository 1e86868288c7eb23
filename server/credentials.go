package server

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"termlink/internal/durable"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
)

// Device credentials (issue 14): which token may connect as which peer.
// The config binds tokens to peers (config/devtokens.go); the workspace
// keeps what the server learnt: list tokens bound on first use, and tokens
// issued by enrollment. Both live in workspace/credentials/<channel>.json
// as SHA-256 digests, never the tokens. A connection may take over a peer
// only with that peer's own credential.

// Binding sources.
const (
	bindFirstUse = "first-use" // a list token bound to the first peer_id it connected as
	bindEnrolled = "enrolled"  // a token issued by an approved pairing code
)

// Events of the device credentials.
const (
	evCredentialBound = "credential_bound" // a list token bound on first use, or an enrolled token issued
	evCredentialReset = "credential_reset" // an operator reset a binding

	evEnrollmentRequested = "enrollment_requested" // a device asked for a pairing code (enroll.go)
)

// binding is one token bound to one peer.
type binding struct {
	PeerID  string    `json:"peer_id"`
	Digest  string    `json:"token_sha256"` // hex; shown in the API as its first 12 digits only
	Source  string    `json:"source"`
	BoundAt time.Time `json:"bound_at"`
	Remote  string    `json:"remote,omitempty"`
	Name    string    `json:"name,omitempty"`
	// Enrolled: the operator's tags and name.
	Tags       map[string]string `json:"tags,omitempty"`
	ApprovedBy string            `json:"approved_by,omitempty"`
}

// credStore is one channel's learnt bindings, kept durable.
type credStore struct {
	path   string
	noSync bool
	log    *slog.Logger

	mu       sync.Mutex
	byPeer   map[string]*binding
	byDigest map[config.Digest]*binding
}

type credFile struct {
	Version  int        `json:"version"`
	Bindings []*binding `json:"bindings"`
}

func openCredStore(dir, channel string, noSync bool, log *slog.Logger) (*credStore, error) {
	cs := &credStore{path: filepath.Join(dir, channel+".json"), noSync: noSync, log: log,
		byPeer: map[string]*binding{}, byDigest: map[config.Digest]*binding{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("opening the device credentials: %w", err)
	}
	b, err := os.ReadFile(cs.path)
	if errors.Is(err, fs.ErrNotExist) {
		return cs, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the device credentials: %w", err)
	}
	var f credFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("reading the device credentials %s: %w (fix or remove the file; removing it forgets every first-use binding and enrolled token)", cs.path, err)
	}
	for i, bd := range f.Bindings {
		d, err := parseDigestHex(bd.Digest)
		if err != nil || bd.PeerID == "" {
			return nil, fmt.Errorf("reading the device credentials %s: binding %d: bad peer_id or token_sha256", cs.path, i)
		}
		cs.byPeer[bd.PeerID], cs.byDigest[d] = bd, bd
	}
	return cs, nil
}

func parseDigestHex(s string) (config.Digest, error) {
	var d config.Digest
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(d) {
		return d, errors.New("not 64 hex digits")
	}
	copy(d[:], b)
	return d, nil
}

// saveLocked writes the bindings; cs.mu is held.
func (cs *credStore) saveLocked() error {
	f := credFile{Version: 1, Bindings: make([]*binding, 0, len(cs.byPeer))}
	for _, b := range cs.byPeer {
		f.Bindings = append(f.Bindings, b)
	}
	sort.Slice(f.Bindings, func(i, j int) bool { return f.Bindings[i].PeerID < f.Bindings[j].PeerID })
	err := durable.WriteFile(cs.path, func(w *bufio.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(f)
	}, cs.noSync)
	if err == nil {
		err = os.Chmod(cs.path, 0o600)
	}
	return err
}

// known reports whether d is an enrolled token (for the check before
// the WebSocket upgrade; a first-use token is known by the config).
func (cs *credStore) known(d config.Digest) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	b, ok := cs.byDigest[d]
	return ok && b.Source == bindEnrolled
}

// staleLocked reports whether b is a first-use binding whose token is no
// longer in the config's list.
func (cs *credStore) staleLocked(tokens config.Tokens, b *binding) bool {
	if b.Source != bindFirstUse {
		return false
	}
	d, err := parseDigestHex(b.Digest)
	return err != nil || !tokens.Listed(d)
}

// add records b (replacing what the peer had); the caller checked that no
// other credential claims the peer.
func (cs *credStore) add(d config.Digest, b *binding) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.addLocked(d, b)
}

func (cs *credStore) addLocked(d config.Digest, b *binding) error {
	if old := cs.byPeer[b.PeerID]; old != nil {
		if od, err := parseDigestHex(old.Digest); err == nil {
			delete(cs.byDigest, od)
		}
	}
	b.Digest = hex.EncodeToString(d[:])
	cs.byPeer[b.PeerID], cs.byDigest[d] = b, b
	return cs.saveLocked()
}

var errClaimed = errors.New("the peer_id already has a credential")

// enroll binds an enrolled token to b.PeerID unless the peer already has
// a learnt credential (reset it first).
func (cs *credStore) enroll(d config.Digest, b *binding) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if old := cs.byPeer[b.PeerID]; old != nil {
		return fmt.Errorf("%w: peer_id %s is bound (%s since %s); reset it with DELETE /api/channels/{channel_id}/bindings/%s, or choose another peer_id",
			errClaimed, b.PeerID, old.Source, old.BoundAt.UTC().Format(time.RFC3339), b.PeerID)
	}
	return cs.addLocked(d, b)
}

// reset forgets peerID's binding: a first-use token may then bind again,
// an enrolled token stops working.
func (cs *credStore) reset(peerID string) (*binding, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	b := cs.byPeer[peerID]
	if b == nil {
		return nil, nil
	}
	delete(cs.byPeer, peerID)
	if d, err := parseDigestHex(b.Digest); err == nil {
		delete(cs.byDigest, d)
	}
	return b, cs.saveLocked()
}

func (cs *credStore) list() []binding {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]binding, 0, len(cs.byPeer))
	for _, b := range cs.byPeer {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PeerID < out[j].PeerID })
	return out
}

// authResult is the decision on a connect.
type authResult struct {
	ok       bool
	takeover bool   // refused because the peer belongs to another credential
	why      string // for the device and the events log; never the token
	bound    bool   // a list token was bound to the peer just now
	// name and tags an operator gave the peer when approving its
	// enrollment: they win over what the device says of itself.
	name string
	tags map[string]string
}

// authorize decides whether a connection presenting token may be peerID.
// In order: a peer named exactly in the config takes only its own token
// (the config wins over what the server learnt); a peer with a learnt
// binding (first use or enrolled) only its token; a
// token bound elsewhere (learnt or exact) is refused for any other peer;
// then a matching glob; then a list token not yet bound, which is bound
// to peerID now.
func (cs *credStore) authorize(tokens config.Tokens, peerID, token, remote string) authResult {
	if token == "" {
		return authResult{why: "no token: send Authorization: Bearer <token> or token in the connect frame"}
	}
	d := config.DigestOf(token)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if want, ok := tokens.Exact(peerID); ok {
		if subtle.ConstantTimeCompare(want[:], d[:]) == 1 {
			return authResult{ok: true}
		}
		return authResult{takeover: true, why: "peer_id " + peerID + " has its own token in the config; this token is not it"}
	}
	// A first-use binding whose token left the config binds nothing: the
	// token is revoked and the peer free for another list token.
	if b := cs.byPeer[peerID]; b != nil && !cs.staleLocked(tokens, b) {
		want, _ := parseDigestHex(b.Digest)
		if subtle.ConstantTimeCompare(want[:], d[:]) == 1 {
			return authResult{ok: true, name: b.Name, tags: b.Tags}
		}
		return authResult{takeover: true, why: "peer_id " + peerID + " is bound to another token (" + b.Source + " " + b.BoundAt.UTC().Format(time.RFC3339) +
			"); an operator can reset it with DELETE /api/channels/{channel_id}/bindings/" + peerID}
	}
	if b := cs.byDigest[d]; b != nil && !cs.staleLocked(tokens, b) {
		return authResult{why: "this token is bound to another peer_id (" + b.Source + "); each device needs its own token"}
	}
	if _, owned := tokens.ExactOwner(d); owned {
		return authResult{why: "this token belongs to another peer_id in the config; each device needs its own token"}
	}
	if tokens.GlobAllows(peerID, d) {
		return authResult{ok: true}
	}
	if tokens.Listed(d) {
		b := &binding{PeerID: peerID, Source: bindFirstUse, BoundAt: time.Now().UTC(), Remote: remote}
		if err := cs.addLocked(d, b); err != nil {
			cs.log.Error("binding a token to its first peer not kept", "peer_id", peerID, "err", err)
			return authResult{why: "the server could not record the token's binding to this peer_id; try again later"}
		}
		return authResult{ok: true, bound: true}
	}
	return authResult{why: "the token is not valid for this peer_id"}
}

// requiresToken reports whether channel ch takes only devices with a
// credential: configured tokens, or enrollment on.
func requiresToken(cc config.ChannelConfig) bool { return cc.Tokens.Enabled() || cc.Enrollment }

// tokenKnown is the check before the WebSocket upgrade: the bearer token
// is configured or learnt.
func (a *terminalAdapter) tokenKnown(token string) bool {
	if token == "" {
		return false
	}
	return a.cfg.Config.Tokens.Known(token) || a.ch.creds.known(config.DigestOf(token))
}

// authorizeConnect runs authorize for a connect frame and records a
// refusal (peer, remote address, reason; never the token) in the events
// log. It reports whether the connect may go on; an enrolled peer's
// frame gets the name and tags the operator approved it with.
func (c *wsConn) authorizeConnect(f *link.Connect, token string) (bool, string) {
	a, peerID := c.a, f.PeerID
	res := a.ch.creds.authorize(a.cfg.Config.Tokens, peerID, token, c.remote)
	if res.name != "" {
		f.DeviceName = res.name
	}
	if len(res.tags) > 0 {
		tags := maps.Clone(f.Tags)
		if tags == nil {
			tags = map[string]string{}
		}
		maps.Copy(tags, res.tags)
		f.Tags = tags
	}
	if res.bound {
		a.ch.events.Add(events.Event{Event: evCredentialBound, PeerID: peerID,
			Detail: "list token bound to this peer_id on first use (remote=" + c.remote + ")"})
		a.log.Info("list token bound to its first peer", "peer_id", peerID, "remote", c.remote)
	}
	if res.ok {
		return true, ""
	}
	what := "connect refused"
	if res.takeover {
		what = "takeover refused"
		a.log.Warn("takeover refused: a connection presented a token that is not this peer's", "peer_id", peerID, "remote", c.remote)
	}
	a.ch.events.Add(events.Event{Event: events.TerminalRefused, PeerID: peerID,
		Detail: what + " (remote=" + c.remote + "): " + res.why})
	return false, res.why
}

// credentialRoutes registers the bindings API (behind the guard: GET for
// viewers, DELETE for operators).
func (s *Server) credentialRoutes(mux interface {
	HandleFunc(string, func(http.ResponseWriter, *http.Request))
}) {
	mux.HandleFunc("GET /api/channels/{channel_id}/bindings", s.getBindings)
	mux.HandleFunc("DELETE /api/channels/{channel_id}/bindings/{peer_id}", s.deleteBinding)
}

// bindingView is a binding as the API shows it: the token's digest cut to
// a fingerprint.
type bindingView struct {
	PeerID      string            `json:"peer_id"`
	Source      string            `json:"source"`
	Fingerprint string            `json:"token_fingerprint"` // first 12 hex digits of the token's SHA-256
	BoundAt     time.Time         `json:"bound_at"`
	Remote      string            `json:"remote,omitempty"`
	Name        string            `json:"name,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	ApprovedBy  string            `json:"approved_by,omitempty"`
}

func (s *Server) credChannel(w http.ResponseWriter, r *http.Request) *channel {
	id := r.PathValue("channel_id")
	ch := s.rt.channels[id]
	if ch == nil || ch.creds == nil {
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(id)+" is configured")
		return nil
	}
	return ch
}

func (s *Server) getBindings(w http.ResponseWriter, r *http.Request) {
	ch := s.credChannel(w, r)
	if ch == nil {
		return
	}
	out := []bindingView{}
	for _, b := range ch.creds.list() {
		fp := b.Digest
		if len(fp) > 12 {
			fp = fp[:12]
		}
		out = append(out, bindingView{PeerID: b.PeerID, Source: b.Source, Fingerprint: fp, BoundAt: b.BoundAt, Remote: b.Remote, Name: b.Name,
			Tags: b.Tags, ApprovedBy: b.ApprovedBy})
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"channel_id": ch.id, "bindings": out})
}

func (s *Server) deleteBinding(w http.ResponseWriter, r *http.Request) {
	ch := s.credChannel(w, r)
	if ch == nil {
		return
	}
	peer := r.PathValue("peer_id")
	b, err := ch.creds.reset(peer)
	switch {
	case err != nil:
		s.log.Error("resetting a binding not kept", "channel_id", ch.id, "peer_id", peer, "err", err)
		httpapi.WriteError(w, http.StatusInternalServerError, "the binding was removed in memory but not on disk: "+err.Error())
		return
	case b == nil:
		httpapi.WriteError(w, http.StatusNotFound, "peer_id "+strconv.Quote(peer)+" has no binding on channel "+ch.id)
		return
	}
	op := httpapi.OperatorOf(r)
	ch.events.Add(events.Event{Event: evCredentialReset, PeerID: peer,
		Detail: "binding reset by operator " + op.Name + " (" + b.Source + "): the peer's token no longer binds it"})
	s.log.Info("device binding reset", "channel_id", ch.id, "peer_id", peer, "source", b.Source, "operator", op.Name)
	w.WriteHeader(http.StatusNoContent)
}

// warnOpenChannels logs, when the server listens beyond loopback, each
// channel that takes any device as any peer (no tokens, no enrollment).
func (s *Server) warnOpenChannels(addr net.Addr) {
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return
	}
	for _, id := range s.rt.order {
		ch := s.rt.channels[id]
		if ch.cfg.Enabled && !requiresToken(ch.cfg.Config) {
			s.log.Warn("channel is open: any device may connect as any peer_id (no tokens, no enrollment); add \"tokens\" or \"enrollment\": true to its config",
				"channel_id", id, "addr", addr.String())
		}
	}
}

// openCreds opens every channel's credential store.
func (rt *Runtime) openCreds(workspace string, noSync bool, log *slog.Logger) error {
	dir := filepath.Join(workspace, "credentials")
	for id, ch := range rt.channels {
		cs, err := openCredStore(dir, id, noSync, log)
		if err != nil {
			return err
		}
		ch.creds = cs
	}
	return nil
}

// sha256Hex is for tests and logs that need a token's fingerprint.
func sha256Hex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}
