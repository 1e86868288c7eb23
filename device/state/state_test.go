package state

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each state dir gets its own random peer id, generated once and kept;
// an id already kept stays, whatever made it (an older termd derived it
// from /etc/machine-id); a state dir that cannot keep one gets an id that
// is stable across restarts and still differs from another state dir's.
func TestPeerIDPerStateDir(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{a, b} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	idA, unkept, err := PeerID(a)
	if err != nil || unkept != nil {
		t.Fatalf("PeerID(a): %v %v", unkept, err)
	}
	idB, _, err := PeerID(b)
	if err != nil {
		t.Fatal(err)
	}
	if idA == idB {
		t.Fatalf("two state dirs on one host share the peer id %s", idA)
	}
	if again, _, _ := PeerID(a); again != idA {
		t.Fatalf("state dir a: %s then %s", idA, again)
	}
	if kept, _ := os.ReadFile(filepath.Join(a, "peer_id")); strings.TrimSpace(string(kept)) != idA {
		t.Fatalf("state dir a keeps %q, termd uses %s", kept, idA)
	}

	// An id an older termd derived from the machine id stays.
	old := filepath.Join(root, "old")
	os.MkdirAll(old, 0o700)
	sum := sha256.Sum256([]byte("termd peer id\nsomemachine"))
	legacy := "termd-" + hex.EncodeToString(sum[:6])
	os.WriteFile(filepath.Join(old, "peer_id"), []byte(legacy+"\n"), 0o600)
	if id, _, err := PeerID(old); err != nil || id != legacy {
		t.Fatalf("an existing state dir: %s %v, want its id %s kept", id, err, legacy)
	}

	// State dirs that cannot keep an id (a file where the dir should be).
	badA, badB := filepath.Join(root, "badA"), filepath.Join(root, "badB")
	for _, f := range []string{badA, badB} {
		os.WriteFile(f, []byte("not a dir\n"), 0o600)
	}
	f1, unkept, err := PeerID(badA)
	if err != nil || unkept == nil {
		t.Fatalf("unusable state dir: id %s unkept %v err %v", f1, unkept, err)
	}
	f2, _, _ := PeerID(badA)
	f3, _, _ := PeerID(badB)
	if _, err := os.Stat("/etc/machine-id"); err == nil && f1 != f2 {
		t.Errorf("an unusable state dir: %s then %s, want the same id at each start", f1, f2)
	}
	if f1 == f3 {
		t.Errorf("two unusable state dirs share the peer id %s", f1)
	}
}

// KeepPeerID replaces the kept id (the operator approved another one)
// and leaves nothing else in the state dir.
func TestKeepPeerIDReplaces(t *testing.T) {
	dir := t.TempDir()
	first, unkept, err := PeerID(dir)
	if err != nil || unkept != nil {
		t.Fatalf("PeerID: %v %v", unkept, err)
	}
	if err := KeepPeerID(dir, "lobby-7"); err != nil {
		t.Fatal(err)
	}
	if id, _, err := PeerID(dir); err != nil || id != "lobby-7" {
		t.Fatalf("after KeepPeerID: %s %v, want lobby-7 (was %s)", id, err, first)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("state dir holds %d entries, want only %s", len(ents), PeerIDFile)
	}
	if err := CheckPeerID("a:b"); err == nil {
		t.Fatal(`CheckPeerID("a:b") accepted it`)
	}
}
