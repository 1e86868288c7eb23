package identity

import (
	"bufio"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"termlink/internal/durable"
	"termlink/link"
	"termlink/server/config"
)

// Device credentials (issue 14): which token may connect as which peer.
// The config binds tokens to peers (config/devtokens.go); the workspace
// keeps what the server learnt: list tokens bound on first use, and tokens
// issued by enrollment. Both live in workspace/credentials/<channel>.json
// as SHA-256 digests, never the tokens. A connection may take over a peer
// only with that peer's own credential.

// Binding sources.
const (
	BindFirstUse = "first-use" // a list token bound to the first peer_id it connected as
	BindEnrolled = "enrolled"  // a token issued by an approved pairing code
)

// Events of the device credentials.
const (
	EvCredentialBound = "credential_bound" // a list token bound on first use, or an enrolled token issued
	evCredentialReset = "credential_reset" // an operator reset a binding

	evEnrollmentRequested = "enrollment_requested" // a device asked for a pairing code (enroll.go)
)

// Binding is one token bound to one peer, as kept in the workspace.
type Binding struct {
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

// Bindings is one channel's learnt credentials. LocalBindings keeps them
// in a workspace file; a JetStream implementation shares them between
// the nodes of a cluster.
type Bindings interface {
	// Known reports whether d is the digest of an enrolled token (for
	// the check before the WebSocket upgrade; a first-use token is known
	// by the config).
	Known(d config.Digest) bool
	// Authorize decides whether a connection presenting token may be
	// peerID (Decide), and binds a list token not yet bound to peerID
	// at once: two connects never bind one token to two peers.
	Authorize(tokens config.Tokens, peerID, token, remote string) Decision
	// Enroll binds an enrolled token to b.PeerID unless the peer already
	// has a learnt credential (ErrClaimed: reset it first).
	Enroll(d config.Digest, b Binding) error
	// Reset forgets peerID's binding (nil when it had none): a first-use
	// token may then bind again, an enrolled token stops working.
	Reset(peerID string) (*Binding, error)
	// List is every binding, by peer_id.
	List() []Binding
}

// ErrClaimed is Enroll's answer for a peer that has a credential.
var ErrClaimed = errors.New("the peer_id already has a credential")

// Decision is the answer to a connect.
type Decision struct {
	OK       bool
	Takeover bool   // refused because the peer belongs to another credential
	Why      string // for the device and the events log; never the token
	Bound    bool   // a list token was bound to the peer just now
	// Shared is the glob whose shared token let the peer in ("" for its
	// own credential): the registry counts its peers (SharedCredential).
	Shared string
	// Name and Tags an operator gave the peer when approving its
	// enrollment: they win over what the device says of itself.
	Name string
	Tags map[string]string
}

// Apply gives f the name and tags the operator approved the peer with.
func (d Decision) Apply(f *link.Connect) {
	if d.Name != "" {
		f.DeviceName = d.Name
	}
	if len(d.Tags) > 0 {
		tags := maps.Clone(f.Tags)
		if tags == nil {
			tags = map[string]string{}
		}
		maps.Copy(tags, d.Tags)
		f.Tags = tags
	}
}

// Decide is the decision on a connect presenting a token of digest d as
// peerID, given what the store holds for the peer (byPeer) and for the
// token (byDigest), either nil. Every Bindings calls it, so the rules are
// the same on every store. In order: a peer named exactly in the
// config takes only its own token (the config wins over what the server
// learnt); a peer with a learnt binding (first use or enrolled) only its
// token; a token bound elsewhere (learnt or exact) is refused for any
// other peer; then a matching glob; then a list token not yet bound,
// which the store binds to peerID (bind true).
func Decide(tokens config.Tokens, peerID string, d config.Digest, byPeer, byDigest *Binding) (res Decision, bind bool) {
	if want, ok := tokens.Exact(peerID); ok {
		if subtle.ConstantTimeCompare(want[:], d[:]) == 1 {
			return Decision{OK: true}, false
		}
		return Decision{Takeover: true, Why: "peer_id " + peerID + " has its own token in the config; this token is not it"}, false
	}
	// A first-use binding whose token left the config binds nothing: the
	// token is revoked and the peer free for another list token.
	if b := byPeer; b != nil && !stale(tokens, b) {
		want, _ := parseDigestHex(b.Digest)
		if subtle.ConstantTimeCompare(want[:], d[:]) == 1 {
			return Decision{OK: true, Name: b.Name, Tags: b.Tags}, false
		}
		return Decision{Takeover: true, Why: "peer_id " + peerID + " is bound to another token (" + b.Source + " " + b.BoundAt.UTC().Format(time.RFC3339) +
			"); an operator can reset it with DELETE /api/channels/{channel_id}/bindings/" + peerID}, false
	}
	if b := byDigest; b != nil && !stale(tokens, b) {
		return Decision{Why: "this token is bound to another peer_id (" + b.Source + "); each device needs its own token"}, false
	}
	if _, owned := tokens.ExactOwner(d); owned {
		return Decision{Why: "this token belongs to another peer_id in the config; each device needs its own token"}, false
	}
	if glob, ok := tokens.GlobOf(peerID, d); ok {
		return Decision{OK: true, Shared: glob}, false
	}
	if tokens.Listed(d) {
		return Decision{OK: true, Bound: true}, true
	}
	return Decision{Why: "the token is not valid for this peer_id"}, false
}

// SharedCredential is the glob whose shared token (config/devtokens.go)
// a connect Decide let in as peerID with token, and how many peers that
// token may have (the device registry counts them: Device.Shared,
// SharedMax); ok false for a peer's own credential. It is what Decide
// says: with an object of tokens, a connect is let in by its exact
// entry, its learnt binding (an enrolled token, never a glob's), or a
// glob; a list of tokens has no globs.
func SharedCredential(tokens config.Tokens, peerID, token string) (glob string, max int, ok bool) {
	if token == "" {
		return "", 0, false
	}
	if _, exact := tokens.Exact(peerID); exact {
		return "", 0, false
	}
	glob, ok = tokens.GlobOf(peerID, config.DigestOf(token))
	if !ok {
		return "", 0, false
	}
	return glob, tokens.GlobMax(glob), true
}

// NoToken is the decision on a connect without a token.
var NoToken = Decision{Why: "no token: send Authorization: Bearer <token> or token in the connect frame"}

// BindFailed is the decision when a first-use binding could not be kept.
var BindFailed = Decision{Why: "the server could not record the token's binding to this peer_id; try again later"}

// stale reports whether b is a first-use binding whose token is no
// longer in the config's list.
func stale(tokens config.Tokens, b *Binding) bool {
	if b.Source != BindFirstUse {
		return false
	}
	d, err := parseDigestHex(b.Digest)
	return err != nil || !tokens.Listed(d)
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

// RequiresToken reports whether a channel takes only devices with a
// credential: configured tokens, or enrollment on.
func RequiresToken(cc config.ChannelConfig) bool { return cc.Tokens.Enabled() || cc.Enrollment }

// TokenKnown is the check before the WebSocket upgrade: the bearer token
// is configured (tokens) or learnt (b).
func TokenKnown(tokens config.Tokens, b Bindings, token string) bool {
	if token == "" {
		return false
	}
	return tokens.Known(token) || b.Known(config.DigestOf(token))
}

// LocalBindings is one channel's learnt bindings, kept durable in a
// workspace file.
type LocalBindings struct {
	path   string
	noSync bool
	log    *slog.Logger

	mu       sync.Mutex
	byPeer   map[string]*Binding
	byDigest map[config.Digest]*Binding
}

var _ Bindings = (*LocalBindings)(nil)

type credFile struct {
	Version  int        `json:"version"`
	Bindings []*Binding `json:"bindings"`
}

// OpenLocalBindings opens channel's bindings in dir (the workspace's
// credentials directory), <channel>.json; a missing file is no bindings.
func OpenLocalBindings(dir, channel string, noSync bool, log *slog.Logger) (*LocalBindings, error) {
	cs := &LocalBindings{path: filepath.Join(dir, channel+".json"), noSync: noSync, log: log,
		byPeer: map[string]*Binding{}, byDigest: map[config.Digest]*Binding{}}
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

// saveLocked writes the bindings; cs.mu is held.
func (cs *LocalBindings) saveLocked() error {
	f := credFile{Version: 1, Bindings: make([]*Binding, 0, len(cs.byPeer))}
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

// Known implements Bindings.
func (cs *LocalBindings) Known(d config.Digest) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	b, ok := cs.byDigest[d]
	return ok && b.Source == BindEnrolled
}

// addLocked records b (replacing what the peer had); the caller checked
// that no other credential claims the peer.
func (cs *LocalBindings) addLocked(d config.Digest, b *Binding) error {
	if old := cs.byPeer[b.PeerID]; old != nil {
		if od, err := parseDigestHex(old.Digest); err == nil {
			delete(cs.byDigest, od)
		}
	}
	b.Digest = hex.EncodeToString(d[:])
	cs.byPeer[b.PeerID], cs.byDigest[d] = b, b
	return cs.saveLocked()
}

// Enroll implements Bindings.
func (cs *LocalBindings) Enroll(d config.Digest, b Binding) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if old := cs.byPeer[b.PeerID]; old != nil {
		return fmt.Errorf("%w: peer_id %s is bound (%s since %s); reset it with DELETE /api/channels/{channel_id}/bindings/%s, or choose another peer_id",
			ErrClaimed, b.PeerID, old.Source, old.BoundAt.UTC().Format(time.RFC3339), b.PeerID)
	}
	return cs.addLocked(d, &b)
}

// Reset implements Bindings.
func (cs *LocalBindings) Reset(peerID string) (*Binding, error) {
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

// List implements Bindings.
func (cs *LocalBindings) List() []Binding {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]Binding, 0, len(cs.byPeer))
	for _, b := range cs.byPeer {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PeerID < out[j].PeerID })
	return out
}

// Authorize implements Bindings: Decide under the store's lock, and a
// first-use binding written before the answer.
func (cs *LocalBindings) Authorize(tokens config.Tokens, peerID, token, remote string) Decision {
	if token == "" {
		return NoToken
	}
	d := config.DigestOf(token)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	res, bind := Decide(tokens, peerID, d, cs.byPeer[peerID], cs.byDigest[d])
	if !bind {
		return res
	}
	b := &Binding{PeerID: peerID, Source: BindFirstUse, BoundAt: time.Now().UTC(), Remote: remote}
	if err := cs.addLocked(d, b); err != nil {
		cs.log.Error("binding a token to its first peer not kept", "peer_id", peerID, "err", err)
		return BindFailed
	}
	return res
}
