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
	for _, s := range []string{`{"kiosk-*": "a"}`, `["a", "b"]`, `{"a?b*": "` + sha("x") + `"}`, `{"*": "x"}`, `{"[": "x"}`, `{"a": ""}`} {
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
		allowed := tok.Allows(peer, token)
		if allowed && !tok.Known(token) {
			t.Fatalf("Allows(%q, %q) but the token is not Known", peer, token)
		}
		if want, ok := tok.Exact(peer); ok && allowed && want != DigestOf(token) {
			t.Fatalf("peer %q allowed with a token other than its exact one", peer)
		}
	})
}
