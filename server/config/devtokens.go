package config

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"path"
	"strings"
)

// Device tokens (issue 14): a channel's "tokens" bind each token to the
// peers it may connect as.
//
//	"tokens": {"kiosk-1": "<secret>", "kiosk-*": "sha256:<64 hex>"}
//	"tokens": ["<secret>", "sha256:<64 hex>"]   (lab: trust on first use)
//
//	"tokens": {"kiosk-*": {"token": "sha256:<64 hex>", "maxPeers": 50}}
//
// In an object, an exact peer id wins over globs: a peer named exactly may
// use only its own token, never a glob's. A glob ("*" any run of
// characters, "?" one) lets every holder of its token be any matching
// peer: it is a shared credential, meant for a group of kiosks whose
// identities are interchangeable. So that one leaked shared token cannot
// mint peers without end, the peers of a glob's token on the channel are
// counted (the device registry keeps them): past its maxPeers (default
// DefaultGlobMaxPeers, 1..MaxGlobMaxPeers) a new peer id on it is
// refused at connect, and its peers never make room in a full registry
// by forgetting a device with its own credential. maxPeers is a glob's
// only; an exact entry is one peer. A list token is bound by the server
// to the first peer_id it connects with (recorded in the workspace).

// DefaultGlobMaxPeers is a glob token's maxPeers when its entry gives
// none; MaxGlobMaxPeers the most it may give (the registry's default
// bound of a channel).
const (
	DefaultGlobMaxPeers = 1000
	MaxGlobMaxPeers     = 100000
)

// Digest is the SHA-256 of a presented device token: what the config, the
// workspace and every comparison use.
type Digest = [sha256.Size]byte

// DigestOf hashes a presented token.
func DigestOf(token string) Digest { return sha256.Sum256([]byte(token)) }

// ParseDeviceToken checks the config form of a device token, "sha256:<64
// hex>" or a plain secret (no spaces; any length, unlike admin tokens, so
// existing lab configs keep working), and returns its digest.
func ParseDeviceToken(token string) (Digest, error) {
	d, _, err := parseToken(token, 1)
	return d, err
}

// globChars are what a peer id pattern may hold: a peer id's characters,
// "*" and "?".
func validPeerPattern(p string) error {
	if p == "" {
		return fmt.Errorf("peer id must not be empty")
	}
	if len(p) > 128 {
		return fmt.Errorf("peer id or glob is %d characters, at most 128", len(p))
	}
	for _, r := range p {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("._@+-*?", r):
		default:
			return fmt.Errorf("%q is not a peer id or a glob of them: use A-Z a-z 0-9 . _ @ + - and the wildcards * and ?", p)
		}
	}
	return nil
}

// IsGlob reports whether a "tokens" key is a glob rather than a peer id.
func IsGlob(key string) bool { return strings.ContainsAny(key, "*?") }

// globMatch matches a peer id against a validated glob (no '/' or '['
// can occur in either, so path.Match cannot fail).
func globMatch(glob, peer string) bool {
	ok, err := path.Match(glob, peer)
	return err == nil && ok
}

// digestOf is the digest a configured token stands for (the decoder has
// checked it; a Tokens built in code with a bad value matches nothing).
func digestOf(configured string) (Digest, bool) {
	d, err := ParseDeviceToken(configured)
	return d, err == nil
}

func digestEq(a, b Digest) int { return subtle.ConstantTimeCompare(a[:], b[:]) }

// Known reports whether token is one of the configured tokens, for any
// peer. Every token is compared, in constant time.
func (t Tokens) Known(token string) bool {
	if token == "" {
		return false
	}
	d := DigestOf(token)
	found := 0
	for _, a := range t.Any {
		if c, ok := digestOf(a); ok {
			found |= digestEq(c, d)
		}
	}
	for _, v := range t.ByPeer {
		if c, ok := digestOf(v); ok {
			found |= digestEq(c, d)
		}
	}
	return found == 1
}

// Exact returns the token configured for exactly peerID (not by a glob).
func (t Tokens) Exact(peerID string) (Digest, bool) {
	v, has := t.ByPeer[peerID]
	if !has || IsGlob(peerID) {
		return Digest{}, false
	}
	return digestOf(v)
}

// ExactOwner returns the peer whose exact entry holds d, if any: such a
// token may be used by that peer only.
func (t Tokens) ExactOwner(d Digest) (string, bool) {
	owner, found := "", false
	for k, v := range t.ByPeer {
		if IsGlob(k) {
			continue
		}
		if c, ok := digestOf(v); ok && digestEq(c, d) == 1 {
			owner, found = k, true
		}
	}
	return owner, found
}

// GlobAllows reports whether a glob entry matching peerID holds d.
func (t Tokens) GlobAllows(peerID string, d Digest) bool {
	_, ok := t.GlobOf(peerID, d)
	return ok
}

// GlobOf returns the glob entry matching peerID that holds d: the first
// in byte order when several do (every one is compared, in constant
// time). Its peers are counted against it (GlobMax).
func (t Tokens) GlobOf(peerID string, d Digest) (glob string, ok bool) {
	for k, v := range t.ByPeer {
		if !IsGlob(k) || !globMatch(k, peerID) {
			continue
		}
		if c, good := digestOf(v); good && digestEq(c, d) == 1 && (!ok || k < glob) {
			glob, ok = k, true
		}
	}
	return glob, ok
}

// GlobMax is how many peers glob's token may have on the channel: its
// entry's maxPeers, else DefaultGlobMaxPeers.
func (t Tokens) GlobMax(glob string) int {
	if n := t.MaxPeers[glob]; n > 0 {
		return n
	}
	return DefaultGlobMaxPeers
}

// Listed reports whether d is a list (trust on first use) token.
func (t Tokens) Listed(d Digest) bool {
	ok := 0
	for _, a := range t.Any {
		if c, good := digestOf(a); good {
			ok |= digestEq(c, d)
		}
	}
	return ok == 1
}

// Allows reports whether the config alone lets peerID connect with token:
// its exact entry, else a matching glob, else any list token (which the
// server then binds to the peer). It is false when no tokens are
// configured; check Enabled first.
func (t Tokens) Allows(peerID, token string) bool {
	if token == "" {
		return false
	}
	d := DigestOf(token)
	if want, ok := t.Exact(peerID); ok {
		return digestEq(want, d) == 1
	}
	if _, owned := t.ExactOwner(d); owned {
		return false
	}
	return t.GlobAllows(peerID, d) || t.Listed(d)
}
