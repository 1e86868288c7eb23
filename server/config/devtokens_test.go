package config

import (
	"strings"
	"testing"
)

func tokensConfig(tokens string) string {
	return `{"channels": {"c": {"accountId": "a", "config": {"tokens": ` + tokens + `}}}}`
}

func TestDeviceTokensDecode(t *testing.T) {
	cfg, err := Parse([]byte(tokensConfig(`{"pi-1": "` + sha("one") + `", "kiosk-*": "shared", "desk-?": "` + sha("desk") + `"}`)))
	if err != nil {
		t.Fatal(err)
	}
	tok := cfg.Channels["c"].Config.Tokens
	for _, c := range []struct {
		peer, token string
		want        bool
	}{
		{"pi-1", "one", true},
		{"pi-1", sha("one"), false}, // the hash is not the secret
		{"pi-2", "one", false},      // pi-1's token, not pi-2's
		{"kiosk-1", "shared", true}, // glob
		{"kiosk-", "shared", true},
		{"kiosk", "shared", false},
		{"desk-1", "desk", true},
		{"desk-12", "desk", false},
		{"pi-1", "shared", false}, // an exact peer takes only its own token
		{"kiosk-1", "", false},
	} {
		if got := tok.Allows(c.peer, c.token); got != c.want {
			t.Errorf("Allows(%q, %q) = %v, want %v", c.peer, c.token, got, c.want)
		}
	}
	if !tok.Known("desk") || tok.Known("nope") {
		t.Error("Known")
	}
	if owner, ok := tok.ExactOwner(DigestOf("one")); !ok || owner != "pi-1" {
		t.Errorf("ExactOwner = %q %v", owner, ok)
	}
}

func TestDeviceTokensDecodeErrors(t *testing.T) {
	for _, c := range []struct{ tokens, want string }{
		{`{"kiosk/[1]": "secret-value"}`, `"kiosk/[1]" is not a peer id or a glob of them`},
		{`{"pi": "sha256:abc"}`, "tokens.pi: sha256 token must be"},
		{`{"pi": "has space"}`, "tokens.pi: must not contain spaces"},
		{`["sha256:zz"]`, "tokens[0]: sha256 token must be"},
		{`["dup-token", "` + sha("dup-token") + `"]`, "tokens[1]: the same token as channels.c.config.tokens[0]"},
	} {
		_, err := Parse([]byte(tokensConfig(c.tokens)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tokens %s: error %v, want %q", c.tokens, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "secret-value") || strings.Contains(err.Error(), "has space")) {
			t.Errorf("error shows the token: %v", err)
		}
	}
}

// FuzzDeviceTokens parses fuzzed "tokens" values and matches fuzzed peers
// against what parsed: no panic, and what parses is valid.
func FuzzDeviceTokens(f *testing.F) {
	for _, s := range []string{`{"kiosk-*": "a"}`, `["a", "b"]`, `{"a?b*": "` + sha("x") + `"}`, `{"*": "x"}`, `{"[": "x"}`, `{"a": ""}`, `{"k-*": {"token": "a", "maxPeers": 3}}`, `{"k": {"token": "a"}}`} {
		f.Add(s, "kiosk-1", "a")
	}
	f.Fuzz(func(t *testing.T, tokens, peer, token string) {
		cfg, err := Parse([]byte(tokensConfig(tokens)))
		if err != nil {
			return
		}
		tok := cfg.Channels["c"].Config.Tokens
		for k, v := range tok.ByPeer {
			if err := validPeerPattern(k); err != nil {
				t.Fatalf("key %q parsed but %v", k, err)
			}
			if _, err := ParseDeviceToken(v); err != nil {
				t.Fatalf("value parsed but %v", err)
			}
		}
		for k, n := range tok.MaxPeers {
			if !IsGlob(k) || n < 1 || n > MaxGlobMaxPeers || tok.GlobMax(k) != n {
				t.Fatalf("maxPeers %d of %q parsed", n, k)
			}
		}
		allowed := tok.Allows(peer, token)
		if allowed && !tok.Known(token) {
			t.Fatalf("Allows(%q, %q) but the token is not Known", peer, token)
		}
		if want, ok := tok.Exact(peer); ok && allowed && want != DigestOf(token) {
			t.Fatalf("peer %q allowed with a token other than its exact one", peer)
		}
	})
}

// A glob's entry may be {"token", "maxPeers"}: the cap on the peers of
// its shared token (default DefaultGlobMaxPeers); the token matches as a
// plain entry's does.
func TestGlobMaxPeers(t *testing.T) {
	cfg, err := Parse([]byte(tokensConfig(`{"kiosk-*": {"token": "shared", "max_peers": 50}, "desk-*": {"token": "` + sha("desk") + `"}, "lobby-?": "lobby", "pi-1": {"token": "one"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	tok := cfg.Channels["c"].Config.Tokens
	if !tok.Allows("kiosk-7", "shared") || !tok.Allows("desk-1", "desk") || !tok.Allows("pi-1", "one") || tok.Allows("pi-1", "shared") {
		t.Fatal("an entry given as an object does not match as its token")
	}
	for glob, want := range map[string]int{"kiosk-*": 50, "desk-*": DefaultGlobMaxPeers, "lobby-?": DefaultGlobMaxPeers} {
		if got := tok.GlobMax(glob); got != want {
			t.Errorf("GlobMax(%s) = %d, want %d", glob, got, want)
		}
	}
	if g, ok := tok.GlobOf("kiosk-7", DigestOf("shared")); !ok || g != "kiosk-*" {
		t.Errorf("GlobOf = %q %v", g, ok)
	}
	if _, ok := tok.GlobOf("kiosk-7", DigestOf("desk")); ok {
		t.Error("GlobOf matched another glob's token")
	}
	// Two globs with one token: the first in byte order counts the peer.
	tok = Tokens{ByPeer: map[string]string{"kiosk-*": "x", "kiosk-?": "x"}}
	if g, _ := tok.GlobOf("kiosk-1", DigestOf("x")); g != "kiosk-*" {
		t.Errorf("GlobOf of two matching globs = %q", g)
	}
}

func TestGlobMaxPeersErrors(t *testing.T) {
	for _, c := range []struct{ tokens, want string }{
		{`{"kiosk-*": {"token": "s", "maxPeers": 0}}`, `tokens."kiosk-*".maxPeers: must be an integer between 1 and 100000, got 0`},
		{`{"kiosk-*": {"token": "s", "maxPeers": 100001}}`, `tokens."kiosk-*".maxPeers: must be an integer between 1 and 100000, got 100001`},
		{`{"pi-1": {"token": "secret-value", "maxPeers": 5}}`, `tokens.pi-1.maxPeers: only a glob's entry (a shared token, like "kiosk-*") takes maxPeers; "pi-1" is one peer`},
		{`{"kiosk-*": {"maxPeers": 5}}`, `tokens."kiosk-*": an entry given as an object needs "token"`},
		{`{"kiosk-*": {"token": "s", "max": 5}}`, `tokens."kiosk-*".max: unknown key (known: token, maxPeers)`},
		{`{"kiosk-*": {"token": "has space"}}`, `tokens."kiosk-*".token: must not contain spaces`},
		{`{"kiosk-*": {"token": 5}}`, `tokens."kiosk-*".token: must be a string, got number`},
	} {
		_, err := Parse([]byte(tokensConfig(c.tokens)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tokens %s: error %v, want %q", c.tokens, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "secret-value") || strings.Contains(err.Error(), "has space")) {
			t.Errorf("error shows the token: %v", err)
		}
	}
}
