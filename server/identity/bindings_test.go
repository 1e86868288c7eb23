package identity

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/server/config"
)

func openTestBindings(t *testing.T, dir string) *LocalBindings {
	t.Helper()
	b, err := OpenLocalBindings(dir, "ch", true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// What LocalBindings learns is kept in a private file of digests, never
// the tokens, and read again on open (the contract's reopen covers what
// is read; this covers the file).
func TestLocalBindingsFile(t *testing.T) {
	dir := t.TempDir()
	b := openTestBindings(t, dir)
	if err := b.Enroll(config.DigestOf("enrolled-tok"), Binding{PeerID: "lobby", Source: BindEnrolled}); err != nil {
		t.Fatal(err)
	}
	if d := b.Authorize(config.Tokens{Any: []string{"lab-two"}}, "lab-a", "lab-two", ""); !d.OK || !d.Bound {
		t.Fatalf("first use: %+v", d)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ch.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file: %v %v", fi, err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "ch.json"))
	if strings.Contains(string(raw), "lab-two") || strings.Contains(string(raw), "enrolled-tok") || !strings.Contains(string(raw), `"lobby"`) {
		t.Errorf("the file holds a token, or not the bindings:\n%s", raw)
	}
}

// A file that does not parse, or holds a bad binding, is refused with
// what to do.
func TestOpenLocalBindingsRefusesBadFile(t *testing.T) {
	for body, want := range map[string]string{
		"{": "fix or remove the file",
		`{"bindings":[{"peer_id":"p","token_sha256":"xyz"}]}`: "binding 0: bad peer_id or token_sha256",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "ch.json"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenLocalBindings(dir, "ch", true, slog.Default()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// A connect a glob's shared token lets in says which glob (its peers are
// counted against it), and SharedCredential says the same; a peer's own
// credential (its exact token, its enrolled token) is not shared.
func TestSharedCredential(t *testing.T) {
	b := openTestBindings(t, t.TempDir())
	tokens := config.Tokens{ByPeer: map[string]string{"kiosk-1": "own", "kiosk-*": "shared"}, MaxPeers: map[string]int{"kiosk-*": 7}}
	if err := b.Enroll(config.DigestOf("enrolled"), Binding{PeerID: "kiosk-9", Source: BindEnrolled}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		peer, token, glob string
		max               int
	}{
		{"kiosk-2", "shared", "kiosk-*", 7},
		{"kiosk-1", "own", "", 0},
		{"kiosk-9", "enrolled", "", 0},
	} {
		d := b.Authorize(tokens, c.peer, c.token, "")
		glob, max, ok := SharedCredential(tokens, c.peer, c.token)
		if !d.OK || d.Shared != c.glob || glob != c.glob || max != c.max || ok != (c.glob != "") {
			t.Errorf("%s with %s: decision %+v, SharedCredential %q %d %v; want glob %q max %d", c.peer, c.token, d, glob, max, ok, c.glob, c.max)
		}
	}
	if _, _, ok := SharedCredential(tokens, "kiosk-1", "shared"); ok {
		t.Error("a peer with its own token in the config counted as the glob's")
	}
}
