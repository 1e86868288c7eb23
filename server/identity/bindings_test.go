package identity

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/link"
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

// Every rule of decide, in its order, on one store: exact beats learnt,
// learnt beats glob, a bound or owned token is refused for another peer,
// a list token binds once, a stale first-use binding binds nothing.
func TestAuthorizeRules(t *testing.T) {
	dir := t.TempDir()
	b := openTestBindings(t, dir)
	tokens := config.Tokens{
		ByPeer: map[string]string{"pi-1": "tok-pi-1", "kiosk-*": "kiosk-shared"},
		Any:    []string{"lab-one", "lab-two"},
	}
	if err := b.Enroll(config.DigestOf("enrolled-tok"), Binding{PeerID: "lobby", Source: BindEnrolled, Name: "Lobby", Tags: map[string]string{"site": "hq"}}); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		peer, token  string
		ok, takeover bool
		bound        bool
		why          string
	}{
		{"pi-1", "tok-pi-1", true, false, false, ""},
		{"pi-1", "lab-one", false, true, false, "has its own token in the config"},
		{"pi-1", "", false, false, false, "no token"},
		{"pi-9", "tok-pi-1", false, false, false, "belongs to another peer_id in the config"},
		{"kiosk-3", "kiosk-shared", true, false, false, ""},
		{"desk-1", "kiosk-shared", false, false, false, "not valid for this peer_id"},
		{"lab-a", "lab-one", true, false, true, ""},
		{"lab-a", "lab-one", true, false, false, ""}, // bound already
		{"lab-b", "lab-one", false, false, false, "bound to another peer_id (first-use)"},
		{"lab-a", "lab-two", false, true, false, "is bound to another token (first-use"},
		{"lobby", "enrolled-tok", true, false, false, ""},
		{"lobby", "lab-two", false, true, false, "is bound to another token (enrolled"},
		{"lab-c", "enrolled-tok", false, false, false, "bound to another peer_id (enrolled)"},
		{"lab-c", "nope", false, false, false, "not valid for this peer_id"},
	} {
		d := b.Authorize(tokens, tc.peer, tc.token, "192.0.2.1:5")
		if d.OK != tc.ok || d.Takeover != tc.takeover || d.Bound != tc.bound || !strings.Contains(d.Why, tc.why) || (tc.why == "") != (d.Why == "") {
			t.Errorf("%d: %s with %q: %+v, want ok %v takeover %v bound %v why %q", i, tc.peer, tc.token, d, tc.ok, tc.takeover, tc.bound, tc.why)
		}
	}
	// The enrolled peer's connect takes the operator's name and tags.
	f := &link.Connect{PeerID: "lobby", DeviceName: "mine", Tags: map[string]string{"own": "1"}}
	b.Authorize(tokens, "lobby", "enrolled-tok", "").Apply(f)
	if f.DeviceName != "Lobby" || f.Tags["site"] != "hq" || f.Tags["own"] != "1" {
		t.Errorf("applied: %+v", f)
	}
	if !b.Known(config.DigestOf("enrolled-tok")) || b.Known(config.DigestOf("lab-one")) {
		t.Error("Known is for enrolled tokens only (a first-use token is known by the config)")
	}

	// lab-one leaves the config: its binding is stale, the token refused
	// and lab-a free for lab-two.
	tokens.Any = []string{"lab-two"}
	if d := b.Authorize(tokens, "lab-a", "lab-one", ""); d.OK || !strings.Contains(d.Why, "not valid") {
		t.Errorf("a token out of the config: %+v", d)
	}
	if d := b.Authorize(tokens, "lab-a", "lab-two", ""); !d.OK || !d.Bound {
		t.Errorf("lab-two on lab-a after lab-one left: %+v", d)
	}

	// What was learnt survives a reopen, in a private file.
	again := openTestBindings(t, dir)
	var peers []string
	for _, bd := range again.List() {
		peers = append(peers, bd.PeerID+"/"+bd.Source)
	}
	if got := strings.Join(peers, " "); got != "lab-a/first-use lobby/enrolled" {
		t.Errorf("reopened: %s", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ch.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file: %v %v", fi, err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "ch.json"))
	if strings.Contains(string(raw), "lab-two") || strings.Contains(string(raw), "enrolled-tok") {
		t.Errorf("the file holds a token:\n%s", raw)
	}
}

// Enroll refuses a peer with a binding; Reset frees it; a reset enrolled
// token stops being known.
func TestEnrollAndReset(t *testing.T) {
	b := openTestBindings(t, t.TempDir())
	now := time.Now().UTC()
	if err := b.Enroll(config.DigestOf("t1"), Binding{PeerID: "p", Source: BindEnrolled, BoundAt: now}); err != nil {
		t.Fatal(err)
	}
	err := b.Enroll(config.DigestOf("t2"), Binding{PeerID: "p", Source: BindEnrolled, BoundAt: now})
	if !errors.Is(err, ErrClaimed) || !strings.Contains(err.Error(), "DELETE /api/channels/{channel_id}/bindings/p") {
		t.Fatalf("second enroll of p: %v", err)
	}
	if old, err := b.Reset("p"); err != nil || old == nil || old.PeerID != "p" {
		t.Fatalf("reset: %+v %v", old, err)
	}
	if old, err := b.Reset("p"); err != nil || old != nil {
		t.Fatalf("reset again: %+v %v", old, err)
	}
	if b.Known(config.DigestOf("t1")) {
		t.Fatal("a reset token is still known")
	}
	if err := b.Enroll(config.DigestOf("t2"), Binding{PeerID: "p", Source: BindEnrolled, BoundAt: now}); err != nil {
		t.Fatalf("enroll after reset: %v", err)
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

// Connects racing with one list token as different peers: exactly one
// binds it.
func TestAuthorizeBindsOnce(t *testing.T) {
	b := openTestBindings(t, t.TempDir())
	tokens := config.Tokens{Any: []string{"lab"}}
	const n = 16
	oks := make(chan bool, n)
	for i := range n {
		go func() { oks <- b.Authorize(tokens, "peer-"+string(rune('a'+i)), "lab", "").OK }()
	}
	won := 0
	for range n {
		if <-oks {
			won++
		}
	}
	if won != 1 || len(b.List()) != 1 {
		t.Fatalf("%d connects allowed, %d bindings; want 1 and 1", won, len(b.List()))
	}
}
