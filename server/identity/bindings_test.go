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
